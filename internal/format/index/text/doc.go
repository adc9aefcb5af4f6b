// Package text reads Lance's full-text (inverted, "FTS") index segments as
// lance 8.0.0 writes them under _indices/<uuid>/, and remaps the parts whose
// encoding it knows.
//
// A segment is metadata.lance (schema metadata: tokenizer params JSON,
// partition ids, token_set_format, posting_tail_codec; one row holding the
// deleted_fragments roaring bitmap) plus, per partition p,
// part_<p>_tokens.lance (the token dictionary), part_<p>_docs.lance (one row
// per indexed document: _rowid, _num_tokens) and part_<p>_invert.lance (one
// row per token id: compressed _posting blocks, _max_score, _length and,
// with positions, _position). Postings name documents by doc id, the row
// number in the docs file, not by row address. See
// https://github.com/lancedb/lance/tree/main/rust/lance-index/src/scalar/inverted
// (index.rs, builder.rs, encoding.rs).
//
// Lance's remap (InnerBuilder::remap in builder.rs) keeps the docs file's
// order, rewrites each row address through the mapping and drops deleted
// rows; doc ids after a dropped doc shift down, so every posting list is
// re-encoded, a token whose list becomes empty is dropped and later token
// ids shift, and block max scores are recomputed from the new doc stats.
// This package does the docs part (RemapDocs, checked row by row against
// Lance's own remap) and refuses the rest with ErrUnsupported (CanRemap):
// the 8.0.0 posting block codec and FST token dictionary are not
// implemented, so a caller must keep an FTS index's fragments instead of
// rewriting them.
//
// Invariants: no I/O beyond the lancefile.File values it is given; docs are
// streamed batch by batch, memory is one batch plus a roaring bitmap of the
// dropped doc ids.
//
// Imports: internal/format/index, internal/format/lancefile, arrow-go,
// roaring.
package text
