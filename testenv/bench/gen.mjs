// Builds a benchmark table with real Lance: FRAGS appends of ROWS rows
// (id int64, category utf8, value float64, note utf8 ~60 bytes, vec
// fixed_size_list<float32,16>), then BACKFILLS add_columns backfills.
// usage: node gen.mjs <uri> <frags> <rows> [backfills]
import { lancedb, arrow, splitTableURI } from "../oracle/lib.mjs";

const [uri, fragsArg, rowsArg, bfArg] = process.argv.slice(2);
const frags = Number(fragsArg), rows = Number(rowsArg), backfills = Number(bfArg ?? 0);
const { root, name } = splitTableURI(uri);
const db = await lancedb.connect(root);
const words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"];
let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
const schema = new arrow.Schema([
  new arrow.Field("id", new arrow.Int64(), false),
  new arrow.Field("category", new arrow.Utf8(), true),
  new arrow.Field("value", new arrow.Float64(), true),
  new arrow.Field("note", new arrow.Utf8(), true),
  new arrow.Field("vec", new arrow.FixedSizeList(16, new arrow.Field("item", new arrow.Float32(), true)), true),
]);
function batch(start) {
  const ids = new BigInt64Array(rows), vals = new Float64Array(rows), vec = new Float32Array(rows * 16);
  const cats = [], notes = [];
  for (let i = 0; i < rows; i++) {
    const id = start + i;
    ids[i] = BigInt(id);
    vals[i] = id * 0.25;
    cats.push(`cat-${id % 17}`);
    const n = 4 + Math.floor(rnd() * 8);
    const ws = [];
    for (let k = 0; k < n; k++) ws.push(words[Math.floor(rnd() * words.length)]);
    notes.push(ws.join(" "));
    for (let k = 0; k < 16; k++) vec[i * 16 + k] = rnd();
  }
  const vecData = arrow.makeData({ type: schema.fields[4].type, length: rows, nullCount: 0,
    child: arrow.makeData({ type: new arrow.Float32(), length: rows * 16, data: vec }) });
  return new arrow.Table(schema, {
    id: arrow.makeVector(ids), category: arrow.vectorFromArray(cats, new arrow.Utf8()),
    value: arrow.makeVector(vals), note: arrow.vectorFromArray(notes, new arrow.Utf8()),
    vec: arrow.makeVector(vecData),
  });
}
const t = await db.createTable(name, batch(0), { mode: "overwrite" });
for (let f = 1; f < frags; f++) await t.add(batch(f * rows));
for (let b = 0; b < backfills; b++) {
  await t.addColumns([{ name: `b${b}`, valueSql: b % 2 ? `concat(category, '-${b}')` : `id * ${b + 2}` }]);
}
console.log(JSON.stringify({ rows: await t.countRows(), version: await t.version() }));
