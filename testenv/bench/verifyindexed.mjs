// Checks an indexed benchmark table with real Lance after compaction: per
// index its indexStats, and queries that the indices serve (BTree equality
// and range, FTS match, IVF_PQ search) with whether each plan goes through
// the index and what it returns.
// usage: node verifyindexed.mjs <uri>
import { lancedb, splitTableURI } from "../oracle/lib.mjs";
const { root, name } = splitTableURI(process.argv[2]);
const db = await lancedb.connect(root);
const t = await db.openTable(name);
const out = { rows: await t.countRows(), version: await t.version(), fragments: (await t.stats()).fragmentStats?.numFragments, indices: {} };
for (const ix of await t.listIndices()) {
  const s = await t.indexStats(ix.name);
  out.indices[ix.name] = { type: ix.indexType, indexed: s.numIndexedRows, unindexed: s.numUnindexedRows, segments: s.numIndices };
}
const ids = (rs) => rs.map((r) => Number(r.id)).sort((a, b) => a - b);
const q = async (name, query, usesIndex) => {
  const plan = await query.explainPlan(true);
  const rs = await query.toArray();
  out[name] = { rows: rs.length, ids_digest: ids(rs).slice(0, 20), via_index: usesIndex(plan) };
};
// A table without the scalar indices (the vector-only catch-up table) is
// checked through its vector index only.
if (out.indices.id_idx) {
  await q("btree_eq", t.query().where("id = 12347").select(["id"]), (p) => /ScalarIndexQuery|MaterializeIndex/.test(p));
  await q("btree_range", t.query().where("id >= 20000 AND id < 20100").select(["id"]), (p) => /ScalarIndexQuery|MaterializeIndex/.test(p));
}
if (out.indices.text_idx) {
  const ftsQ = t.search("quebec", "fts").select(["id"]).limit(1000000);
  await q("fts", ftsQ, (p) => /MatchQuery|FtsIndex|FTS/i.test(p));
}
const v = Array.from({ length: 128 }, (_, j) => ((5 * 31 + j * 7) % 64) / 64);
const vq = () => t.search(v).column("vec").select(["id"]).limit(10);
await q("vector", vq().nprobes(256), (p) => /ANNSubIndex|ANNIvf/.test(p));
const exact = ids(await vq().bypassVectorIndex().toArray());
const got = out.vector.ids_digest;
out.vector.recall_at_10_vs_exact = got.filter((x) => exact.includes(x)).length / exact.length;
console.log(JSON.stringify(out));
