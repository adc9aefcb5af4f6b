// Builds the catch-up benchmark table from a copy of an indexed table: real
// Lance's optimize() first (compacted, every row indexed), then, with
// "vector-only", the scalar indices dropped (lanced catches up vector
// indices only), then APPENDS appends of ROWS rows (about 10% new rows,
// unindexed).
// usage: node gencatchup.mjs <uri> <appends> <rows> [vector-only]
import { lancedb, splitTableURI } from "../oracle/lib.mjs";
import { makeBatcher } from "./benchdata.mjs";

const [uri, appendsArg, rowsArg, mode] = process.argv.slice(2);
const appends = Number(appendsArg), rows = Number(rowsArg);
const { root, name } = splitTableURI(uri);
const db = await lancedb.connect(root);
const t = await db.openTable(name);
await t.optimize();
if (mode === "vector-only") {
  for (const ix of await t.listIndices()) {
    if (ix.name !== "vec_idx") await t.dropIndex(ix.name);
  }
}
const batch = makeBatcher(777);
const start = 100000000;
for (let a = 0; a < appends; a++) await t.add(batch(start + a * rows, rows));
const stats = {};
for (const ix of await t.listIndices()) {
  const s = await t.indexStats(ix.name);
  stats[ix.name] = { indexed: s.numIndexedRows, unindexed: s.numUnindexedRows };
}
console.log(JSON.stringify({ rows: await t.countRows(), version: await t.version(), indices: stats }));
