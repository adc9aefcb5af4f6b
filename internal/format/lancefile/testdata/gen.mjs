// Test-table generator for the lancefile reader tests: writes tables with
// real lance 8.0.0 (@lancedb/lancedb 0.31.0 from testenv/oracle) and dumps
// real Lance's full scan of each as an Arrow IPC file <out>/<table>.arrow.
// usage: node gen.mjs <oracle node_modules parent dir> <outdir> [table...]
import { createRequire } from "module";
import fs from "fs";
import path from "path";
const [oracleDir, out, ...only] = process.argv.slice(2);
const require = createRequire(path.join(oracleDir, "package.json"));
const lancedb = require("@lancedb/lancedb");
const arrow = require("apache-arrow");
const db = await lancedb.connect(path.join(out, "db"));
const F = (n, t, nullable = true, md = null) => new arrow.Field(n, t, nullable, md ? new Map(Object.entries(md)) : null);
const f32 = () => new arrow.Float32();

function batchFrom(schema, cols, n) {
  const children = schema.fields.map((f) => arrow.vectorFromArray(cols[f.name], f.type).data[0]);
  const data = arrow.makeData({ type: new arrow.Struct(schema.fields), length: n, nullCount: 0, children });
  return new arrow.RecordBatch(schema, data);
}
async function make(name, schema, nbatches, per, gen, opts = {}) {
  if (only.length && !only.includes(name)) return;
  const batches = [];
  for (let b = 0; b < nbatches; b++) {
    const cols = {}; for (const f of schema.fields) cols[f.name] = [];
    for (let j = 0; j < per; j++) { const i = b * per + j; const r = gen(i); for (const f of schema.fields) cols[f.name].push(r[f.name]); }
    batches.push(batchFrom(schema, cols, per));
  }
  const t = await db.createTable(name, new arrow.Table(batches), { mode: "overwrite", ...opts });
  const got = await t.query().toArrow();
  fs.writeFileSync(path.join(out, name + ".arrow"), arrow.tableToIPC(got, "file"));
}
const str = (i, n) => ("s" + i + "-").repeat(n).slice(0, n);

await make("types", new arrow.Schema([
  F("id", new arrow.Int64(), false), F("i32", new arrow.Int32()), F("f32", f32()), F("b", new arrow.Bool()),
  F("s", new arrow.Utf8()), F("cat", new arrow.Utf8()),
  F("vec", new arrow.FixedSizeList(8, F("item", f32()))),
  F("tags", new arrow.List(F("item", new arrow.Utf8()))),
  F("st", new arrow.Struct([F("x", new arrow.Int32()), F("y", new arrow.Utf8())])),
  F("ts", new arrow.TimestampMicrosecond()),
  F("i8", new arrow.Int8()), F("u16", new arrow.Uint16()), F("u32", new arrow.Uint32()), F("u64", new arrow.Uint64()),
  F("i16", new arrow.Int16()), F("f64", new arrow.Float64()), F("d32", new arrow.DateDay()),
  F("lbin", new arrow.LargeBinary()), F("lstr", new arrow.LargeUtf8()), F("empty_s", new arrow.Utf8()),
  F("tsms", new arrow.TimestampMillisecond()),
]), 1, 5000, (i) => ({
  id: BigInt(i), i32: i % 11 == 0 ? null : i * 7 - 9000, f32: i * 0.25, b: i % 7 == 0 ? null : i % 3 == 0,
  s: i % 13 == 0 ? null : "value-" + i + "-" + "x".repeat(i % 50), cat: ["red", "green", "blue"][i % 3],
  vec: i % 17 == 0 ? null : Array.from({ length: 8 }, (_, k) => i + k * 0.5),
  tags: i % 5 == 0 ? null : (i % 5 == 1 ? [] : ["a" + i, "b"]),
  st: i % 9 == 0 ? null : { x: i % 4 == 0 ? null : i, y: "y" + i },
  ts: i % 10 == 0 ? null : 1700000000000 + i,
  i8: (i % 256) - 128, u16: i % 65536, u32: i * 100003 % 4294967296, u64: BigInt(i) * 1000000007n,
  i16: i % 2 == 0 ? -i : i, f64: i % 3 == 0 ? null : Math.sin(i), d32: new Date(86400000 * (19000 + i)),
  lbin: i % 8 == 0 ? null : Uint8Array.from([i & 255, (i >> 8) & 255, 1, 2, 3]),
  lstr: i % 6 == 0 ? null : "large-" + i, empty_s: i % 2 == 0 ? "" : null,
  tsms: 1700000000000 + i * 1000,
}));

await make("layouts", new arrow.Schema([
  F("allnull_i32", new arrow.Int32()), F("allnull_s", new arrow.Utf8()),
  F("allnull_list", new arrow.List(F("item", new arrow.Int32()))),
  F("list_i32", new arrow.List(F("item", new arrow.Int32()))),
  F("st_null", new arrow.Struct([F("a", new arrow.Int32()), F("b", new arrow.Utf8())])),
  F("fsl_null", new arrow.FixedSizeList(4, F("item", f32()))),
  F("fsl_items_null", new arrow.FixedSizeList(4, F("item", f32()))),
  F("bigstr", new arrow.Utf8()), F("bin", new arrow.Binary()),
  F("vec128", new arrow.FixedSizeList(128, F("item", f32())), false),
  F("vec128_null", new arrow.FixedSizeList(128, F("item", f32()))),
  F("sorted", new arrow.Int32(), false), F("const_i64", new arrow.Int64(), false),
  F("f64", new arrow.Float64()), F("u8", new arrow.Uint8()), F("date", new arrow.DateDay()),
  F("list_struct", new arrow.List(F("item", new arrow.Struct([F("p", new arrow.Int32()), F("q", new arrow.Float64())])))),
  F("nested_list", new arrow.List(F("item", new arrow.List(F("item", new arrow.Int64()))))),
  F("huge", new arrow.Utf8()),
  F("st_list", new arrow.Struct([F("l", new arrow.List(F("item", new arrow.Int32()))), F("z", new arrow.Int32())])),
]), 3, 1000, (i) => ({
  allnull_i32: null, allnull_s: null, allnull_list: null,
  list_i32: i % 7 == 0 ? null : (i % 7 == 1 ? [] : [i, i % 3 == 0 ? null : i + 1, i + 2]),
  st_null: i % 4 == 0 ? null : { a: i % 5 == 0 ? null : i, b: "b" + i },
  fsl_null: i % 6 == 0 ? null : [i, i + 1, i + 2, i + 3],
  fsl_items_null: [i, i % 2 == 0 ? null : 1, 2, 3],
  bigstr: i % 9 == 0 ? null : ("L" + i + "-").repeat(80).slice(0, 300 + (i % 50)),
  bin: i % 8 == 0 ? null : Uint8Array.from([i & 255, (i >> 8) & 255, 1, 2, 3]),
  vec128: Float32Array.from({ length: 128 }, (_, k) => i + k),
  vec128_null: i % 10 == 0 ? null : Float32Array.from({ length: 128 }, (_, k) => i - k),
  sorted: Math.floor(i / 100), const_i64: 42n,
  f64: i % 3 == 0 ? null : Math.sin(i), u8: i % 200,
  date: i % 5 == 0 ? null : new Date(86400000 * (19000 + i)),
  list_struct: i % 5 == 0 ? [] : [{ p: i, q: i * 0.5 }, { p: -i, q: null }],
  nested_list: i % 6 == 0 ? null : [[BigInt(i)], [], [BigInt(i + 1), BigInt(i + 2)]],
  huge: i % 500 == 0 ? str(i, 40000) : (i % 7 == 0 ? null : "h" + i),
  st_list: i % 8 == 0 ? null : { l: i % 3 == 0 ? null : [i, i + 1], z: i },
}));

await make("comp", new arrow.Schema([
  F("z_i64", new arrow.Int64(), true, { "lance-encoding:compression": "zstd" }),
  F("l_f64", new arrow.Float64(), true, { "lance-encoding:compression": "lz4" }),
  F("bss_f32", new arrow.Float32(), true, { "lance-encoding:compression": "zstd", "lance-encoding:bss": "on" }),
  F("z_str", new arrow.Utf8(), true, { "lance-encoding:compression": "zstd" }),
  F("none_i32", new arrow.Int32(), true, { "lance-encoding:compression": "none" }),
  F("none_str", new arrow.Utf8(), true, { "lance-encoding:compression": "none" }),
  F("fz_vec", new arrow.FixedSizeList(4, F("item", f32())), true, { "lance-encoding:structural-encoding": "fullzip" }),
  F("packed", new arrow.Struct([F("x", new arrow.Int32(), false), F("y", new arrow.Float64(), false)]), true, { "lance-encoding:packed": "true" }),
  F("huge", new arrow.Utf8()),
]), 2, 2500, (i) => ({
  z_i64: BigInt(i * 1000), l_f64: i * 0.1, bss_f32: Math.fround(100.0 + Math.sin(i)), z_str: "zstd string " + (i % 100),
  none_i32: i, none_str: "s" + i, fz_vec: [i, i, i, i], packed: { x: i, y: i * 2.5 },
  huge: i % 1000 == 0 ? "H".repeat(40000) + i : "h" + i,
}));

await make("pages", new arrow.Schema([
  F("id", new arrow.Int64(), false),
  F("emb", new arrow.FixedSizeList(16, F("item", f32())), false),
  F("txt", new arrow.Utf8(), false),
]), 20, 10000, (i) => ({
  id: BigInt(i), emb: Float32Array.from({ length: 16 }, (_, k) => i * 0.001 + k), txt: "row number " + i + " " + "abcdefghij".repeat(3),
}));

await make("types20", new arrow.Schema([
  F("id", new arrow.Int64(), false), F("i32", new arrow.Int32()), F("f32", f32()), F("b", new arrow.Bool()),
  F("s", new arrow.Utf8()), F("cat", new arrow.Utf8()),
  F("vec", new arrow.FixedSizeList(8, F("item", f32()))),
  F("tags", new arrow.List(F("item", new arrow.Utf8()))),
  F("st", new arrow.Struct([F("x", new arrow.Int32()), F("y", new arrow.Utf8())])),
  F("ts", new arrow.TimestampMicrosecond()),
  F("lst_i", new arrow.List(F("item", new arrow.Int32()))),
]), 2, 2500, (i) => ({
  id: BigInt(i), i32: i % 11 == 0 ? null : i, f32: i * 0.25, b: i % 3 == 0, s: i % 13 == 0 ? null : "value-" + i + "-" + "x".repeat(i % 50),
  cat: ["red", "green", "blue"][i % 3], vec: Array.from({ length: 8 }, (_, k) => i + k * 0.5),
  tags: i % 5 == 0 ? null : ["a" + i, "b"], st: { x: i, y: "y" + i }, ts: 1700000000000 + i,
  lst_i: i % 4 == 0 ? null : (i % 4 == 1 ? [] : [i, i % 3 == 0 ? null : i + 1]),
}), { storageOptions: { new_table_data_storage_version: "2.0" } });

// Arrow dictionary columns (lance returns them as dictionaries).
{
  const n = 500;
  if (!only.length || only.includes("dict")) {
    const vals = Array.from({ length: n }, (_, i) => i % 11 == 0 ? null : ["red", "green", "blue"][i % 3]);
    const tbl = new arrow.Table({
      id: arrow.vectorFromArray(Array.from({ length: n }, (_, i) => i), new arrow.Int32()),
      cat: arrow.vectorFromArray(vals, new arrow.Dictionary(new arrow.Utf8(), new arrow.Int32())),
    });
    const t = await db.createTable("dict", tbl, { mode: "overwrite" });
    fs.writeFileSync(path.join(out, "dict.arrow"), arrow.tableToIPC(await t.query().toArrow(), "file"));
  }
}

// Lists longer than a mini-block chunk: rows span several chunks.
await make("longlist", new arrow.Schema([
  F("id", new arrow.Int32(), false),
  F("ll", new arrow.List(F("item", new arrow.Int64()))),
]), 1, 300, (i) => ({
  id: i, ll: i % 7 == 3 ? null : Array.from({ length: i % 5 == 0 ? 1500 + i : 3 }, (_, k) => BigInt(i * 10000 + k)),
}));
