// Shared helpers for the oracle scripts: opening tables by URI with real
// Lance (@lancedb/lancedb), deterministic data, and arrow-JS builders that
// avoid the row-object path (which mangles nested types).
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import * as lancedb from "@lancedb/lancedb";

// apache-arrow through require(): @lancedb/lancedb is CommonJS and checks
// `instanceof arrow.Table` against the CommonJS build; the ESM build's
// classes are different objects (dual-package hazard).
const arrow = createRequire(import.meta.url)("apache-arrow");

export { lancedb, arrow };

// parseStorageOptions reads an optional JSON object argument.
export function parseStorageOptions(arg) {
  if (arg === undefined || arg === "") return {};
  const v = JSON.parse(arg);
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new Error(`storage options must be a JSON object, got ${arg}`);
  }
  return v;
}

// splitTableURI turns ".../name.lance" into the connection root and table name.
export function splitTableURI(uri) {
  const trimmed = uri.replace(/\/+$/, "");
  const slash = trimmed.lastIndexOf("/");
  const base = slash >= 0 ? trimmed.slice(slash + 1) : trimmed;
  if (!base.endsWith(".lance") || base.length <= ".lance".length) {
    throw new Error(`table uri must end in <name>.lance: ${uri}`);
  }
  let root = slash >= 0 ? trimmed.slice(0, slash) : ".";
  if (root === "" ) root = "/";
  if (/^[a-z0-9]+:\/\/?$/.test(root + "/")) {
    throw new Error(`table uri needs a bucket and a directory: ${uri}`);
  }
  return { root, name: base.slice(0, -".lance".length) };
}

export async function connectRoot(root, storageOptions) {
  return lancedb.connect(root, { storageOptions, readConsistencyInterval: 0 });
}

export async function openTable(uri, storageOptions) {
  const { root, name } = splitTableURI(uri);
  const db = await connectRoot(root, storageOptions);
  return db.openTable(name, [], { storageOptions });
}

// jsonable converts BigInt and typed arrays for JSON.stringify.
export function toJSON(v) {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === "bigint") {
      return Number.isSafeInteger(Number(x)) ? Number(x) : x.toString();
    }
    if (x instanceof Date) return x.toISOString();
    if (ArrayBuffer.isView(x)) return Array.from(x, (e) => (typeof e === "bigint" ? e.toString() : e));
    if (x instanceof Map) return Object.fromEntries(x);
    return x;
  });
}

// rng returns a deterministic PRNG (mulberry32) yielding floats in [0,1).
export function rng(seed) {
  let a = (seed >>> 0) ^ 0x9e3779b9;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const WORDS = (
  "the of and to in is that for it as was with be by on not he this are or his from at which but have an they " +
  "you were her she there one all we their been has when who will more no if out so said what up its about into " +
  "than them can only other new some could time these two may then do first any my now such like our over man me " +
  "even most made after also did many before must through back years where much your way well down should because " +
  "each just those people how too little state good very make world still own see men work long get here between " +
  "both life being under never day same another know while last might us great old year off come since against go " +
  "came right used take three table column fragment version manifest storage object bucket compaction cleanup " +
  "vector index query schema arrow lance daemon repack deletion commit transaction river mountain garden window " +
  "kitchen morning evening letter market engine harbour forest silver copper winter summer autumn spring"
).split(" ");

export function sentence(r, minWords, maxWords) {
  const n = minWords + Math.floor(r() * (maxWords - minWords + 1));
  const out = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(r() * WORDS.length)]);
  return out.join(" ");
}

function validity(n, isNull) {
  const bm = new Uint8Array((n + 7) >> 3);
  let nulls = 0;
  for (let i = 0; i < n; i++) {
    if (isNull(i)) nulls++;
    else bm[i >> 3] |= 1 << (i & 7);
  }
  return { bm, nulls };
}

// fixedVector builds a fixed-width column (ints, floats, dates, timestamps,
// decimals, fixed-size binary) straight from typed arrays. value(i) returns a
// number/bigint (or, for decimal, a bigint; for fixed-size binary, bytes).
export function fixedVector(type, n, value, isNull = () => false) {
  const { bm, nulls } = validity(n, isNull);
  let data;
  if (type.typeId === arrow.Type.Decimal) {
    data = new Uint32Array(n * 4);
    for (let i = 0; i < n; i++) {
      if (isNull(i)) continue;
      let v = BigInt.asUintN(128, BigInt(value(i)));
      for (let w = 0; w < 4; w++) {
        data[i * 4 + w] = Number(v & 0xffffffffn);
        v >>= 32n;
      }
    }
  } else if (type.typeId === arrow.Type.FixedSizeBinary) {
    data = new Uint8Array(n * type.byteWidth);
    for (let i = 0; i < n; i++) {
      if (isNull(i)) continue;
      data.set(value(i), i * type.byteWidth);
    }
  } else {
    const Ctor = type.ArrayType;
    data = new Ctor(n);
    const big = Ctor === BigInt64Array || Ctor === BigUint64Array;
    for (let i = 0; i < n; i++) {
      if (isNull(i)) continue;
      const v = value(i);
      data[i] = big ? BigInt(v) : Number(v);
    }
  }
  return arrow.makeVector(arrow.makeData({ type, length: n, nullCount: nulls, nullBitmap: nulls ? bm : null, data }));
}

// jsVector builds any column from JS values (arrays for lists, objects for
// structs, null for null) through apache-arrow's builders.
export function jsVector(type, values) {
  return arrow.vectorFromArray(values, type);
}

// makeArrowTable assembles vectors into a Table with the exact schema given
// (field names, types and nullability).
export function makeArrowTable(fields, vectors) {
  const schema = new arrow.Schema(fields);
  const n = vectors[0].length;
  const children = vectors.map((v) => {
    if (v.data.length !== 1) {
      // Concatenate multiple chunks into one Data through a rebuild.
      return arrow.makeVector(v.data).data[0];
    }
    return v.data[0];
  });
  const structData = arrow.makeData({
    type: new arrow.Struct(fields),
    length: n,
    nullCount: 0,
    children,
  });
  return new arrow.Table([new arrow.RecordBatch(schema, structData)]);
}

// concatTables joins tables of one schema as a multi-batch table. Lance's
// writer cuts a page only between incoming batches (once a column has
// buffered 8 MiB), so one big batch always gives one page per column.
// (Slicing a batch instead trips an apache-arrow 18 bug with LargeUtf8
// offsets in the IPC writer.)
export function concatTables(tables) {
  return new arrow.Table(tables.flatMap((t) => t.batches));
}

export function field(name, type, nullable = true) {
  return new arrow.Field(name, type, nullable);
}

// genColumn produces n deterministic values for any supported field type,
// as a Vector. idStart, when set, makes integer columns named "id" sequential.
export function genColumn(f, n, r, opts = {}) {
  const t = f.type;
  const nullable = f.nullable;
  const nullEvery = opts.nullEvery ?? 11;
  const isNull = (i) => nullable && nullEvery > 0 && i % nullEvery === nullEvery - 1;
  if (f.name === "id" && opts.idStart !== undefined && arrow.DataType.isInt(t)) {
    return fixedVector(t, n, (i) => BigInt(opts.idStart) + BigInt(i));
  }
  if (opts.vectorShift && t.typeId === arrow.Type.FixedSizeList && t.children[0].type.typeId === arrow.Type.Float) {
    // Vectors from another distribution: each value shifted by vectorShift.
    const s = opts.vectorShift;
    return jsVector(t, Array.from({ length: n }, (_, i) => (isNull(i) ? null : genValue(t, r).map((x) => x + s))));
  }
  if (opts.texts && opts.texts[f.name]) {
    const v = opts.texts[f.name];
    return jsVector(t, Array.from({ length: n }, (_, i) => v[i % v.length]));
  }
  switch (t.typeId) {
    case arrow.Type.Null:
      return arrow.makeVector(arrow.makeData({ type: t, length: n, nullCount: n }));
    case arrow.Type.Int: {
      const bits = t.bitWidth;
      const mod = bits >= 32 ? 1_000_000 : bits === 16 ? 30_000 : 120;
      return fixedVector(t, n, () => {
        const v = Math.floor(r() * mod);
        return t.isSigned ? v - Math.floor(mod / 2) : v;
      }, isNull);
    }
    case arrow.Type.Float:
      return fixedVector(t, n, () => Math.fround(r() * 1000 - 500), isNull);
    case arrow.Type.Decimal:
      return fixedVector(t, n, () => BigInt(Math.floor(r() * 1e9)) - 500_000_000n, isNull);
    case arrow.Type.Date:
      return fixedVector(t, n, () => 18000 + Math.floor(r() * 3000), isNull);
    case arrow.Type.Timestamp:
      return fixedVector(t, n, () => BigInt(1_600_000_000_000_000 + Math.floor(r() * 1e12)), isNull);
    case arrow.Type.FixedSizeBinary:
      return fixedVector(t, n, () => Uint8Array.from({ length: t.byteWidth }, () => Math.floor(r() * 256)), isNull);
    default:
      return jsVector(t, Array.from({ length: n }, (_, i) => (isNull(i) ? null : genValue(t, r))));
  }
}

// genValue produces one JS value for the builder path (nested types).
export function genValue(t, r) {
  switch (t.typeId) {
    case arrow.Type.Null:
      return null;
    case arrow.Type.Bool:
      return r() < 0.5;
    case arrow.Type.Int: {
      const mod = t.bitWidth >= 32 ? 1_000_000 : t.bitWidth === 16 ? 30_000 : 120;
      const v = Math.floor(r() * mod) - (t.isSigned ? Math.floor(mod / 2) : 0);
      return t.bitWidth === 64 ? BigInt(v) : v;
    }
    case arrow.Type.Float:
      return Math.fround(r() * 1000 - 500);
    case arrow.Type.Utf8:
    case arrow.Type.LargeUtf8:
      return sentence(r, 0, 6);
    case arrow.Type.Binary:
    case arrow.Type.LargeBinary:
      return Uint8Array.from({ length: Math.floor(r() * 24) }, () => Math.floor(r() * 256));
    case arrow.Type.FixedSizeBinary:
      return Uint8Array.from({ length: t.byteWidth }, () => Math.floor(r() * 256));
    case arrow.Type.FixedSizeList: {
      const c = t.children[0].type;
      if (c.typeId === arrow.Type.Float) return Float32Array.from({ length: t.listSize }, () => r() * 2 - 1);
      return Array.from({ length: t.listSize }, () => genValue(c, r));
    }
    case arrow.Type.List: {
      const len = Math.floor(r() * 4);
      return Array.from({ length: len }, () => genValue(t.children[0].type, r));
    }
    case arrow.Type.Struct: {
      const o = {};
      for (const c of t.children) o[c.name] = genValue(c.type, r);
      return o;
    }
    case arrow.Type.Date:
      return new Date(Date.UTC(2020, 0, 1) + Math.floor(r() * 3000) * 86400000);
    default:
      throw new Error(`oracle: cannot generate values of type ${t}`);
  }
}

// genTable produces n rows for an arrow Schema, deterministic in seed.
export function genTable(schema, n, seed, opts = {}) {
  const r = rng(seed);
  const vectors = schema.fields.map((f) => genColumn(f, n, r, opts));
  return makeArrowTable(schema.fields, vectors);
}

// UsageError is a bad invocation (exit status 2 on the command line).
export class UsageError extends Error {}

export function fail(msg) {
  throw new UsageError(msg);
}

// isMain reports whether the module with this import.meta.url is the script
// node was started with (as opposed to imported by server.mjs).
export function isMain(metaURL) {
  return process.argv[1] !== undefined && pathToFileURL(resolve(process.argv[1])).href === metaURL;
}

// main runs a script's run(argv, write) as a command: output to stdout,
// errors to stderr prefixed "oracle:", exit 2 for usage errors, else 1.
export async function main(run) {
  try {
    await run(process.argv.slice(2), (s) => process.stdout.write(s));
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`oracle: ${e.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`oracle: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  }
}
