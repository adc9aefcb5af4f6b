// Package text reads and remaps Lance's full-text (inverted, "FTS") index
// segments as lance 8.0.0 writes them under _indices/<uuid>/.
//
// A segment is metadata.lance (schema metadata: tokenizer params JSON,
// partition ids, token_set_format, posting_tail_codec; one row holding the
// deleted_fragments roaring bitmap) plus, per partition p,
// part_<p>_tokens.lance (the token dictionary: one FST map token -> token
// id), part_<p>_docs.lance (one row per indexed document: _rowid,
// _num_tokens) and part_<p>_invert.lance (one row per token id: _posting
// blocks of 128 docs with a block max score in front, bit-packed full
// blocks and a fixed32 tail; _max_score; _length; with positions,
// _position: per document a list of position blocks; a global buffer,
// named by posting_group_offsets_buf, with the first token of each
// read-cache group). Postings name documents by doc id, the row number in
// the docs file, not by row address. See
// https://github.com/lancedb/lance/tree/main/rust/lance-index/src/scalar/inverted
// (index.rs, builder.rs, encoding.rs).
//
// RemapPartition does what lance's remap (InnerBuilder::remap in
// builder.rs) does: docs keep their order, each row address goes through
// the mapping and deleted rows are dropped; doc ids after a dropped doc
// shift down, so every posting list is re-encoded, block max scores are
// recomputed from the new doc statistics, a token whose list becomes empty
// is dropped and later token ids shift, and the FST dictionary is rebuilt
// (fst.go, the Rust fst crate's format and node registry). RemapMetadata
// rewrites metadata.lance. The output equals lance's own remap file by
// file (docs, token dictionary bytes, postings, positions, block scores,
// posting groups), checked against real Lance's compaction.
//
// CatchUp adds rows to a segment as lance's optimize_indices does
// (InvertedIndexBuilder::update): the old partitions are copied, the new
// rows become one new partition, metadata.lance lists them all. Analyzer
// (analyzer.go, fold.go) tokenizes new rows as lance's tantivy chain does
// for the index's params; PartitionBuilder (build.go) writes the partition
// as lance's InnerBuilder does. Params it cannot reproduce are
// ErrUnsupported (Params.Supported).
//
// CheckSegment (CanRemap) refuses, with ErrUnsupported, layouts other than
// lance 8.0.0's default: the legacy Arrow token set and format version 2
// (varint posting tails, shared position streams, written only when
// LANCE_FTS_FORMAT_VERSION=2).
//
// The package registers the fts index.Remapper (remapper.go); the FM
// index is package fm's.
//
// Invariants: no I/O beyond the lancefile.File values and io.Writers it is
// given; nothing panics on outside bytes. Memory per partition: a bitmap of
// the dropped doc ids, one u32 token count per kept doc, one batch of
// posting lists, and the token dictionary (stored by lance as one value).
//
// Imports: internal/format/index, internal/format/lancefile,
// internal/format/lancewrite, internal/format/pb/tablepb, arrow-go,
// roaring, protobuf, kljensen/snowball (the English stemmer).
package text
