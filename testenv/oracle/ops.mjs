// ops.mjs <table-uri> <opsJSON> [storageOptionsJSON]
//
// Applies a JSON array of operations with real Lance, in order, on one open
// table, and prints a JSON array with one result object per op. Every result
// carries "op" and "version" (the table version after the op). A failing op
// stops the run: exit status 1, the error on stderr, and the results so far on
// stdout. "elapsed_ms" is the op's own wall time inside node (no process
// start-up), for benchmarks that compare against real Lance. Ops (snake_case keys):
//   {"op":"add","rows":N,"seed":S,"id_start":K?,"texts":{col:[..]}?,"vector_shift":X?}   rows generated from the
//                                                  table's own schema; an integer "id" column counts up from id_start
//                                                  (default: max(id)+1, or 0); "texts" gives a string
//                                                  column's values (cycled; rows defaults to their count);
//                                                  "vector_shift" adds X to every value of float vector columns
//   {"op":"delete","where":SQL}
//   {"op":"update","where":SQL?,"values":{col:literal}?,"values_sql":{col:SQL}?}
//   {"op":"add_columns","columns":[{"name":..,"value_sql":..}]}
//   {"op":"drop_columns","columns":[..]}
//   {"op":"alter_columns","alterations":[{"path":..,"rename":..?,"nullable":..?}]}
//   {"op":"create_index","column":..,"type":"btree|bitmap|label_list|ivf_pq|ivf_flat|ivf_rq|hnsw_sq|hnsw_pq|fts|fm",
//       "options":{...}?,"replace":bool?,"name":..?}
//   {"op":"optimize","cleanup_older_than_ms":N?,"delete_unverified":bool?}   -> compaction + prune stats
//   {"op":"cleanup","older_than_ms":0,"delete_unverified":true}  = optimize with cleanupOlderThan
//       (lancedb's JS API has no cleanup-only call: this also compacts and optimizes indices)
//   {"op":"tag","action":"create|update|delete","name":..,"version":N?}
//   {"op":"checkout_version","version":N}  {"op":"checkout_latest"}  {"op":"restore"}
//   {"op":"count_rows","where":SQL?}
//   {"op":"query","where":SQL?,"columns":[..]?,"limit":N?,"explain":bool?}
//                                       -> {"count":N,"data":[...],"plan":explainPlan(verbose)?}
//   {"op":"merge_insert","on":col?,"rows":N,"seed":S,"id_start":K?}  upsert generated rows
//       (ids from id_start, default 0): matched rows updated, others inserted
//   {"op":"vector_search","column":..,"vector":[..],"k":N?,"nprobes":N?,"refine_factor":N?,
//       "where":SQL?,"columns":[..]?,"bypass_vector_index":bool?,"ef":N?,"distance_type":..?,"explain":bool?}
//                                       -> {"count":N,"data":[...],"plan":explainPlan(verbose)?}
//   {"op":"fts_search","column":..,"query":..,"phrase":bool?,"slop":N?,"operator":"and|or"?,"k":N?,
//       "where":SQL?,"columns":[..]?,"explain":bool?}   MatchQuery (or PhraseQuery) through query().fullTextSearch
//                                       -> {"count":N,"data":[...],"plan":explainPlan(verbose)?}
//   {"op":"version"}  {"op":"list_versions"}  {"op":"list_indices"}
import {
  arrow, lancedb, openTable, parseStorageOptions, genTable, main, isMain, fail, toJSON,
} from "./lib.mjs";

function rowsToJSON(tbl) {
  return JSON.parse(toJSON(tbl.toArray().map((r) => r.toJSON())), (_k, v) => v);
}

async function maxId(t) {
  const schema = await t.schema();
  const f = schema.fields.find((x) => x.name === "id");
  if (!f || !arrow.DataType.isInt(f.type)) return null;
  let max = null;
  for await (const b of t.query().select(["id"])) {
    const c = b.getChildAt(0);
    for (let i = 0; i < c.length; i++) {
      const v = c.get(i);
      if (v === null) continue;
      const bv = BigInt(v);
      if (max === null || bv > max) max = bv;
    }
  }
  return max;
}

function indexConfig(type, o = {}) {
  const I = lancedb.Index;
  switch (type) {
    case "btree": return I.btree(o);
    case "bitmap": return I.bitmap(o);
    case "label_list": return I.labelList(o);
    case "ivf_pq": return I.ivfPq(o);
    case "ivf_flat": return I.ivfFlat(o);
    case "hnsw_sq": return I.hnswSq(o);
    case "hnsw_pq": return I.hnswPq(o);
    case "ivf_rq": return I.ivfRq(o);
    case "fts": return I.fts(o);
    case "fm": return I.fm();
    default: throw new Error(`create_index: unknown index type ${type}`);
  }
}

const handlers = {
  async add(t, op) {
    const schema = await t.schema();
    let idStart = op.id_start;
    if (idStart === undefined) {
      const m = await maxId(t);
      idStart = m === null ? 0 : Number(m + 1n);
    }
    const data = genTable(schema, op.rows ?? op.texts?.[Object.keys(op.texts)[0]]?.length ?? 100, op.seed ?? 1, { idStart, texts: op.texts, vectorShift: op.vector_shift });
    const res = await t.add(data);
    return { rows: await t.countRows(), added: data.numRows, id_start: idStart, result: res };
  },
  async merge_insert(t, op) {
    const schema = await t.schema();
    const data = genTable(schema, op.rows ?? 100, op.seed ?? 1, { idStart: op.id_start ?? 0 });
    const res = await t.mergeInsert(op.on ?? "id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute(data);
    return { result: res, rows: await t.countRows() };
  },
  async delete(t, op) {
    if (!op.where) throw new Error("delete needs where");
    return { result: await t.delete(op.where), rows: await t.countRows() };
  },
  async update(t, op) {
    const u = {};
    if (op.where) u.where = op.where;
    if (op.values_sql) u.valuesSql = op.values_sql;
    else u.values = op.values ?? {};
    return { result: await t.update(u), rows: await t.countRows() };
  },
  async add_columns(t, op) {
    const cols = (op.columns ?? []).map((c) => ({ name: c.name, valueSql: c.value_sql }));
    return { result: await t.addColumns(cols) };
  },
  async drop_columns(t, op) {
    return { result: await t.dropColumns(op.columns ?? []) };
  },
  async alter_columns(t, op) {
    return { result: await t.alterColumns(op.alterations ?? []) };
  },
  async create_index(t, op) {
    const opts = { config: indexConfig(op.type ?? "btree", op.options ?? {}) };
    if (op.replace !== undefined) opts.replace = op.replace;
    if (op.name !== undefined) opts.name = op.name;
    await t.createIndex(op.column, opts);
    return { indices: await t.listIndices() };
  },
  async drop_index(t, op) {
    if (!op.name) throw new Error("drop_index needs name");
    await t.dropIndex(op.name);
    return { indices: await t.listIndices() };
  },
  async optimize(t, op) {
    const o = {};
    if (op.cleanup_older_than_ms !== undefined) o.cleanupOlderThan = new Date(Date.now() - op.cleanup_older_than_ms);
    if (op.delete_unverified !== undefined) o.deleteUnverified = op.delete_unverified;
    return { stats: await t.optimize(o), rows: await t.countRows() };
  },
  async cleanup(t, op) {
    const stats = await t.optimize({
      cleanupOlderThan: new Date(Date.now() - (op.older_than_ms ?? 0)),
      deleteUnverified: op.delete_unverified ?? true,
    });
    return { stats, versions: (await t.listVersions()).map((v) => v.version) };
  },
  async tag(t, op) {
    const tags = await t.tags();
    const action = op.action ?? "create";
    if (action === "create") await tags.create(op.name, op.version ?? (await t.version()));
    else if (action === "update") await tags.update(op.name, op.version);
    else if (action === "delete") await tags.delete(op.name);
    else throw new Error(`tag: unknown action ${action}`);
    const out = {};
    for (const [n, c] of Object.entries(await tags.list())) out[n] = c.version;
    return { tags: out };
  },
  async checkout_version(t, op) {
    await t.checkout(op.version);
    return { rows: await t.countRows() };
  },
  async checkout_latest(t) {
    await t.checkoutLatest();
    return { rows: await t.countRows() };
  },
  async restore(t) {
    await t.restore();
    return { rows: await t.countRows() };
  },
  async count_rows(t, op) {
    return { count: await t.countRows(op.where) };
  },
  async query(t, op) {
    let q = t.query();
    if (op.where) q = q.where(op.where);
    if (op.columns) q = q.select(op.columns);
    if (op.limit !== undefined) q = q.limit(op.limit);
    const plan = op.explain ? await q.explainPlan(true) : undefined;
    const tbl = await q.toArrow();
    return { count: tbl.numRows, data: rowsToJSON(tbl), plan };
  },
  async vector_search(t, op) {
    let q = t.vectorSearch(Float32Array.from(op.vector));
    if (op.column) q = q.column(op.column);
    if (op.k !== undefined) q = q.limit(op.k);
    if (op.nprobes !== undefined) q = q.nprobes(op.nprobes);
    if (op.refine_factor !== undefined) q = q.refineFactor(op.refine_factor);
    if (op.where) q = q.where(op.where);
    if (op.columns) q = q.select(op.columns);
    if (op.bypass_vector_index) q = q.bypassVectorIndex();
    if (op.ef !== undefined) q = q.ef(op.ef);
    if (op.distance_type) q = q.distanceType(op.distance_type);
    const plan = op.explain ? await q.explainPlan(true) : undefined;
    const tbl = await q.toArrow();
    return { count: tbl.numRows, data: rowsToJSON(tbl), plan };
  },
  async fts_search(t, op) {
    const fq = op.phrase
      ? new lancedb.PhraseQuery(op.query, op.column, op.slop !== undefined ? { slop: op.slop } : undefined)
      : new lancedb.MatchQuery(op.query, op.column, op.operator ? { operator: op.operator === "and" ? lancedb.Operator.And : lancedb.Operator.Or } : undefined);
    let q = t.query().fullTextSearch(fq);
    if (op.k !== undefined) q = q.limit(op.k);
    if (op.where) q = q.where(op.where);
    if (op.columns) q = q.select(op.columns);
    const plan = op.explain ? await q.explainPlan(true) : undefined;
    const tbl = await q.toArrow();
    return { count: tbl.numRows, data: rowsToJSON(tbl), plan };
  },
  async version() {
    return {};
  },
  async list_versions(t) {
    return { versions: (await t.listVersions()).map((v) => ({ version: v.version, metadata: v.metadata })) };
  },
  async list_indices(t) {
    return { indices: await t.listIndices() };
  },
};

export async function run(argv, write) {
  const [uri, opsArg, optsArg] = argv;
  if (!uri || !opsArg) fail("usage: ops.mjs <table-uri> <opsJSON> [storageOptionsJSON]");
  const ops = JSON.parse(opsArg);
  if (!Array.isArray(ops)) fail("ops must be a JSON array");
  const t = await openTable(uri, parseStorageOptions(optsArg));
  const results = [];
  for (const [i, op] of ops.entries()) {
    const h = handlers[op.op];
    if (!h) {
      write(toJSON(results) + "\n");
      fail(`op ${i}: unknown op ${JSON.stringify(op.op)}; known: ${Object.keys(handlers).join(", ")}`);
    }
    let res;
    const t0 = process.hrtime.bigint();
    try {
      res = await h(t, op);
    } catch (e) {
      write(toJSON(results) + "\n");
      throw new Error(`op ${i} (${op.op}): ${e && e.message ? e.message : e}`);
    }
    const elapsedMs = Number(process.hrtime.bigint() - t0) / 1e6;
    results.push({ op: op.op, ...res, version: await t.version(), elapsed_ms: elapsedMs });
  }
  write(toJSON(results) + "\n");
}

if (isMain(import.meta.url)) main(run);
