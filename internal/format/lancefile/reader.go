package lancefile

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// DefaultBatchRows is the batch size when ReadOptions.BatchRows is 0.
const DefaultBatchRows = 8192

// ReadOptions selects what NewReader returns.
type ReadOptions struct {
	// FieldIDs projects the read: a listed field brings its whole subtree; a
	// listed nested field brings its ancestors pruned to the listed parts.
	// nil reads every field.
	FieldIDs []int32
	// BatchRows is the maximum rows per record (default DefaultBatchRows).
	BatchRows int
	// Offset skips rows; Limit caps rows returned (0 = no limit).
	Offset, Limit uint64
	// ChunkReads decodes, for each batch, only the mini-block chunks (or
	// full-zip rows) of a 2.1 page that the batch needs, instead of the
	// whole page: memory follows the batch, not the page (a Lance page may
	// hold a million rows). Pages whose layout needs a whole-page decode
	// are still decoded whole. Worth it when batches are much smaller than
	// pages; a boundary chunk shared by two batches is decoded twice.
	// Mini-block bytes are fetched 1 MiB ahead (one range request per MiB
	// on an object store, not one per batch).
	ChunkReads bool
	// ChunkWindow, if positive, is how many bytes per column ChunkReads
	// fetches ahead instead of 1 MiB: a merge reading many files at once
	// divides its read memory among them.
	ChunkWindow int
}

// fieldReader produces rows [a,b) of one top-level field.
type fieldReader interface {
	read(a, b uint64) (arrow.ArrayData, error)
}

// projection is a resolved field selection.
type projection struct {
	schema  *arrow.Schema
	readers []fieldReader
}

// project resolves ids into an Arrow schema and one reader per top field.
// partialMax is the largest row range a column reads by partial decode:
// 0 never (whole pages, cached), partialMaxRows for takes, no bound for
// ReadOptions.ChunkReads.
func (f *File) project(ids []int32, partialMax, window int) (*projection, error) {
	keep := map[int32]bool{}
	if ids == nil {
		for _, fl := range f.fields {
			keep[fl.GetId()] = true
		}
	} else {
		for _, id := range ids {
			fl := f.byID[id]
			if fl == nil {
				return nil, fmt.Errorf("%w: %s: no field with id %d", ErrCorrupt, f.name, id)
			}
			var down func(fl *filepb.Field)
			down = func(fl *filepb.Field) {
				keep[fl.GetId()] = true
				for _, k := range f.children[fl.GetId()] {
					down(k)
				}
			}
			down(fl)
			for p := fl.GetParentId(); p >= 0; p = f.byID[p].GetParentId() {
				keep[p] = true
			}
		}
	}
	var kept []*filepb.Field
	for _, fl := range f.fields {
		if keep[fl.GetId()] {
			kept = append(kept, fl)
		}
	}
	sch, err := ArrowSchema(kept)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	tree, _ := newFieldTree(kept)
	pr := &projection{schema: sch}
	for i, top := range tree.top {
		af := sch.Field(i)
		var r fieldReader
		if f.Format == Format21 {
			r, err = f.newFieldReader21(tree, top, af, partialMax, window)
		} else {
			r, err = f.newFieldReader20(tree, top, af)
		}
		if err != nil {
			return nil, err
		}
		pr.readers = append(pr.readers, r)
	}
	return pr, nil
}

// Schema returns the Arrow schema of the whole file.
func (f *File) Schema() (*arrow.Schema, error) { return ArrowSchema(f.fields) }

// Reader streams record batches; it implements array.RecordReader.
type Reader struct {
	refs   atomic.Int64
	ctx    context.Context
	f      *File
	pr     *projection
	pos    uint64
	end    uint64
	batch  uint64
	cur    arrow.RecordBatch
	err    error
	closed bool
}

var _ array.RecordReader = (*Reader)(nil)

// NewReader streams rows of the file as record batches.
func (f *File) NewReader(ctx context.Context, opts ReadOptions) (*Reader, error) {
	partialMax, window := 0, 0
	if opts.ChunkReads {
		partialMax, window = math.MaxInt, chunkReadWindow
		if opts.ChunkWindow > 0 {
			window = opts.ChunkWindow
		}
	}
	pr, err := f.project(opts.FieldIDs, partialMax, window)
	if err != nil {
		return nil, err
	}
	batch := opts.BatchRows
	if batch <= 0 {
		batch = DefaultBatchRows
	}
	end := f.numRows
	start := min(opts.Offset, end)
	if opts.Limit > 0 && end-start > opts.Limit {
		end = start + opts.Limit
	}
	r := &Reader{ctx: ctx, f: f, pr: pr, pos: start, end: end, batch: uint64(batch)}
	r.refs.Store(1)
	return r, nil
}

func (r *Reader) Retain() { r.refs.Add(1) }

func (r *Reader) Release() {
	if r.refs.Add(-1) == 0 && r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
}

func (r *Reader) Schema() *arrow.Schema { return r.pr.schema }

func (r *Reader) Err() error { return r.err }

func (r *Reader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record is RecordBatch (for the deprecated interface method).
func (r *Reader) Record() arrow.RecordBatch { return r.cur }

func (r *Reader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	if r.err != nil || r.pos >= r.end {
		return false
	}
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return false
	}
	b := min(r.pos+r.batch, r.end)
	rec, err := r.f.readRows(r.pr, r.pos, b)
	if err != nil {
		r.err = err
		return false
	}
	r.cur = rec
	r.pos = b
	return true
}

// NextRows is Next with a batch of n rows (fewer at the end of the
// range): for callers that read consecutive runs of varying length, such
// as an index's partitions, through one reader, so a page shared by two
// runs is decoded once.
func (r *Reader) NextRows(n uint64) bool {
	saved := r.batch
	r.batch = n
	defer func() { r.batch = saved }()
	return r.Next()
}

func (f *File) readRows(pr *projection, a, b uint64) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, len(pr.readers))
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, fr := range pr.readers {
		d, err := fr.read(a, b)
		if err != nil {
			return nil, err
		}
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	return array.NewRecordBatch(pr.schema, cols, int64(b-a)), nil
}

// ReadAll reads the whole projection into one record (tests, small files).
func (f *File) ReadAll(ctx context.Context, fieldIDs []int32) (arrow.RecordBatch, error) {
	pr, err := f.project(fieldIDs, 0, 0)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f.readRows(pr, 0, f.numRows)
}

// Take returns the given rows (any order, duplicates allowed) of the
// projected fields as one record.
func (f *File) Take(ctx context.Context, rows []uint64, fieldIDs []int32) (arrow.RecordBatch, error) {
	pr, err := f.project(fieldIDs, partialMaxRows, 0)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if r >= f.numRows {
			return nil, fmt.Errorf("%w: %s: take row %d of %d", ErrRowOutOfRange, f.name, r, f.numRows)
		}
	}
	// Read in sorted order (page caches stay warm), place in request order.
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return rows[order[i]] < rows[order[j]] })
	cols := make([]arrow.Array, len(pr.readers))
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for ci, fr := range pr.readers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		parts := make([]arrow.Array, len(rows))
		// Coalesce runs of consecutive sorted rows.
		for i := 0; i < len(order); {
			j := i + 1
			for j < len(order) && rows[order[j]] == rows[order[j-1]]+1 {
				j++
			}
			d, err := fr.read(rows[order[i]], rows[order[j-1]]+1)
			if err != nil {
				releaseAll(parts)
				return nil, err
			}
			run := array.MakeFromData(d)
			d.Release()
			for k := i; k < j; k++ {
				parts[order[k]] = array.NewSlice(run, int64(k-i), int64(k-i+1))
			}
			// Duplicates: identical rows following the run.
			run.Release()
			i = j
			for i < len(order) && rows[order[i]] == rows[order[i-1]] {
				parts[order[i]] = array.NewSlice(parts[order[i-1]], 0, 1)
				i++
			}
		}
		if len(parts) == 0 {
			d, err := fr.read(0, 0)
			if err != nil {
				return nil, err
			}
			cols[ci] = array.MakeFromData(d)
			d.Release()
			continue
		}
		c, err := array.Concatenate(parts, memory.DefaultAllocator)
		releaseAll(parts)
		if err != nil {
			return nil, fmt.Errorf("%s: take: %w", f.name, err)
		}
		cols[ci] = c
	}
	return array.NewRecordBatch(pr.schema, cols, int64(len(rows))), nil
}

func releaseAll(as []arrow.Array) {
	for _, a := range as {
		if a != nil {
			a.Release()
		}
	}
}

// concatData concatenates array data parts (releasing them).
func concatData(parts []arrow.ArrayData) (arrow.ArrayData, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	arrs := make([]arrow.Array, len(parts))
	for i, p := range parts {
		arrs[i] = array.MakeFromData(p)
		p.Release()
	}
	defer releaseAll(arrs)
	c, err := array.Concatenate(arrs, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	d := c.Data()
	d.Retain()
	return d, nil
}

// ---------------------------------------------------------------- 2.1

// column21 reads rows of one leaf column, one decoded page at a time.
type column21 struct {
	f          *File
	ci         int
	pageStart  []uint64
	cur        *page
	curIdx     int
	pm         *pageMeta // chunk table etc. of the last partially read page
	partialMax int       // ranges up to this many rows read only the chunks/rows needed
	window     int       // bytes of mini-block data a partial read fetches ahead (ChunkReads)
}

func (f *File) newColumn21(ci int) *column21 {
	c := &column21{f: f, ci: ci, curIdx: -1}
	c.pageStart = append(c.pageStart, 0)
	for _, p := range f.Columns[ci].Meta.GetPages() {
		c.pageStart = append(c.pageStart, c.pageStart[len(c.pageStart)-1]+p.GetLength())
	}
	return c
}

func (c *column21) page(pi int) (*page, error) {
	if pi == c.curIdx {
		return c.cur, nil
	}
	p, err := c.f.decodePage21(c.ci, pi)
	if err != nil {
		return nil, err
	}
	c.cur, c.curIdx = p, pi
	return p, nil
}

func (c *column21) read(path []pathField, a, b uint64) (arrow.ArrayData, error) {
	var parts []arrow.ArrayData
	release := func() {
		for _, q := range parts {
			q.Release()
		}
	}
	np := len(c.pageStart) - 1
	pi, _ := slices.BinarySearch(c.pageStart, a+1)
	for pi = max(pi-1, 0); pi < np && c.pageStart[pi] < b; pi++ {
		if c.pageStart[pi+1] <= a {
			continue
		}
		lo := max(a, c.pageStart[pi]) - c.pageStart[pi]
		hi := min(b, c.pageStart[pi+1]) - c.pageStart[pi]
		var p *page
		first := 0
		var err error
		if c.partialMax > 0 && pi != c.curIdx && hi-lo <= uint64(c.partialMax) {
			var ok bool
			if p, first, ok, err = c.partial(pi, int(lo), int(hi)); err != nil {
				release()
				return nil, fmt.Errorf("%s: column %d page %d: %w", c.f.name, c.ci, pi, wrapCorrupt(err))
			}
			if !ok {
				p = nil
			}
		}
		if p == nil {
			if p, err = c.page(pi); err != nil {
				release()
				return nil, err
			}
			first = 0
		}
		d, err := p.buildRows(path, int(lo)-first, int(hi)-first)
		if err != nil {
			release()
			return nil, fmt.Errorf("%s: column %d page %d: %w", c.f.name, c.ci, pi, err)
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: %s: column %d has no page for rows [%d,%d)", ErrCorrupt, c.f.name, c.ci, a, b)
	}
	return concatData(parts)
}

type leaf21 struct {
	col  *column21
	path []pathField
}

type fieldReader21 struct {
	dt     arrow.DataType
	leaves []leaf21
}

func (f *File) newFieldReader21(tree *fieldTree, top *filepb.Field, af arrow.Field, partialMax, window int) (*fieldReader21, error) {
	fr := &fieldReader21{dt: af.Type}
	var walk func(fl *filepb.Field, a arrow.Field, path []pathField) error
	walk = func(fl *filepb.Field, a arrow.Field, path []pathField) error {
		kids := tree.children[fl.GetId()]
		if len(kids) == 0 || isPackedStruct(fl) || isBlob(fl) {
			ci := f.ColumnForField(fl.GetId())
			if ci < 0 {
				return fmt.Errorf("%w: %s: no column for field %d (%q)", ErrCorrupt, f.name, fl.GetId(), fl.GetName())
			}
			if isBlob(fl) {
				return fmt.Errorf("%w: %s: blob field %q", ErrUnsupportedEncoding, f.name, fl.GetName())
			}
			p := append(slices.Clone(path), pathField{field: a})
			col := f.newColumn21(ci)
			col.partialMax, col.window = partialMax, window
			fr.leaves = append(fr.leaves, leaf21{col: col, path: p})
			return nil
		}
		switch t := a.Type.(type) {
		case *arrow.StructType:
			for i, k := range kids {
				p := append(slices.Clone(path), pathField{field: a, child: i})
				if err := walk(k, t.Field(i), p); err != nil {
					return err
				}
			}
		case *arrow.ListType:
			return walk(kids[0], t.ElemField(), append(slices.Clone(path), pathField{field: a}))
		case *arrow.LargeListType:
			return walk(kids[0], t.ElemField(), append(slices.Clone(path), pathField{field: a}))
		default:
			return fmt.Errorf("%w: %s: field %q of type %s has children", ErrCorrupt, f.name, fl.GetName(), a.Type)
		}
		return nil
	}
	if err := walk(top, af, nil); err != nil {
		return nil, err
	}
	return fr, nil
}

func (fr *fieldReader21) read(a, b uint64) (arrow.ArrayData, error) {
	if a >= b {
		return emptyData(fr.dt), nil
	}
	parts := make([]arrow.ArrayData, 0, len(fr.leaves))
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	for _, l := range fr.leaves {
		d, err := l.col.read(l.path, a, b)
		if err != nil {
			return nil, err
		}
		parts = append(parts, d)
	}
	return mergeParts(fr.dt, parts)
}

func emptyData(dt arrow.DataType) arrow.ArrayData {
	a := array.MakeArrayOfNull(memory.DefaultAllocator, dt, 0)
	defer a.Release()
	d := a.Data()
	d.Retain()
	return d
}
