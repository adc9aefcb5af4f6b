// build.mjs <scenario> <table-uri> [storageOptionsJSON]
//
// Builds one table with real Lance. Every scenario is deterministic in its
// data (not in uuids or timestamps). Shapes are documented in README.md.
// Prints a JSON line {"scenario":..,"uri":..,"version":..,"rows":..}.
import {
  arrow, connectRoot, splitTableURI, parseStorageOptions, rng, sentence, field,
  fixedVector, jsVector, makeArrowTable, concatTables, genColumn, main, isMain, fail, toJSON,
} from "./lib.mjs";

const A = arrow;

// ---- base data: id int64 (non-null), category utf8, value float64, note utf8 (nullable)

const baseFields = [
  field("id", new A.Int64(), false),
  field("category", new A.Utf8()),
  field("value", new A.Float64()),
  field("note", new A.Utf8()),
];

function baseRows(start, n, seed) {
  const r = rng(seed);
  return makeArrowTable(baseFields, [
    fixedVector(new A.Int64(), n, (i) => BigInt(start + i)),
    jsVector(new A.Utf8(), Array.from({ length: n }, (_, i) => `cat-${(start + i) % 7}`)),
    fixedVector(new A.Float64(), n, (i) => (start + i) * 0.5),
    jsVector(new A.Utf8(), Array.from({ length: n }, (_, i) => ((start + i) % 5 === 4 ? null : sentence(r, 1, 5)))),
  ]);
}

async function create(ctx, data, extraOpts = {}) {
  const storageOptions = { ...ctx.storageOptions, ...extraOpts };
  const db = await connectRoot(ctx.root, storageOptions);
  return db.createTable(ctx.name, data, { mode: "create", storageOptions });
}

// appendsOf creates a table of `frags` fragments of `per` rows each.
async function appendsOf(ctx, frags, per, extraOpts = {}, rowsFn = baseRows) {
  const t = await create(ctx, rowsFn(0, per, 1), extraOpts);
  for (let f = 1; f < frags; f++) await t.add(rowsFn(f * per, per, f + 1));
  return t;
}

const scenarios = {
  // 30 fragments of 40 rows: 30 versions, tiny files.
  async appends(ctx) {
    return appendsOf(ctx, 30, 40);
  },

  // 4 fragments x 500 rows; two deletes of a few rows each -> Arrow deletion files.
  async deletes_arrow(ctx) {
    const t = await appendsOf(ctx, 4, 500);
    await t.delete("id % 50 = 0"); // 10 per fragment
    await t.delete("id >= 1990 OR id = 7"); // frag 0 gets a second file, frag 3 grows
    return t;
  },

  // fragment 0: 12000 rows, 6000 deleted in one delete (>= 5000 -> roaring bitmap);
  // fragment 1: 3000 rows with a few (Arrow) deletions; fragment 2 untouched.
  async deletes_bitmap(ctx) {
    const t = await create(ctx, baseRows(0, 12000, 1));
    await t.add(baseRows(12000, 3000, 2));
    await t.add(baseRows(15000, 1000, 3));
    await t.delete("id < 6000");
    await t.delete("id >= 12000 AND id < 15000 AND id % 7 = 0");
    return t;
  },

  // 3 fragments x 300 rows, then two addColumns backfills -> 3 data files per fragment.
  async backfill(ctx) {
    const t = await appendsOf(ctx, 3, 300);
    await t.addColumns([{ name: "doubled", valueSql: "id * 2" }]);
    await t.addColumns([{ name: "label", valueSql: "concat('row-', CAST(id AS STRING))" }]);
    return t;
  },

  // backfill, then drop the first backfilled column and one original column.
  async dropped_column(ctx) {
    const t = await scenarios.backfill(ctx);
    await t.dropColumns(["doubled", "note"]);
    return t;
  },

  // stable row ids; 3 fragments, an update (rewrites rows into a new fragment), deletes.
  async stable_row_ids(ctx) {
    const t = await appendsOf(ctx, 3, 400, { new_table_enable_stable_row_ids: "true" });
    await t.update({ where: "id < 50", values: { value: -1 } });
    await t.delete("id % 10 = 3");
    await t.add(baseRows(1200, 100, 9));
    return t;
  },

  // data storage version 2.0 files; 5 fragments, one delete.
  async v2_0(ctx) {
    const t = await appendsOf(ctx, 5, 200, { new_table_data_storage_version: "2.0" });
    await t.delete("id % 9 = 0");
    return t;
  },

  // V1 manifest naming ({n}.manifest); 6 fragments, one delete.
  async v1_paths(ctx) {
    const t = await appendsOf(ctx, 6, 100, { new_table_enable_v2_manifest_paths: "false" });
    await t.delete("id % 13 = 0");
    return t;
  },

  // BTree on id, IVF_PQ on a 32-d float32 vector, then two unindexed appends.
  async indexed(ctx) {
    const fields = [
      field("id", new A.Int64(), false),
      field("category", new A.Utf8()),
      field("vec", new A.FixedSizeList(32, new A.Field("item", new A.Float32(), true))),
    ];
    const rows = (start, n, seed) => {
      const r = rng(seed);
      return makeArrowTable(fields, [
        fixedVector(new A.Int64(), n, (i) => BigInt(start + i)),
        jsVector(new A.Utf8(), Array.from({ length: n }, (_, i) => `cat-${(start + i) % 5}`)),
        vecColumn(fields[2].type, n, r),
      ]);
    };
    const t = await create(ctx, rows(0, 1000, 1));
    await t.add(rows(1000, 1000, 2));
    await t.createIndex("id", { config: (await import("@lancedb/lancedb")).Index.btree() });
    await t.createIndex("vec", {
      config: (await import("@lancedb/lancedb")).Index.ivfPq({ numPartitions: 4, numSubVectors: 4, distanceType: "l2" }),
    });
    await t.add(rows(2000, 150, 3));
    await t.add(rows(2150, 150, 4));
    return t;
  },

  // 5 appends (v1..v5); tags on v1, v3 and v5 (latest); then a delete (v6).
  async tags(ctx) {
    const t = await appendsOf(ctx, 5, 100);
    const tags = await t.tags();
    await tags.create("first", 1);
    await tags.create("middle", 3);
    await tags.create("before_delete", 5);
    await t.delete("id % 4 = 1");
    return t;
  },

  // branch "dev" forked from v2 with one append of its own (v3 on the
  // branch); main goes on to v4 with a third fragment and a delete.
  async branches(ctx) {
    const t = await appendsOf(ctx, 2, 100);
    const branches = await t.branches();
    const dev = await branches.create("dev", "main", 2);
    await dev.add(baseRows(5000, 40, 50));
    await t.add(baseRows(200, 100, 3));
    await t.delete("id % 6 = 0");
    return t;
  },

  // indexed, then a delete and real Lance's optimize (compaction + index
  // remap/optimize, no cleanup: every old version and file is still there).
  async compacted(ctx) {
    const t = await scenarios.indexed(ctx);
    await t.delete("id % 10 = 0");
    await t.optimize({ cleanupOlderThan: new Date(0) });
    return t;
  },

  async types(ctx) {
    const { fields, rows } = typesTable();
    const t = await create(ctx, rows(0, 3000, 1, fields));
    await t.add(rows(3000, 1000, 2, fields));
    return t;
  },

  // text-heavy: 4 fragments x 1500 rows of sentences and paragraphs.
  async text(ctx) {
    const fields = [
      field("id", new A.Int64(), false),
      field("title", new A.Utf8()),
      field("body", new A.Utf8()),
      field("tags", new A.List(new A.Field("item", new A.Utf8(), true))),
    ];
    const rows = (start, n, seed) => {
      const r = rng(seed);
      return makeArrowTable(fields, [
        fixedVector(new A.Int64(), n, (i) => BigInt(start + i)),
        jsVector(new A.Utf8(), Array.from({ length: n }, () => sentence(r, 2, 8))),
        jsVector(new A.Utf8(), Array.from({ length: n }, (_, i) => ((start + i) % 23 === 0 ? null : sentence(r, 20, 200)))),
        jsVector(fields[3].type, Array.from({ length: n }, () => Array.from({ length: Math.floor(r() * 4) }, () => sentence(r, 1, 1)))),
      ]);
    };
    const t = await create(ctx, rows(0, 1500, 1));
    for (let f = 1; f < 4; f++) await t.add(rows(f * 1500, 1500, f + 1));
    return t;
  },

  // 120 columns (int32, float64, utf8 rotating), 3 fragments x 200 rows.
  async wide(ctx) {
    const fields = [field("id", new A.Int64(), false)];
    for (let c = 0; c < 120; c++) {
      const kind = c % 3;
      const type = kind === 0 ? new A.Int32() : kind === 1 ? new A.Float64() : new A.Utf8();
      fields.push(field(`c${String(c).padStart(3, "0")}`, type));
    }
    const schema = new A.Schema(fields);
    const rows = (start, n, seed) => {
      const r = rng(seed);
      const vecs = schema.fields.map((f) => (f.name === "id" ? fixedVector(new A.Int64(), n, (i) => BigInt(start + i)) : genColumn(f, n, r)));
      return makeArrowTable(fields, vecs);
    };
    const t = await create(ctx, rows(0, 200, 1));
    await t.add(rows(200, 200, 2));
    await t.add(rows(400, 200, 3));
    return t;
  },
};

// sized builds "sized-<F>x<R>-v<D>-t<W>-d<K>": F fragments of R rows each
// (one createTable/add per fragment, fed in batches of at most 1000 rows),
// base columns plus a D-dim float32 vector "vec" (D > 0) and a "body" text of
// about W words (W > 0); then, if K > 0, one `delete id % K = 0`.
async function sized(ctx, spec) {
  const m = /^sized-(\d+)x(\d+)-v(\d+)-t(\d+)-d(\d+)$/.exec(spec);
  if (!m) fail(`bad sized scenario ${spec}; want sized-<F>x<R>-v<D>-t<W>-d<K>`);
  const [frags, per, dim, words, delEvery] = m.slice(1).map(Number);
  if (frags < 1 || per < 1) fail(`sized scenario ${spec}: need at least one fragment and row`);
  const fields = [...baseFields];
  if (dim > 0) fields.push(field("vec", new A.FixedSizeList(dim, new A.Field("item", new A.Float32(), true))));
  if (words > 0) fields.push(field("body", new A.Utf8()));
  const part = (start, n, r) => {
    const base = baseRows(start, n, start + 1);
    const vecs = base.schema.fields.map((_, i) => base.getChildAt(i));
    if (dim > 0) vecs.push(vecColumn(fields[4].type, n, r));
    if (words > 0) vecs.push(jsVector(new A.Utf8(), Array.from({ length: n }, () => sentence(r, Math.max(1, words >> 1), words + (words >> 1)))));
    return makeArrowTable(fields, vecs);
  };
  const rows = (start, n, seed) => {
    const r = rng(seed);
    const parts = [];
    for (let off = 0; off < n; off += 1000) parts.push(part(start + off, Math.min(1000, n - off), r));
    return concatTables(parts);
  };
  const t = await create(ctx, rows(0, per, 1));
  for (let f = 1; f < frags; f++) await t.add(rows(f * per, per, f + 1));
  if (delEvery > 0) await t.delete(`id % ${delEvery} = 0`);
  return t;
}

function vecColumn(type, n, r) {
  const dim = type.listSize;
  const child = new Float32Array(n * dim);
  for (let i = 0; i < child.length; i++) child[i] = r() * 2 - 1;
  const childData = A.makeData({ type: type.children[0].type, length: child.length, nullCount: 0, data: child });
  return A.makeVector(A.makeData({ type, length: n, nullCount: 0, child: childData }));
}

// typesTable: one column per common type; fragments of 3000 and 1000 rows,
// each handed to Lance as batches of 250 rows. Observed with lance 8.0.0:
// every column of fragment 0 spans 2-4 pages, and the string, binary, list
// and big-vector columns of fragment 1 span 2 (pages are cut between batches).
function typesTable() {
  const F32 = (nullable = true) => new A.Field("item", new A.Float32(), nullable);
  const fields = [
    field("id", new A.Int64(), false),
    field("i8", new A.Int8()),
    field("i16", new A.Int16()),
    field("i32", new A.Int32()),
    field("i64", new A.Int64()),
    field("u8", new A.Uint8()),
    field("u16", new A.Uint16()),
    field("u32", new A.Uint32()),
    field("u64", new A.Uint64()),
    field("f32", new A.Float32()),
    field("f64", new A.Float64()),
    field("flag", new A.Bool()),
    field("s", new A.Utf8()),
    field("ls", new A.LargeUtf8()),
    field("long_text", new A.Utf8()),
    field("bin", new A.Binary()),
    field("d32", new A.DateDay()),
    field("ts", new A.TimestampMicrosecond()),
    field("ts_tz", new A.TimestampMicrosecond("UTC")),
    field("dec", new A.Decimal(2, 18, 128)),
    field("fsb", new A.FixedSizeBinary(16)),
    field("vec128", new A.FixedSizeList(128, F32())),
    field("big_vec", new A.FixedSizeList(768, F32())),
    field("li", new A.List(new A.Field("item", new A.Int32(), true))),
    field("ls_list", new A.List(new A.Field("item", new A.Utf8(), true))),
    field("st", new A.Struct([
      new A.Field("a", new A.Int32(), true),
      new A.Field("b", new A.Utf8(), true),
      new A.Field("c", new A.Float64(), true),
    ])),
    field("lst", new A.List(new A.Field("item", new A.Struct([
      new A.Field("k", new A.Utf8(), true),
      new A.Field("v", new A.Int64(), true),
    ]), true))),
    field("nested", new A.List(new A.Field("item", new A.List(new A.Field("item", new A.Int32(), true)), true))),
    field("all_null", new A.Int32()),
    field("all_null_s", new A.Utf8()),
  ];
  const rows = (start, n, seed, fields) => {
    const r = rng(seed);
    const parts = [];
    for (let off = 0; off < n; off += 250) parts.push(chunk(start + off, Math.min(250, n - off), r, fields));
    return concatTables(parts);
  };
  const chunk = (start, n, r, fields) => {
    const nth = (k) => (i) => (start + i) % k === k - 1;
    const vecs = [];
    for (const f of fields) {
      const t = f.type;
      switch (f.name) {
        case "id": vecs.push(fixedVector(t, n, (i) => BigInt(start + i))); break;
        case "i8": vecs.push(fixedVector(t, n, (i) => ((start + i) % 256) - 128, nth(13))); break;
        case "i16": vecs.push(fixedVector(t, n, (i) => ((start + i) * 37 % 65536) - 32768, nth(17))); break;
        case "i32": vecs.push(fixedVector(t, n, (i) => (start + i) * 1013 - 2_000_000, nth(19))); break;
        case "i64": vecs.push(fixedVector(t, n, (i) => BigInt(start + i) * 9_007_199_254_7n - 1n, nth(23))); break;
        case "u8": vecs.push(fixedVector(t, n, (i) => (start + i) % 256, nth(29))); break;
        case "u16": vecs.push(fixedVector(t, n, (i) => (start + i) * 31 % 65536, nth(31))); break;
        case "u32": vecs.push(fixedVector(t, n, (i) => ((start + i) * 2654435761) % 4294967296, nth(37))); break;
        case "u64": vecs.push(fixedVector(t, n, (i) => BigInt.asUintN(64, BigInt(start + i) * 0x9e3779b97f4a7c15n), nth(41))); break;
        case "f32": vecs.push(fixedVector(t, n, () => Math.fround(r() * 2000 - 1000), nth(43))); break;
        case "f64": vecs.push(fixedVector(t, n, (i) => (i % 97 === 5 ? -0 : r() * 1e6 - 5e5), nth(47))); break;
        case "flag": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => ((start + i) % 7 === 6 ? null : r() < 0.5)))); break;
        case "s": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 9;
          return k === 8 ? null : k === 0 ? "" : sentence(r, 1, 6);
        }))); break;
        case "ls": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 10;
          if ((start + i) % 50 === 25) return sentence(r, 6000, 7000); // > 32 KiB
          return k === 9 ? null : k === 0 ? "" : `large-${start + i}-` + sentence(r, 0, 4);
        }))); break;
        case "long_text": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 10;
          if (k === 3) return null;
          if (k === 0) return sentence(r, 6000, 7000); // > 32 KiB
          return sentence(r, 0, 12);
        }))); break;
        case "bin": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 8;
          if (k === 7) return null;
          return Uint8Array.from({ length: k * 3 }, () => Math.floor(r() * 256));
        }))); break;
        case "d32": vecs.push(fixedVector(t, n, (i) => 10000 + (start + i), nth(53))); break;
        case "ts": vecs.push(fixedVector(t, n, (i) => 1_700_000_000_000_000n + BigInt(start + i) * 1_000_003n, nth(59))); break;
        case "ts_tz": vecs.push(fixedVector(t, n, (i) => 1_600_000_000_000_000n - BigInt(start + i) * 7_777_777n, nth(61))); break;
        case "dec": vecs.push(fixedVector(t, n, (i) => BigInt(start + i) * 12345n - 9_999_999n, nth(67))); break;
        case "fsb": vecs.push(fixedVector(t, n, () => Uint8Array.from({ length: 16 }, () => Math.floor(r() * 256)), nth(71))); break;
        case "vec128":
        case "big_vec": vecs.push(vecColumn(t, n, r)); break;
        case "li": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 6;
          if (k === 5) return null;
          return Array.from({ length: k }, (_, j) => (j === 2 ? null : (start + i) * 10 + j));
        }))); break;
        case "ls_list": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 5;
          if (k === 4) return null;
          return Array.from({ length: k }, (_, j) => (j === 1 ? "" : sentence(r, 1, 2)));
        }))); break;
        case "st": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 8;
          if (k === 7) return null;
          return { a: k === 3 ? null : start + i, b: k === 4 ? null : `b${start + i}`, c: (start + i) / 4 };
        }))); break;
        case "lst": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 4;
          if (k === 3) return null;
          return Array.from({ length: k }, (_, j) => ({ k: `k${j}`, v: BigInt(start + i + j) }));
        }))); break;
        case "nested": vecs.push(jsVector(t, Array.from({ length: n }, (_, i) => {
          const k = (start + i) % 5;
          if (k === 4) return null;
          return Array.from({ length: k }, (_, j) => (j === 1 ? [] : Array.from({ length: j + 1 }, (_, m) => m + i)));
        }))); break;
        case "all_null": vecs.push(fixedVector(t, n, () => 0, () => true)); break;
        case "all_null_s": vecs.push(jsVector(t, Array.from({ length: n }, () => null))); break;
        default: throw new Error(`types: no generator for ${f.name}`);
      }
    }
    return makeArrowTable(fields, vecs);
  };
  return { fields, rows };
}

export async function run(argv, write) {
  const [scenario, uri, optsArg] = argv;
  if (scenario === "--list") {
    write(Object.keys(scenarios).join("\n") + "\n");
    return;
  }
  if (!scenario || !uri) fail("usage: build.mjs <scenario> <table-uri> [storageOptionsJSON]");
  const fn = scenario.startsWith("sized-") ? (ctx) => sized(ctx, scenario) : scenarios[scenario];
  if (!fn) fail(`unknown scenario ${scenario}; known: ${Object.keys(scenarios).join(", ")}`);
  const storageOptions = parseStorageOptions(optsArg);
  const { root, name } = splitTableURI(uri);
  const t = await fn({ root, name, storageOptions });
  const out = { scenario, uri, version: await t.version(), rows: await t.countRows() };
  write(toJSON(out) + "\n");
}

if (isMain(import.meta.url)) main(run);
