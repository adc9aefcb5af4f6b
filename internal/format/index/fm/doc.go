// Package fm builds and reads Lance's FM index (createIndex(col, fm()),
// index type Fm, details /lance.index.pb.FMIndexDetails, index_version
// 10) as lance 8.0.0 writes it under _indices/<uuid>/
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/fmindex.rs).
//
// A segment is one or more partition files part_<p>_fm.lance, each the FM
// index of PartitionDocs consecutive documents (non-null rows in row
// order; the last partition holds the rest, a segment of no document is
// one empty partition 0). A partition's text is its documents, each
// followed by 0xFF, then 0x00 (0x00 and 0xFF inside a document become a
// space). Its file has one row per block of a bit vector: the columns
// node_id (u32), block_id (u32), words (large_binary: BlockWords
// little-endian u64 words), prefix_rank (u64: set bits before the block)
// and bit_len (u64: the vector's length); the wavelet tree's nodes come
// first, in node id order, then the suffix array samples (node_id
// 0xFFFFFFFF, prefix_rank 0, bit_len the number of samples). The schema
// metadata holds the rest: bwt_len, num_bwt_nodes, total_wavelet_rows,
// num_sa_blocks, sa_samples_len, sa_sample_rate (32), alphabet_size (256)
// in decimal; c_table (257 u64), huffman_codes (per byte value: bits u32,
// length u8, path length u16, path node ids u32), tree_topology (node
// count u32, then per node its two children as tag u8 (0 node, 1 leaf)
// and u32), row_ids and doc_start_positions (u64 each) in hex of the
// little-endian bytes.
//
// Builder writes a segment from the indexed column's rows in row address
// order: the metadata and rows of every partition file equal lance's for
// the same rows (checked against real Lance's createIndex, the oracle
// tests); the files' page layout may differ. The suffix array is built by
// SA-IS (sais.go); it is unique, so it equals the one lance builds with
// libsais. ReadPartition decodes a partition file and Partition.Search
// runs lance's substring search over it (tests and checks).
//
// Lance does not remap an FM index when it compacts (its compaction
// leaves the segment on the old fragments) and rebuilds it from the
// column when it optimizes indices; lanced rebuilds it the same way, with
// the rows' new addresses, both to catch it up and when it compacts
// fragments the index covers (remapper.go).
//
// Memory: one partition at a time, about 6 bytes per byte of its text
// (text, suffix array, BWT, wavelet tree); the builder refuses a
// partition whose text passes its bound (ErrTooLarge).
//
// Imports: internal/format/index, internal/format/lancefile,
// internal/format/lancewrite, internal/format/pb, arrow-go.
package fm
