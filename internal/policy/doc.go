// Package policy owns lanced's HCL policy language: parsing and validating
// a directory of policy files, resolving the effective settings of one table
// with the source of every value, and reloading the directory atomically.
//
// A policy directory holds *.hcl files with at most one defaults block in
// total and any number of table "<glob>" blocks (globs over table URIs,
// doublestar syntax). Every block may set enabled, scope and the sections
// compaction, repack, cleanup, schedule and index. Precedence, per setting: the
// most specific matching table block that sets it, then the table's own
// manifest config keys (lance.compaction.*, lance.auto_cleanup.*), then
// defaults, then Lance's defaults.
//
// Invariants: a Set is immutable once built; Resolve is pure; every
// diagnostic points at file:line:col; a set with errors never replaces the
// one in force (Reloader).
//
// Imports: hcl/v2, go-cty, doublestar and fsnotify only; no internal
// package.
package policy
