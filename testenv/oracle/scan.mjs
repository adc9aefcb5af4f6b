// scan.mjs <table-uri> <out.arrow> [version] [columns] [storageOptionsJSON]
//          [--with-rowid] [--with-rowaddr] [--take-rowids 1,2,3] [--take-offsets 0,5,9]
//          [--where SQL]
//
// Writes what real Lance reads as an Arrow IPC *file*: query().toArrow() in
// scan order (fragment order, then offset), optionally projected to the
// comma-separated `columns` ("" or "*" = all), or takeRowIds/takeOffsets
// in the order given. Prints {"rows":N,"columns":[...]}.
import { writeFileSync } from "node:fs";
import { arrow, openTable, parseStorageOptions, main, isMain, fail, toJSON } from "./lib.mjs";

function parseList(s, flag) {
  if (s === undefined) fail(`${flag} needs a comma-separated list`);
  if (s === "") return [];
  return s.split(",").map((x) => {
    if (!/^\d+$/.test(x)) fail(`${flag}: not a non-negative integer: ${x}`);
    return BigInt(x);
  });
}

export async function run(argv, write) {
  const pos = [];
  let withRowId = false;
  let withRowAddr = false;
  let takeRowIds = null;
  let takeOffsets = null;
  let where = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--with-rowid") withRowId = true;
    else if (a === "--with-rowaddr") withRowAddr = true;
    else if (a === "--take-rowids") takeRowIds = parseList(argv[++i], a);
    else if (a === "--take-offsets") takeOffsets = parseList(argv[++i], a);
    else if (a === "--where") where = argv[++i];
    else pos.push(a);
  }
  const [uri, out, versionArg, colsArg, optsArg] = pos;
  if (!uri || !out) fail("usage: scan.mjs <table-uri> <out.arrow> [version] [columns] [storageOptionsJSON] [flags]");
  const t = await openTable(uri, parseStorageOptions(optsArg));
  const version = versionArg ? Number(versionArg) : 0;
  if (version > 0 && version !== (await t.version())) await t.checkout(version);

  let columns = colsArg && colsArg !== "*" ? colsArg.split(",") : null;
  if (withRowAddr) {
    if (!columns) columns = (await t.schema()).fields.map((f) => f.name);
    columns = [...columns, "_rowaddr"];
  }

  let q;
  if (takeRowIds) q = t.takeRowIds(takeRowIds);
  else if (takeOffsets) q = t.takeOffsets(takeOffsets.map(Number));
  else q = t.query();
  if (where) {
    if (takeRowIds || takeOffsets) fail("--where cannot be combined with --take-*");
    q = q.where(where);
  }
  if (columns) q = q.select(columns);
  if (withRowId) q = q.withRowId();

  const tbl = await q.toArrow();
  // Empty results still carry the schema: tableToIPC of a batch-less table
  // writes a schema-only file.
  const fixed = tbl.batches.length === 0 ? new arrow.Table(tbl.schema) : tbl;
  writeFileSync(out, arrow.tableToIPC(fixed, "file"));
  write(toJSON({ rows: tbl.numRows, columns: tbl.schema.fields.map((f) => f.name) }) + "\n");
}

if (isMain(import.meta.url)) main(run);
