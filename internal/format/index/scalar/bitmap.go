package scalar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// BitmapFileName is the one file of a bitmap or labelList segment.
const BitmapFileName = "bitmap_page_lookup.lance"

// Columns and metadata of bitmap_page_lookup.lance
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/bitmap.rs,
// write_bitmap_index): one row per distinct value ("keys", null for the
// rows whose value is null) with its serialized RowAddrs ("bitmaps"). Row
// order carries no meaning: Lance loads every key into an ordered map and
// reads a bitmap by its row. lance 8.0.0 also writes "lance:index_stats"
// {"num_bitmaps": rows}.
const (
	bitmapKeysColumn    = "keys"
	bitmapBitmapsColumn = "bitmaps"
	keyIndexStats       = "lance:index_stats"
	// keyListNulls names the global buffer of a labelList file that holds
	// the RowAddrs of rows whose list is null (lance 8.0.0, index version
	// 1): array filters answer NULL for them, not false.
	keyListNulls = "lance:label_list_nulls"
)

// BitmapBatchRows is the most keys a bitmap remap holds at once (Lance's
// loader reads the keys in chunks of the same size, MAX_ROWS_PER_CHUNK);
// BitmapBatchBytes bounds a batch by the file's average bytes per key, so
// a low-cardinality index (few keys with large bitmaps) is read a few keys
// at a time.
const (
	BitmapBatchRows  = 2048
	BitmapBatchBytes = 8 << 20
)

// batchRows is how many keys of the file make about BitmapBatchBytes.
func (b *Bitmap) batchRows() int {
	n := b.File.NumRows()
	if n == 0 {
		return BitmapBatchRows
	}
	per := max(uint64(b.File.Size())/n, 1)
	return int(min(max(BitmapBatchBytes/per, 1), BitmapBatchRows))
}

// Bitmap is an opened bitmap_page_lookup.lance (a bitmap or labelList
// index; a labelList index is a bitmap index over the list's items).
type Bitmap struct {
	File      *lancefile.File
	KeysField int32
	MapsField int32
	// ListNullsBuffer is the global buffer holding a labelList's null-list
	// rows (lance:label_list_nulls), 0 if none.
	ListNullsBuffer int
}

// OpenBitmap checks the file's columns.
func OpenBitmap(f *lancefile.File) (*Bitmap, error) {
	b := &Bitmap{File: f, KeysField: -1, MapsField: -1}
	top := f.TopFields()
	if len(top) != 2 || top[0].GetName() != bitmapKeysColumn || top[1].GetName() != bitmapBitmapsColumn {
		return nil, errorf(f, ErrUnsupported, "columns %v, want [%s %s]", names(top), bitmapKeysColumn, bitmapBitmapsColumn)
	}
	if lt := top[1].GetLogicalType(); lt != "binary" {
		return nil, errorf(f, ErrUnsupported, "%s column of type %s, want binary", bitmapBitmapsColumn, lt)
	}
	b.KeysField, b.MapsField = top[0].GetId(), top[1].GetId()
	extra := len(f.GlobalBuffers) - 1 // buffer 0 is the schema
	if raw, ok := meta(f)[keyListNulls]; ok {
		pos, err := strconv.Atoi(string(raw))
		if err != nil || pos <= 0 || pos >= len(f.GlobalBuffers) {
			return nil, errorf(f, ErrCorrupt, "%s = %q is not a global buffer of the file (it has %d)", keyListNulls, raw, len(f.GlobalBuffers))
		}
		b.ListNullsBuffer = pos
		extra--
	}
	if extra > 0 {
		// A remap would have to carry buffers it does not understand.
		return nil, errorf(f, ErrUnsupported, "%d global buffers not named by %s", extra, keyListNulls)
	}
	return b, nil
}

// KeyType is the Arrow type of the file's keys (the column's type, or a
// labelList's item type).
func (b *Bitmap) KeyType() (arrow.DataType, error) {
	sc, err := lancefile.ArrowSchema(b.File.Fields())
	if err != nil {
		return nil, err
	}
	return sc.Field(0).Type, nil
}

// ListNulls reads the rows whose list is null from a labelList file (nil
// when the file does not record them).
func (b *Bitmap) ListNulls() (*RowAddrs, error) {
	if b.ListNullsBuffer <= 0 {
		return nil, nil
	}
	raw, err := b.File.ReadBuffer(b.File.GlobalBuffers[b.ListNullsBuffer])
	if err != nil {
		return nil, err
	}
	set, err := DecodeRowAddrs(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", b.File.Name(), keyListNulls, err)
	}
	return set, nil
}

// NumKeys is the number of distinct values (rows) in the file.
func (b *Bitmap) NumKeys() uint64 { return b.File.NumRows() }

// Batches streams the file's rows, at most rows keys at a time (0: as many
// as make about BitmapBatchBytes, at most BitmapBatchRows): each record
// holds "keys" and "bitmaps". Release the reader when done.
func (b *Bitmap) Batches(ctx context.Context, rows int) (*lancefile.Reader, error) {
	if rows <= 0 {
		rows = b.batchRows()
	}
	return b.File.NewReader(ctx, lancefile.ReadOptions{BatchRows: rows, ChunkReads: true})
}

// BitmapWriter writes a bitmap_page_lookup.lance batch by batch: a remap,
// or a catch-up that indexes new rows, hands it distinct values with their
// serialized RowAddrs. Memory: the batch handed in.
type BitmapWriter struct {
	w      *lancewrite.Writer
	schema *arrow.Schema
	rows   uint64
	done   bool
}

// NewBitmapWriter starts a bitmap file on out. fields are the file's Lance
// fields (keys, bitmaps): a remap passes the source file's, a new index
// lancewrite.FieldsFromArrow(BitmapSchema(type), 0). meta is the schema
// metadata to keep (lance:index_stats is set by Close).
func NewBitmapWriter(out io.Writer, fields []*filepb.Field, version lancewrite.Version, meta map[string][]byte) (*BitmapWriter, error) {
	sc, err := lancefile.ArrowSchema(fields)
	if err != nil {
		return nil, err
	}
	if sc.NumFields() != 2 || sc.Field(1).Type.ID() != arrow.BINARY {
		return nil, fmt.Errorf("%w: bitmap file schema %s", ErrUnsupported, sc)
	}
	w, err := lancewrite.NewWriter(out, fields, lancewrite.Options{PageBytes: index.FilePageBytes, Version: version, SchemaMetadata: maps.Clone(meta)})
	if err != nil {
		return nil, err
	}
	return &BitmapWriter{w: w, schema: sc}, nil
}

// BitmapSchema is the Arrow schema of a bitmap file whose keys have type dt.
func BitmapSchema(dt arrow.DataType) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: bitmapKeysColumn, Type: dt, Nullable: true},
		{Name: bitmapBitmapsColumn, Type: arrow.BinaryTypes.Binary, Nullable: true},
	}, nil)
}

// Write appends keys (distinct values; a null key holds the rows whose
// value is null) with their serialized RowAddrs, bitmaps[i] for keys[i].
// Keep batches near BitmapBatchRows keys.
func (bw *BitmapWriter) Write(keys arrow.Array, bitmaps [][]byte) error {
	if bw.done {
		return lancewrite.ErrClosed
	}
	if !arrow.TypeEqual(keys.DataType(), bw.schema.Field(0).Type) {
		return fmt.Errorf("%w: keys of type %s, the file's are %s", ErrUnsupported, keys.DataType(), bw.schema.Field(0).Type)
	}
	if keys.Len() != len(bitmaps) {
		return fmt.Errorf("scalar: %d keys with %d bitmaps", keys.Len(), len(bitmaps))
	}
	if len(bitmaps) == 0 {
		return nil
	}
	mb := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer mb.Release()
	mb.AppendValues(bitmaps, nil)
	m := mb.NewArray()
	defer m.Release()
	rec := array.NewRecordBatch(bw.schema, []arrow.Array{keys, m}, int64(keys.Len()))
	defer rec.Release()
	bw.rows += uint64(keys.Len())
	return bw.w.Write(rec)
}

// SetListNulls writes the rows whose list is null (a labelList file) as a
// global buffer and names it in lance:label_list_nulls.
func (bw *BitmapWriter) SetListNulls(nulls *RowAddrs) error {
	if bw.done {
		return lancewrite.ErrClosed
	}
	enc, err := nulls.Encode()
	if err != nil {
		return err
	}
	pos, err := bw.w.AddGlobalBuffer(enc)
	if err != nil {
		return err
	}
	bw.w.SetSchemaMetadata(keyListNulls, []byte(strconv.Itoa(pos)))
	return nil
}

// Close writes the footer, with lance:index_stats {"num_bitmaps": keys
// written} as lance 8.0.0 does; it returns the file size.
func (bw *BitmapWriter) Close() (int64, error) {
	if bw.done {
		return 0, lancewrite.ErrClosed
	}
	bw.done = true
	stats, err := json.Marshal(map[string]uint64{"num_bitmaps": bw.rows})
	if err != nil {
		return 0, err
	}
	bw.w.SetSchemaMetadata(keyIndexStats, stats)
	res, err := bw.w.Close()
	if err != nil {
		return 0, err
	}
	return res.Size, nil
}

// RemapResult describes a remapped segment.
type RemapResult struct {
	// Files are the files written, with their sizes (IndexMetadata.files).
	Files []File
	// Rows is the number of row addresses kept, Dropped the number the
	// mapping deleted. Keys is the number of distinct values (bitmap) or
	// pages (btree) written.
	Rows, Dropped, Keys uint64
}

// File is one file of an index segment.
type File struct {
	Name string
	Size int64
}

// RemapBitmap writes a remapped copy of a bitmap or labelList file to out:
// every key keeps its row, its bitmap passed through m (deleted rows
// dropped, moved rows at their new address), as Lance's BitmapIndex::remap
// does; a key whose rows were all deleted stays with an empty set, as in
// Lance's remap. The fields, schema metadata and file version are the
// source's. Memory: one batch of keys and their bitmaps (about
// BitmapBatchBytes, or one key when a single bitmap is larger).
func RemapBitmap(ctx context.Context, b *Bitmap, m index.Mapping, out io.Writer) (RemapResult, error) {
	if m == nil {
		return RemapResult{}, fmt.Errorf("scalar: remap of %s without a mapping", b.File.Name())
	}
	return MergeBitmap(ctx, b, m, nil, out)
}

// rewrittenFunc lets a remap skip whole fragments the mapping leaves alone.
func rewrittenFunc(m index.Mapping) func(uint64) bool {
	if r, ok := m.(interface{ Rewritten(uint64) bool }); ok {
		return r.Rewritten
	}
	return nil
}

func meta(f *lancefile.File) map[string][]byte { return f.Descriptor.GetSchema().GetMetadata() }

func errorf(f *lancefile.File, sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", sentinel, f.Name(), fmt.Sprintf(format, args...))
}

func names(fs []*filepb.Field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.GetName()
	}
	return out
}
