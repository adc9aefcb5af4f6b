// Package scalar reads, writes and remaps Lance's scalar index files: the
// btree (page_data.lance, page_lookup.lance), bitmap and labelList
// (bitmap_page_lookup.lance) segments lance 8.0.0 writes under
// _indices/<uuid>/ (formats:
// https://github.com/lancedb/lance/tree/main/docs/src/format/table/index/scalar,
// code: https://github.com/lancedb/lance/tree/main/rust/lance-index/src/scalar,
// btree.rs, bitmap.rs, label_list.rs).
//
//   - btree: page_data.lance holds (values, ids) sorted by value, nulls
//     first, in pages of batch_size rows (4096); page_lookup.lance one row
//     per page (min, max, null_count, page_idx) and the schema metadata
//     batch_size and range_partitioned. Lance reads page i at rows
//     [i*batch_size, (i+1)*batch_size), so all pages but the last are full.
//     OpenBTree, BTree.ReadPage, BTreeWriter (cuts pages, writes the
//     lookup), RemapBTree.
//   - bitmap and labelList: one row per distinct value (keys) with the
//     serialized RowAddrs (bitmaps) of the rows holding it; a null key
//     holds the null rows; lance:index_stats {"num_bitmaps": n}. A labelList
//     is a bitmap over the list items plus, in a global buffer named by
//     lance:label_list_nulls, the rows whose list is null. OpenBitmap,
//     Bitmap.Batches, BitmapWriter, RemapBitmap.
//
// A remap passes every row address through an index.Mapping (dropping rows
// the rewrite deleted) and writes the new segment's files to the writers it
// is given. Checked against lance 8.0.0's own compaction on the same
// tables: its remapped btree holds the same pairs in the same order, re-cut
// into full pages with a rebuilt lookup (not its old pages shrunk, not the
// old lookup copied), which is what RemapBTree writes; its remapped bitmaps
// hold the same keys with the same rows (keys in another order: Lance writes
// them in hash order, and row order carries no meaning). A large btree is
// remapped in parts by page range (parts.go: RemapBTreePages writes a
// range's pairs as a piece, JoinBTree concatenates the pieces by page copy
// and rebuilds the lookup), with the same pairs and the same lookup.
//
// A catch-up (adding rows written after the index was built, as Lance's
// optimize does for scalar indices: BTreeIndex::update and
// BitmapIndex::update) merges the old segment with the new rows into a new
// segment: MergeBTree streams the old pages and the added rows (sorted by
// value, nulls first; old rows first among equal values, as Lance's
// sort-preserving merge of old and new data puts them) into full pages;
// MergeBitmap adds a BitmapAdditions (the new rows grouped by value; for a
// labelList AddLists, null lists included) to each old key and appends the
// new keys. Both can pass the old rows through a Mapping too (a compaction
// and a catch-up in one rewrite). CatchUp runs a whole catch-up for the
// engine: rows from an index.RowSource, the old segment through an
// index.SegmentReader, the new one through an index.SegmentWriter; a
// btree's added rows are collected and sorted by BTreeAdditions under a
// byte bound. Checked with real Lance: merged segments
// swapped in with a bitmap covering the appended fragments are loaded as
// covering every row and answer every filter with the right rows. The
// writers underneath (BTreeWriter: sorted (value, row address) batches cut
// into pages; BitmapWriter: distinct values with their RowAddrs) serve a
// catch-up that writes a segment from scratch.
//
// Invariants: no I/O beyond the readers and writers it is given; memory is
// two btree pages, or one batch of bitmap keys with their bitmaps (about
// BitmapBatchBytes, at most BitmapBatchRows keys), plus the lookup's two
// values per page; nothing panics on outside bytes (ErrCorrupt,
// ErrUnsupported).
//
// Imports: internal/format/index, internal/format/lancefile,
// internal/format/lancewrite, arrow-go, roaring.
package scalar
