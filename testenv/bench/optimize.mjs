// Real Lance's own maintenance on a table: LanceDB optimize() (compaction,
// then prune with the default 7-day window, then index optimize).
// usage: node optimize.mjs <uri>
import { lancedb, splitTableURI } from "../oracle/lib.mjs";
const { root, name } = splitTableURI(process.argv[2]);
const db = await lancedb.connect(root);
const t = await db.openTable(name);
const stats = await t.optimize();
console.log(JSON.stringify(stats));
