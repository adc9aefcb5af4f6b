// Package oracle runs real Lance (@lancedb/lancedb 0.31.0 = lance 8.0.0,
// installed by `make oracle` into testenv/oracle/node_modules) as the judge
// for lanced's format claims.
//
// It owns the node scripts next to this file (build.mjs, inspect.mjs,
// scan.mjs, ops.mjs, lib.mjs; see README.md for the shape of every
// scenario) and the Go helpers that call them from tests:
//
//   - Build makes a table of a named scenario with real Lance (cached per
//     script hash under os.TempDir()/lanced-oracle-cache for file:// tables,
//     built directly on S3 when storage options are given).
//   - Inspect reports what real Lance sees: row count, versions, Lance's own
//     manifest summary (fragments, data files, deletions), live rows per
//     fragment, schema, indices, tags.
//   - Scan returns real Lance's read of a version as an arrow.Table.
//   - RunOps applies writes, deletes, index builds, optimize and cleanup
//     with real Lance.
//   - Digest, DigestRecords and Equal compare data by logical value,
//     independent of chunking and of offset width.
//
// Invariants: every helper is for tests and benchmarks only (it calls
// t.Fatal on failure and t.Skip under -short); production code never
// imports this package. One node process (server.mjs) per test binary runs
// the scripts, at most two calls at a time (LANCED_ORACLE_SERVER=0: a node
// process per call). Nothing here reads lanced's own format code: the oracle must
// stay independent of what it judges.
//
// Imports: the standard library and arrow-go only (its tests also use
// internal/store/storetest for the S3 emulator).
package oracle
