// Writes testdata/tiny21.lance and tiny20.lance (the data files of t21/t20) with lance 8.0.0.
import { createRequire } from "module";
const require = createRequire(new URL("../../../../testenv/oracle/package.json", import.meta.url));
const lancedb = require("@lancedb/lancedb");
const arrow = require("apache-arrow");
const db = await lancedb.connect("/tmp/tiny/db");
const F = (n, t, nullable = true) => new arrow.Field(n, t, nullable);
const schema = new arrow.Schema([
  F("id", new arrow.Int64(), false), F("s", new arrow.Utf8()), F("b", new arrow.Bool()),
  F("l", new arrow.List(F("item", new arrow.Int32()))),
  F("st", new arrow.Struct([F("x", new arrow.Int32()), F("y", new arrow.Utf8())])),
  F("v", new arrow.FixedSizeList(4, F("item", new arrow.Float32()))),
  F("cat", new arrow.Utf8()),
]);
const n = 300;
const cols = { id: [], s: [], b: [], l: [], st: [], v: [], cat: [] };
for (let i = 0; i < n; i++) {
  cols.id.push(BigInt(i)); cols.s.push(i % 7 == 0 ? null : "str" + i); cols.b.push(i % 5 == 0 ? null : i % 2 == 0);
  cols.l.push(i % 6 == 0 ? null : (i % 6 == 1 ? [] : [i, i % 4 == 0 ? null : i + 1]));
  cols.st.push(i % 9 == 0 ? null : { x: i, y: "y" + i }); cols.v.push([i, i + 1, i + 2, i + 3]); cols.cat.push(["a", "b", "c"][i % 3]);
}
const children = schema.fields.map((f) => arrow.vectorFromArray(cols[f.name], f.type).data[0]);
const data = arrow.makeData({ type: new arrow.Struct(schema.fields), length: n, nullCount: 0, children });
const tbl = new arrow.Table([new arrow.RecordBatch(schema, data)]);
await db.createTable("t21", tbl, { mode: "overwrite" });
await db.createTable("t20", tbl, { mode: "overwrite", storageOptions: { new_table_data_storage_version: "2.0" } });
