package text

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// MetadataFileName is the segment-wide metadata file.
const MetadataFileName = "metadata.lance"

// DocsFileName, InvertFileName and TokensFileName name partition p's files.
func DocsFileName(p uint64) string   { return fmt.Sprintf("part_%d_docs.lance", p) }
func InvertFileName(p uint64) string { return fmt.Sprintf("part_%d_invert.lance", p) }
func TokensFileName(p uint64) string { return fmt.Sprintf("part_%d_tokens.lance", p) }

// Column and metadata names lance 8.0.0 writes.
const (
	colRowID            = "_rowid"
	colNumTokens        = "_num_tokens"
	colPosting          = "_posting"
	colMaxScore         = "_max_score"
	colLength           = "_length"
	colPosition         = "_position"
	colDeletedFragments = "deleted_fragments"
	colTokenNextID      = "_token_next_id"
	colTokenTotalLength = "_token_total_length"

	keyParams           = "params"
	keyPartitions       = "partitions"
	keyTokenSetFormat   = "token_set_format"
	keyPostingTailCodec = "posting_tail_codec"
)

// ErrUnsupported marks a segment (or a part of its remap) this package does
// not know; the caller must keep the index's fragments, not rewrite them.
var ErrUnsupported = errors.New("fts index: unsupported")

// ErrCorrupt marks an index file that contradicts itself.
var ErrCorrupt = errors.New("fts index: corrupt")

func errorf(f *lancefile.File, sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", sentinel, f.Name(), fmt.Sprintf(format, args...))
}

func meta(f *lancefile.File) map[string][]byte { return f.Descriptor.GetSchema().GetMetadata() }

// fieldID returns the id of the top-level column named name.
func fieldID(f *lancefile.File, name string) (int32, bool) {
	for _, fd := range f.Descriptor.GetSchema().GetFields() {
		if fd.GetParentId() < 0 && fd.GetName() == name {
			return fd.GetId(), true
		}
	}
	return 0, false
}

// Metadata is metadata.lance.
type Metadata struct {
	// Params is the tokenizer configuration JSON, kept verbatim: a remapped
	// segment must tokenize queries exactly like the original.
	Params       json.RawMessage
	WithPosition bool
	Partitions   []uint64
	// TokenSetFormat is "fst" in lance 8.0.0 (older: "arrow").
	TokenSetFormat string
	// PostingTailCodec is "fixed32_v1" in lance 8.0.0 by default.
	PostingTailCodec string
	// DeletedFragments is the deleted_fragments bitmap (empty when the
	// index was built or remapped, per lance 8.0.0).
	DeletedFragments *roaring.Bitmap
}

// ReadMetadata decodes metadata.lance.
func ReadMetadata(ctx context.Context, f *lancefile.File) (*Metadata, error) {
	md := meta(f)
	m := &Metadata{
		Params:           json.RawMessage(md[keyParams]),
		TokenSetFormat:   string(md[keyTokenSetFormat]),
		PostingTailCodec: string(md[keyPostingTailCodec]),
		DeletedFragments: roaring.New(),
	}
	if len(m.Params) == 0 {
		return nil, errorf(f, ErrUnsupported, "no %q schema metadata (not an inverted index metadata file)", keyParams)
	}
	var p struct {
		WithPosition bool `json:"with_position"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, errorf(f, ErrCorrupt, "params %q: %v", md[keyParams], err)
	}
	m.WithPosition = p.WithPosition
	raw, ok := md[keyPartitions]
	if !ok {
		return nil, errorf(f, ErrUnsupported, "no %q schema metadata", keyPartitions)
	}
	if err := json.Unmarshal(raw, &m.Partitions); err != nil {
		return nil, errorf(f, ErrCorrupt, "partitions %q: %v", raw, err)
	}
	if id, ok := fieldID(f, colDeletedFragments); ok && f.NumRows() > 0 {
		rec, err := f.ReadAll(ctx, []int32{id})
		if err != nil {
			return nil, err
		}
		defer rec.Release()
		col, ok := rec.Column(0).(*array.Binary)
		if !ok {
			return nil, errorf(f, ErrCorrupt, "%s is %s, want binary", colDeletedFragments, rec.Column(0).DataType())
		}
		if col.Len() > 0 && col.IsValid(0) {
			if err := m.DeletedFragments.UnmarshalBinary(col.Value(0)); err != nil {
				return nil, errorf(f, ErrCorrupt, "%s bitmap: %v", colDeletedFragments, err)
			}
		}
	}
	return m, nil
}

// Tokens is the header of part_<p>_tokens.lance.
type Tokens struct {
	// NextID is the number of token ids (= rows of the invert file).
	NextID uint32
	// TotalLength is the summed byte length of all tokens.
	TotalLength uint64
}

// ReadTokens reads the FST token file's counters (lance 8.0.0
// token_set_format "fst": one row of _token_fst_bytes, _token_next_id,
// _token_total_length).
func ReadTokens(ctx context.Context, f *lancefile.File) (*Tokens, error) {
	nid, ok1 := fieldID(f, colTokenNextID)
	tl, ok2 := fieldID(f, colTokenTotalLength)
	if !ok1 || !ok2 {
		return nil, errorf(f, ErrUnsupported, "no %s/%s columns (not an fst token file)", colTokenNextID, colTokenTotalLength)
	}
	if f.NumRows() != 1 {
		return nil, errorf(f, ErrCorrupt, "fst token file has %d rows, want 1", f.NumRows())
	}
	rec, err := f.ReadAll(ctx, []int32{nid, tl})
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	a, ok1 := rec.Column(0).(*array.Uint32)
	b, ok2 := rec.Column(1).(*array.Uint64)
	if !ok1 || !ok2 {
		return nil, errorf(f, ErrCorrupt, "token counters are %s/%s, want uint32/uint64", rec.Column(0).DataType(), rec.Column(1).DataType())
	}
	return &Tokens{NextID: a.Value(0), TotalLength: b.Value(0)}, nil
}

// Invert describes part_<p>_invert.lance.
type Invert struct {
	// Tokens is the number of posting lists (one row per token id).
	Tokens uint64
	// Positions reports a _position column (with_position indices).
	Positions bool
	// Postings is the sum of _length: (token, doc) pairs.
	Postings uint64
}

// ReadInvert checks the posting file's columns and sums _length, streaming.
func ReadInvert(ctx context.Context, f *lancefile.File) (*Invert, error) {
	for _, c := range []string{colPosting, colMaxScore} {
		if _, ok := fieldID(f, c); !ok {
			return nil, errorf(f, ErrUnsupported, "no %s column", c)
		}
	}
	lid, ok := fieldID(f, colLength)
	if !ok {
		return nil, errorf(f, ErrUnsupported, "no %s column", colLength)
	}
	_, pos := fieldID(f, colPosition)
	inv := &Invert{Tokens: f.NumRows(), Positions: pos}
	r, err := f.NewReader(ctx, lancefile.ReadOptions{FieldIDs: []int32{lid}, ChunkReads: true})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	for r.Next() {
		col, ok := r.RecordBatch().Column(0).(*array.Uint32)
		if !ok {
			return nil, errorf(f, ErrCorrupt, "%s is %s, want uint32", colLength, r.RecordBatch().Column(0).DataType())
		}
		for _, n := range col.Uint32Values() {
			inv.Postings += uint64(n)
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return inv, nil
}

// ReadDocs streams part_<p>_docs.lance in doc-id order.
func ReadDocs(ctx context.Context, f *lancefile.File, fn func(docID uint32, rowID uint64, numTokens uint32) error) error {
	rid, ok1 := fieldID(f, colRowID)
	nt, ok2 := fieldID(f, colNumTokens)
	if !ok1 || !ok2 {
		return errorf(f, ErrUnsupported, "no %s/%s columns (not a docs file)", colRowID, colNumTokens)
	}
	if f.NumRows() > 1<<32 {
		return errorf(f, ErrCorrupt, "%d docs do not fit 32-bit doc ids", f.NumRows())
	}
	r, err := f.NewReader(ctx, lancefile.ReadOptions{FieldIDs: []int32{rid, nt}, ChunkReads: true})
	if err != nil {
		return err
	}
	defer r.Release()
	var doc uint32
	for r.Next() {
		rec := r.RecordBatch()
		ids, ok1 := rec.Column(0).(*array.Uint64)
		ns, ok2 := rec.Column(1).(*array.Uint32)
		if !ok1 || !ok2 {
			return errorf(f, ErrCorrupt, "docs columns are %s/%s, want uint64/uint32", rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		for i, id := range ids.Uint64Values() {
			if err := fn(doc, id, ns.Value(i)); err != nil {
				return err
			}
			doc++
		}
	}
	return r.Err()
}

// RemapDocs is the docs half of Lance's remap: docs keep their order, each
// row address goes through m, and a deleted row's doc is dropped. emit gets
// every kept doc with its new address; the result holds the old doc ids of
// the dropped docs (what the posting lists' doc ids shift by).
func RemapDocs(ctx context.Context, f *lancefile.File, m index.Mapping, emit func(rowID uint64, numTokens uint32) error) (*roaring.Bitmap, error) {
	removed := roaring.New()
	err := ReadDocs(ctx, f, func(doc uint32, row uint64, n uint32) error {
		nr, ok := m.Map(row)
		if !ok {
			removed.Add(doc)
			return nil
		}
		return emit(nr, n)
	})
	if err != nil {
		return nil, err
	}
	return removed, nil
}

// CanRemap reports whether this package can remap a segment with the given
// metadata (see CheckSegment); a nil error means yes.
func CanRemap(m *Metadata) error { return CheckSegment(m) }
