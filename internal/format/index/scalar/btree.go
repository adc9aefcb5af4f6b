package scalar

import (
	"context"
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

// Files of a btree segment
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/btree.rs):
// page_data.lance holds every (value, row address) pair sorted by value
// (nulls first), cut into pages of batch_size rows; page_lookup.lance holds
// one row per page: its first and last value (min, max), its null count and
// its number. Lance reads page i as rows [i*batch_size, (i+1)*batch_size)
// of page_data.lance, so every page but the last must be full.
const (
	BTreeLookupFileName = "page_lookup.lance"
	BTreeDataFileName   = "page_data.lance"
	// DefaultBTreeBatchSize is Lance's page size (DEFAULT_BTREE_BATCH_SIZE),
	// also what it assumes when the lookup file does not say.
	DefaultBTreeBatchSize = 4096

	keyBatchSize        = "batch_size"
	keyRangePartitioned = "range_partitioned"
	btreeValuesColumn   = "values"
	btreeIDsColumn      = "ids"
	lookupMinColumn     = "min"
	lookupMaxColumn     = "max"
	lookupNullsColumn   = "null_count"
	lookupPageIdxColumn = "page_idx"
)

// BTree is an opened btree segment.
type BTree struct {
	Lookup, Data *lancefile.File
	// BatchSize is the rows per page (lookup metadata batch_size).
	BatchSize uint64
	// NumPages is the number of pages (rows of the lookup file).
	NumPages int
}

// OpenBTree checks a btree segment's two files against each other.
func OpenBTree(lookup, data *lancefile.File) (*BTree, error) {
	lt := lookup.TopFields()
	if len(lt) != 4 || lt[0].GetName() != lookupMinColumn || lt[1].GetName() != lookupMaxColumn ||
		lt[2].GetName() != lookupNullsColumn || lt[3].GetName() != lookupPageIdxColumn {
		return nil, errorf(lookup, ErrUnsupported, "lookup columns %v, want [min max null_count page_idx]", names(lt))
	}
	dt := data.TopFields()
	if len(dt) != 2 || dt[0].GetName() != btreeValuesColumn || dt[1].GetName() != btreeIDsColumn {
		return nil, errorf(data, ErrUnsupported, "page columns %v, want [values ids] (a flat sub-index)", names(dt))
	}
	if dt[1].GetLogicalType() != "uint64" {
		return nil, errorf(data, ErrUnsupported, "ids column of type %s", dt[1].GetLogicalType())
	}
	if lt[0].GetLogicalType() != dt[0].GetLogicalType() || lt[1].GetLogicalType() != dt[0].GetLogicalType() {
		return nil, errorf(lookup, ErrCorrupt, "lookup min/max of type %s/%s, pages hold %s", lt[0].GetLogicalType(), lt[1].GetLogicalType(), dt[0].GetLogicalType())
	}
	md := meta(lookup)
	if v, ok := md[keyRangePartitioned]; ok && string(v) != "false" {
		return nil, errorf(lookup, ErrUnsupported, "%s = %q (a range-partitioned btree)", keyRangePartitioned, v)
	}
	b := &BTree{Lookup: lookup, Data: data, BatchSize: DefaultBTreeBatchSize, NumPages: int(lookup.NumRows())}
	if v, ok := md[keyBatchSize]; ok {
		// Lance falls back to the default when batch_size does not parse.
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil && n > 0 {
			b.BatchSize = n
		}
	}
	pages := (data.NumRows() + b.BatchSize - 1) / b.BatchSize
	if pages != lookup.NumRows() {
		return nil, errorf(lookup, ErrCorrupt, "%d lookup rows for %d rows in pages of %d (%d pages)", lookup.NumRows(), data.NumRows(), b.BatchSize, pages)
	}
	return b, nil
}

// ReadLookup reads the lookup file (one row per page; it is what Lance
// keeps in memory for the index).
func (b *BTree) ReadLookup(ctx context.Context) (arrow.RecordBatch, error) {
	return b.Lookup.ReadAll(ctx, nil)
}

// ReadPage reads page p: "values" and "ids", as Lance's read_page does.
func (b *BTree) ReadPage(ctx context.Context, p int) (arrow.RecordBatch, error) {
	if p < 0 || p >= b.NumPages {
		return nil, fmt.Errorf("scalar: %s: page %d of %d", b.Data.Name(), p, b.NumPages)
	}
	off := uint64(p) * b.BatchSize
	n := min(b.BatchSize, b.Data.NumRows()-off)
	r, err := b.Data.NewReader(ctx, lancefile.ReadOptions{Offset: off, Limit: n, BatchRows: int(n), ChunkReads: true})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return nil, err
		}
		return nil, errorf(b.Data, ErrCorrupt, "page %d: no rows", p)
	}
	rec := r.RecordBatch()
	if uint64(rec.NumRows()) != n {
		return nil, errorf(b.Data, ErrCorrupt, "page %d: read %d rows, want %d", p, rec.NumRows(), n)
	}
	rec.Retain()
	return rec, nil
}

// BTreeWriter writes a btree segment from (value, row address) pairs handed
// in sorted order (nulls first, as Lance sorts them): it cuts them into
// pages of exactly BatchSize rows, as Lance's training does
// (chunk_concat_stream), and writes the lookup file at Close. A remap and a
// catch-up (merging old pages with new rows) both write through it.
// Memory: at most one page of buffered rows plus two values per page.
type BTreeWriter struct {
	data       *lancewrite.Writer
	lookupF    []*filepb.Field
	lookupMeta map[string][]byte
	version    lancewrite.Version
	schema     *arrow.Schema
	batch      uint64
	pend       []arrow.RecordBatch // buffered rows, less than one page
	pendRows   uint64
	bounds     []arrow.Array // per page, [min, max] copied out
	nulls      []uint32
	rows       uint64
	done       bool
}

// BTreeOptions describe the files a BTreeWriter writes.
type BTreeOptions struct {
	// DataFields/LookupFields are the Lance fields of page_data.lance and
	// page_lookup.lance: a remap passes the source files', a new index
	// BTreeDataSchema/BTreeLookupSchema through lancewrite.FieldsFromArrow.
	DataFields, LookupFields []*filepb.Field
	// DataMeta/LookupMeta are the files' schema metadata; batch_size is
	// always set to BatchSize and range_partitioned defaults to "false".
	DataMeta, LookupMeta map[string][]byte
	// BatchSize is the rows per page (0: DefaultBTreeBatchSize).
	BatchSize uint64
	Version   lancewrite.Version
}

// BTreeDataSchema is the Arrow schema of page_data.lance for values of type dt.
func BTreeDataSchema(dt arrow.DataType) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: btreeValuesColumn, Type: dt, Nullable: true},
		{Name: btreeIDsColumn, Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
}

// BTreeLookupSchema is the Arrow schema of page_lookup.lance for values of
// type dt.
func BTreeLookupSchema(dt arrow.DataType) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: lookupMinColumn, Type: dt, Nullable: true},
		{Name: lookupMaxColumn, Type: dt, Nullable: true},
		{Name: lookupNullsColumn, Type: arrow.PrimitiveTypes.Uint32},
		{Name: lookupPageIdxColumn, Type: arrow.PrimitiveTypes.Uint32},
	}, nil)
}

// NewBTreeWriter starts page_data.lance on data. With data nil nothing but
// the lookup is written (a join of pages written elsewhere: Write hands it
// the rows, Close writes the lookup).
func NewBTreeWriter(data io.Writer, o BTreeOptions) (*BTreeWriter, error) {
	sc, err := lancefile.ArrowSchema(o.DataFields)
	if err != nil {
		return nil, err
	}
	if sc.NumFields() != 2 || sc.Field(1).Type.ID() != arrow.UINT64 {
		return nil, fmt.Errorf("%w: btree page schema %s", ErrUnsupported, sc)
	}
	ls, err := lancefile.ArrowSchema(o.LookupFields)
	if err != nil {
		return nil, err
	}
	if ls.NumFields() != 4 || !arrow.TypeEqual(ls.Field(0).Type, sc.Field(0).Type) || !arrow.TypeEqual(ls.Field(1).Type, sc.Field(0).Type) {
		return nil, fmt.Errorf("%w: btree lookup schema %s for pages %s", ErrUnsupported, ls, sc)
	}
	var w *lancewrite.Writer
	if data != nil {
		if w, err = lancewrite.NewWriter(data, o.DataFields, lancewrite.Options{PageBytes: index.FilePageBytes, Version: o.Version, SchemaMetadata: maps.Clone(o.DataMeta)}); err != nil {
			return nil, err
		}
	}
	bw := &BTreeWriter{data: w, lookupF: o.LookupFields, lookupMeta: maps.Clone(o.LookupMeta), version: o.Version, schema: sc, batch: o.BatchSize}
	if bw.batch == 0 {
		bw.batch = DefaultBTreeBatchSize
	}
	if bw.lookupMeta == nil {
		bw.lookupMeta = map[string][]byte{}
	}
	bw.lookupMeta[keyBatchSize] = []byte(strconv.FormatUint(bw.batch, 10))
	if _, ok := bw.lookupMeta[keyRangePartitioned]; !ok {
		bw.lookupMeta[keyRangePartitioned] = []byte("false")
	}
	return bw, nil
}

// Write appends rows: values (sorted, continuing the previous rows' order)
// and their row addresses.
func (bw *BTreeWriter) Write(values arrow.Array, ids []uint64) error {
	if bw.done {
		return lancewrite.ErrClosed
	}
	if !arrow.TypeEqual(values.DataType(), bw.schema.Field(0).Type) {
		return fmt.Errorf("%w: values of type %s, the index holds %s", ErrUnsupported, values.DataType(), bw.schema.Field(0).Type)
	}
	if values.Len() != len(ids) {
		return fmt.Errorf("scalar: %d values with %d row addresses", values.Len(), len(ids))
	}
	if len(ids) == 0 {
		return nil
	}
	ib := array.NewUint64Builder(memory.DefaultAllocator)
	ib.AppendValues(ids, nil)
	ia := ib.NewArray()
	ib.Release()
	defer ia.Release()
	rec := array.NewRecordBatch(bw.schema, []arrow.Array{values, ia}, int64(len(ids)))
	defer rec.Release()
	for off := int64(0); off < rec.NumRows(); {
		take := min(uint64(rec.NumRows()-off), bw.batch-bw.pendRows)
		part := rec.NewSlice(off, off+int64(take))
		bw.pend = append(bw.pend, part)
		bw.pendRows += take
		off += int64(take)
		if bw.pendRows == bw.batch {
			if err := bw.flushPage(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushPage writes the buffered rows as one page.
func (bw *BTreeWriter) flushPage() error {
	if bw.pendRows == 0 {
		return nil
	}
	defer func() {
		for _, r := range bw.pend {
			r.Release()
		}
		bw.pend, bw.pendRows = bw.pend[:0], 0
	}()
	var nulls int
	for _, r := range bw.pend {
		if bw.data != nil {
			if err := bw.data.Write(r); err != nil {
				return err
			}
		}
		nulls += r.Column(0).NullN()
	}
	first, last := bw.pend[0], bw.pend[len(bw.pend)-1]
	lo := array.NewSlice(first.Column(0), 0, 1)
	hi := array.NewSlice(last.Column(0), last.NumRows()-1, last.NumRows())
	defer lo.Release()
	defer hi.Release()
	// Copy the two values out so the page's buffers can go.
	b, err := array.Concatenate([]arrow.Array{lo, hi}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	bw.bounds = append(bw.bounds, b)
	bw.nulls = append(bw.nulls, uint32(nulls))
	bw.rows += bw.pendRows
	return nil
}

// BTreeResult describes a written btree segment.
type BTreeResult struct {
	DataSize, LookupSize int64
	Rows                 uint64
	Pages                int
}

// Close writes the last (partial) page, finishes page_data.lance and
// writes page_lookup.lance to lookup.
func (bw *BTreeWriter) Close(lookup io.Writer) (BTreeResult, error) {
	var res BTreeResult
	if bw.done {
		return res, lancewrite.ErrClosed
	}
	bw.done = true
	defer func() {
		for _, b := range bw.bounds {
			b.Release()
		}
		bw.bounds = nil
	}()
	if err := bw.flushPage(); err != nil {
		return res, err
	}
	if bw.data != nil {
		dr, err := bw.data.Close()
		if err != nil {
			return res, err
		}
		res.DataSize = dr.Size
	}
	res.Rows, res.Pages = bw.rows, len(bw.bounds)
	ls, err := lancefile.ArrowSchema(bw.lookupF)
	if err != nil {
		return res, err
	}
	mem := memory.DefaultAllocator
	var mins, maxs arrow.Array
	if len(bw.bounds) == 0 {
		mins = array.MakeArrayOfNull(mem, ls.Field(0).Type, 0)
		maxs = array.MakeArrayOfNull(mem, ls.Field(1).Type, 0)
	} else {
		lo := make([]arrow.Array, len(bw.bounds))
		hi := make([]arrow.Array, len(bw.bounds))
		for i, b := range bw.bounds {
			lo[i] = array.NewSlice(b, 0, 1)
			hi[i] = array.NewSlice(b, 1, 2)
		}
		mins, err = array.Concatenate(lo, mem)
		if err == nil {
			maxs, err = array.Concatenate(hi, mem)
		}
		for i := range lo {
			lo[i].Release()
			hi[i].Release()
		}
		if err != nil {
			return res, err
		}
	}
	defer mins.Release()
	defer maxs.Release()
	nb := array.NewUint32Builder(mem)
	defer nb.Release()
	nb.AppendValues(bw.nulls, nil)
	nulls := nb.NewArray()
	defer nulls.Release()
	pb := array.NewUint32Builder(mem)
	defer pb.Release()
	for i := range bw.bounds {
		pb.Append(uint32(i))
	}
	pages := pb.NewArray()
	defer pages.Release()
	lw, err := lancewrite.NewWriter(lookup, bw.lookupF, lancewrite.Options{PageBytes: index.FilePageBytes, Version: bw.version, SchemaMetadata: bw.lookupMeta})
	if err != nil {
		return res, err
	}
	if len(bw.bounds) > 0 {
		rec := array.NewRecordBatch(ls, []arrow.Array{mins, maxs, nulls, pages}, int64(len(bw.bounds)))
		err := lw.Write(rec)
		rec.Release()
		if err != nil {
			return res, err
		}
	}
	lr, err := lw.Close()
	if err != nil {
		return res, err
	}
	res.LookupSize = lr.Size
	return res, nil
}

// RemapBTree writes a remapped btree segment: page_data.lance to data and
// page_lookup.lance to lookup. The pairs keep their order (values stay
// sorted; rows of equal value keep their relative order) with deleted rows
// dropped and row addresses mapped, re-cut into full pages with a new
// lookup, which is what lance 8.0.0's compaction writes (its remapped
// segments hold the same pairs in pages of batch_size rows). Fields, schema
// metadata, batch size and file version are the source's. Memory: two pages.
func RemapBTree(ctx context.Context, b *BTree, m index.Mapping, data, lookup io.Writer) (RemapResult, error) {
	if m == nil {
		return RemapResult{}, fmt.Errorf("scalar: remap of %s without a mapping", b.Data.Name())
	}
	return MergeBTree(ctx, b, m, nil, data, lookup)
}
