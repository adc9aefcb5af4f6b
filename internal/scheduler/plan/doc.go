// Package plan is lanced's planner: a pure function from a table's manifest,
// its index metadata, the effective policy and the tasks in flight to a
// Plan of rewrite, repack and index catch-up tasks, with a decision and a
// reason for every fragment and a catch-up action for every index.
//
// Rewrite planning reproduces Lance 8.0.0's plan_compaction exactly
// (https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/optimize.rs): candidates by deletion ratio (compared in
// float32, as Lance does) or physical rows under target_rows_per_fragment,
// bins of adjacent candidates with the same index set, lone small fragments
// dropped, bins split for size. On top of it: index_coverage (keep: indexed
// fragments are not candidates; remap and defer: segments lanced cannot
// remap keep their fragments), index bitmaps read through the fragment
// reuse index, max_source_fragments/rows/bytes taken in whole tasks in
// order, fragments of in-flight tasks left out, and a task of one fragment
// whose files hold more than slice_bytes cut into row slices.
//
// Index catch-up (catchup.go): per index, unindexed live rows against
// max_unindexed_rows/fraction (with neither set: any, but an index past
// DefaultCatchUpFirstRows and DefaultCatchUpFirstFraction is caught up
// before its unindexed fragments are rewritten), max_segments for vector
// merges, and kinds lanced cannot catch up reported due with the reason.
//
// Repack planning (repack.go, see PLANNER.md): file-count and
// column_groups triggers, merges only of files they empty and at least two,
// never adding a file, the largest file kept in place, blob columns,
// partially present columns, spilled row lineage and legacy files left
// alone, V2.0 struct headers. A fragment is never in both kinds of task.
//
// Invariants: Plan never does I/O and never mutates its input; the same
// input gives the same plan; every fragment of the manifest gets exactly one
// Decision.
//
// Imports: internal/engine (task types), internal/policy (Effective) and the
// generated protobuf types; roaring for index fragment bitmaps.
package plan
