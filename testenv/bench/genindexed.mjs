// Builds the indexed benchmark table with real Lance: FRAGS appends of ROWS
// rows (id int64, text utf8 of 6-13 words, vec fixed_size_list<float32,128>),
// then a BTree on id, an IVF_PQ on vec (256 partitions, 16 sub-vectors, l2)
// and an FTS index on text, then `delete id % 10 = 0` (10% of rows) and one
// unindexed append of ROWS/10 rows.
// usage: node genindexed.mjs <uri> <frags> <rows>
import { lancedb, arrow, splitTableURI } from "../oracle/lib.mjs";

const [uri, fragsArg, rowsArg] = process.argv.slice(2);
const frags = Number(fragsArg), rows = Number(rowsArg);
const { root, name } = splitTableURI(uri);
const db = await lancedb.connect(root);
const words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
  "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"];
const D = 128;
let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
const vecType = new arrow.FixedSizeList(D, new arrow.Field("item", new arrow.Float32(), true));
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("text", new arrow.Utf8(), true),
  new arrow.Field("vec", vecType, true),
]);
function batch(start, n) {
  const ids = new BigInt64Array(n), vec = new Float32Array(n * D), texts = [];
  for (let i = 0; i < n; i++) {
    ids[i] = BigInt(start + i);
    const k = 6 + Math.floor(rnd() * 8), ws = [];
    for (let j = 0; j < k; j++) ws.push(words[Math.floor(rnd() * rnd() * words.length)]);
    texts.push(ws.join(" "));
    // clustered vectors: 64 centres plus noise, so IVF partitions mean something
    const c = Math.floor(rnd() * 64);
    for (let j = 0; j < D; j++) vec[i * D + j] = ((c * 31 + j * 7) % 64) / 64 + (rnd() - 0.5) * 0.2;
  }
  const vecData = arrow.makeData({ type: vecType, length: n, nullCount: 0,
    child: arrow.makeData({ type: new arrow.Float32(), length: n * D, data: vec }) });
  return new arrow.Table(schema, {
    id: arrow.makeVector(ids), text: arrow.vectorFromArray(texts, new arrow.Utf8()), vec: arrow.makeVector(vecData),
  });
}
const { Index } = lancedb;
const t = await db.createTable(name, batch(0, rows), { mode: "overwrite" });
for (let f = 1; f < frags; f++) await t.add(batch(f * rows, rows));
const t0 = Date.now();
await t.createIndex("id", { config: Index.btree() });
await t.createIndex("vec", { config: Index.ivfPq({ numPartitions: 256, numSubVectors: 16, distanceType: "l2" }) });
await t.createIndex("text", { config: Index.fts({ withPosition: false }) });
const indexSeconds = (Date.now() - t0) / 1000;
await t.delete("id % 10 = 0");
await t.add(batch(frags * rows, Math.floor(rows / 10)));
console.log(JSON.stringify({ rows: await t.countRows(), version: await t.version(), index_seconds: indexSeconds }));
