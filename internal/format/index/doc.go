// Package index is lanced's model of Lance index metadata and the shared
// pieces every index remap needs. It owns no I/O.
//
// It owns:
//   - kind detection (kind.go): which of the index types lance 8.0.0 builds
//     an IndexMetadata entry describes (btree, bitmap, labelList, fts, fm,
//     ivfFlat, ivfPq, ivfRq, hnswSq, hnswPq, the fragment-reuse index),
//     from the index_details type URL and, for vector indices, the
//     VectorIndexDetails fields;
//   - coverage (coverage.go): fragment bitmaps, effective coverage (bitmap ∩
//     existing fragments) and Lance's retention rule, so a commit can be
//     checked for leaving an index that real Lance would drop at its next
//     Delete/Update/Merge/Project commit
//     (https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/transaction.rs,
//     retain_relevant_indices), and the bitmap update a Rewrite applies to a
//     remapped or row-id index (recalculate_fragment_bitmap);
//   - the row-address mapping of rewrite groups (rowmap.go,
//     CompactionMapping): old row address → new row address or deleted,
//     computed on demand from each group's old fragments, their deletion
//     bitmaps and the new fragments' row counts, so no table-wide map is
//     ever built;
//   - the remapper registry (remapper.go): a Remapper per index kind turns
//     an old segment's files and a Mapping into a new segment's files;
//     sub-packages register theirs from init (RegisterRemapper), and
//     CanRemap tells the planner, from metadata alone, whether a segment
//     can be remapped and if not why;
//   - the fragment reuse index (fragreuse.go, FragReuse): Lance's
//     FragmentReuseIndexDetails decoded and built (inline in the manifest
//     up to Lance's 200 KiB), the bitmap translation Lance's load_indices
//     applies, the trim rule, the segments still relying on a version
//     (Behind), and which kinds index_coverage "defer" leaves to it
//     (Deferrable: bitmap, ivfFlat, ivfPq, ivfRq);
//   - unindexed rows per index (unindexed.go, Backlog), as Lance's
//     indexStats counts them, for the catch-up decisions.
//
// Sub-packages:
//   - internal/format/index/scalar: the btree, bitmap and labelList index
//     files, their remap and catch-up;
//   - internal/format/index/text: the fts index files, their remap and
//     catch-up (tokenizing new rows as Lance does);
//   - internal/format/index/vector: the IVF and HNSW vector index files
//     (ivfFlat, ivfPq, ivfRq, hnswSq, hnswPq), their remap, and catch-up
//     and segment merge.
//
// Both read and write index files with internal/format/lancefile and
// internal/format/lancewrite (index files are Lance data files) and take a
// Mapping for the addresses; the engine moves the bytes.
//
// Invariants: a fragment bitmap is never given new fragment ids unless the
// index files were rewritten for them (or the table has stable row ids);
// nothing here panics on outside bytes.
//
// Imports: internal/format/pb/..., internal/format/lancefile (segment.go:
// opening a segment's files), roaring and the protobuf runtime.
package index
