// Builds the indexed benchmark table with real Lance: FRAGS appends of ROWS
// rows (id int64, text utf8 of 6-13 words, vec fixed_size_list<float32,128>),
// then a BTree on id, an IVF_PQ on vec (256 partitions, 16 sub-vectors, l2)
// and an FTS index on text, then `delete id % 10 = 0` (10% of rows) and one
// unindexed append of ROWS/10 rows.
// usage: node genindexed.mjs <uri> <frags> <rows>
import { lancedb, splitTableURI } from "../oracle/lib.mjs";
import { makeBatcher } from "./benchdata.mjs";

const [uri, fragsArg, rowsArg] = process.argv.slice(2);
const frags = Number(fragsArg), rows = Number(rowsArg);
const { root, name } = splitTableURI(uri);
const db = await lancedb.connect(root);
const batch = makeBatcher(12345);
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
