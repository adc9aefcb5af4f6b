// Package scalar reads, writes and remaps Lance's scalar index files: the
// btree (page_data.lance, page_lookup.lance), bitmap and labelList
// (bitmap_page_lookup.lance) segments lance 8.0.0 writes under
// _indices/<uuid>/.
//
// A remap reads an index segment page by page, maps every row address
// through an index.Mapping (dropping rows the rewrite deleted) and writes a
// new segment under a new uuid, as Lance's remap of each index type does
// (https://github.com/lancedb/lance/tree/main/rust/lance-index/src/scalar:
// btree.rs, bitmap.rs, label_list.rs).
//
// Invariants: no I/O beyond the readers and writers it is given; memory is
// bounded by one page of the index plus the mapper.
//
// Imports: internal/format/index, internal/format/lancefile,
// internal/format/lancewrite, arrow-go, roaring.
package scalar
