// inspect.mjs <table-uri> [version] [storageOptionsJSON]
//
// Prints one JSON object: what real Lance sees of the table at `version`
// (0 or absent = latest). Fields:
//   rows            countRows()
//   version         version() after checkout
//   latest_version  version() of the latest
//   versions        listVersions() numbers
//   summary         listVersions() metadata of this version (Lance's own
//                   manifest summary: total_fragments, total_data_files, ...)
//   stats           table.stats()
//   fragment_rows   live rows per fragment id, from a scan of _rowaddr
//   schema          [{name, type, nullable}] (type = apache-arrow JS toString)
//   indices         listIndices() + indexStats()
//   tags            tags().list() as {name: version}
//   branches        branches().list() plus each branch's latest version and
//                   countRows: {name: {parent_branch, parent_version, version, rows}}
import { openTable, parseStorageOptions, main, isMain, fail, toJSON } from "./lib.mjs";

export async function run(argv, write) {
  const [uri, versionArg, optsArg] = argv;
  if (!uri) fail("usage: inspect.mjs <table-uri> [version] [storageOptionsJSON]");
  const storageOptions = parseStorageOptions(optsArg);
  const t = await openTable(uri, storageOptions);
  const latest = await t.version();
  const want = versionArg ? Number(versionArg) : 0;
  if (want > 0 && want !== latest) await t.checkout(want);
  const version = await t.version();

  const versions = await t.listVersions();
  const mine = versions.find((v) => v.version === version);

  const fragmentRows = {};
  for await (const batch of t.query().select(["_rowaddr"])) {
    const col = batch.getChildAt(0);
    for (let i = 0; i < col.length; i++) {
      const frag = String(col.get(i) >> 32n);
      fragmentRows[frag] = (fragmentRows[frag] ?? 0) + 1;
    }
  }

  const schema = (await t.schema()).fields.map((f) => ({
    name: f.name,
    type: String(f.type),
    nullable: f.nullable,
  }));

  const indices = [];
  for (const ix of await t.listIndices()) {
    const st = await t.indexStats(ix.name);
    indices.push({
      name: ix.name,
      type: ix.indexType,
      columns: ix.columns,
      indexed_rows: st ? st.numIndexedRows : -1,
      unindexed_rows: st ? st.numUnindexedRows : -1,
      segments: st && st.numIndices !== undefined ? st.numIndices : -1,
      distance_type: st && st.distanceType ? st.distanceType : "",
    });
  }

  const tags = {};
  for (const [name, c] of Object.entries(await (await t.tags()).list())) tags[name] = c.version;

  const branches = {};
  const br = await t.branches();
  for (const [name, c] of Object.entries(await br.list())) {
    const b = await br.checkout(name);
    branches[name] = {
      parent_branch: c.parentBranch ?? "",
      parent_version: c.parentVersion,
      version: await b.version(),
      rows: await b.countRows(),
    };
  }

  const out = {
    uri,
    rows: await t.countRows(),
    version,
    latest_version: latest,
    versions: versions.map((v) => v.version),
    summary: mine ? mine.metadata : {},
    stats: await t.stats(),
    fragment_rows: fragmentRows,
    schema,
    indices,
    tags,
    branches,
  };
  write(toJSON(out) + "\n");
}

if (isMain(import.meta.url)) main(run);
