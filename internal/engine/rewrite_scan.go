package engine

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// rewriteBatchRows is the batch size of a rewrite's scan: it bounds the
// decoded rows held at once (batch size is the memory knob).
const rewriteBatchRows = 8192

// fragmentScan streams the live rows of one fragment with every top-level
// field of a schema, stitching columns from the fragment's data files by
// field id (never by position) and dropping deleted rows.
type fragmentScan struct {
	schema  *arrow.Schema
	deleted *roaring.Bitmap
	readers []*lancefile.Reader // one per file that provides columns
	files   []store.ReaderAt
	// colSrc[i] = (reader index, column index in that reader) for schema
	// column i, or reader -1 for a column no file holds (all nulls).
	colSrc  [][2]int
	pos     uint64
	phys    uint64
	pending []arrow.RecordBatch
}

// topLevel returns the top-level fields of a pre-order field list.
func topLevel(fields []*filepb.Field) []*filepb.Field {
	var out []*filepb.Field
	for _, f := range fields {
		if f.GetParentId() == -1 {
			out = append(out, f)
		}
	}
	return out
}

// descendants returns id and every field id below it.
func descendants(fields []*filepb.Field, id int32) map[int32]bool {
	out := map[int32]bool{id: true}
	for _, f := range fields { // pre-order: parents come first
		if out[f.GetParentId()] {
			out[f.GetId()] = true
		}
	}
	return out
}

// openLiveRows opens a fragment for a rewrite scan.
func openLiveRows(ctx context.Context, tbl *table.Table, fields []*filepb.Field, frag *tablepb.DataFragment) (s *fragmentScan, err error) {
	deleted, err := tbl.ReadDeletions(ctx, frag)
	if err != nil {
		return nil, err
	}
	schema, err := lancefile.ArrowSchema(fields)
	if err != nil {
		return nil, err
	}
	s = &fragmentScan{schema: schema, phys: frag.GetPhysicalRows()}
	if !deleted.IsEmpty() {
		s.deleted = deleted
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	tops := topLevel(fields)
	s.colSrc = make([][2]int, len(tops))
	for i := range s.colSrc {
		s.colSrc[i] = [2]int{-1, -1}
	}
	for _, df := range frag.GetFiles() {
		inFile := map[int32]bool{}
		for _, id := range df.GetFields() {
			inFile[id] = true
		}
		var want []int32
		var cols []int
		for ti, top := range tops {
			if s.colSrc[ti][0] >= 0 {
				continue
			}
			for id := range descendants(fields, top.GetId()) {
				if inFile[id] {
					want = append(want, top.GetId())
					cols = append(cols, ti)
					break
				}
			}
		}
		if len(want) == 0 {
			continue // only dropped or tombstoned fields
		}
		key := format.DataFileKey(df.GetPath())
		ra, err := tbl.Bucket().OpenReaderAt(ctx, key)
		if err != nil {
			return s, fmt.Errorf("open %s: %w", key, err)
		}
		s.files = append(s.files, ra)
		lf, err := lancefile.Open(ra, ra.Size(), key)
		if err != nil {
			return s, fragmentErr(frag.GetId(), key, err)
		}
		if lf.NumRows() != frag.GetPhysicalRows() {
			return s, fragmentErr(frag.GetId(), key, fmt.Errorf("%w: %s has %d rows, fragment %d has %d physical rows", format.ErrCorrupt, key, lf.NumRows(), frag.GetId(), frag.GetPhysicalRows()))
		}
		r, err := lf.NewReader(ctx, lancefile.ReadOptions{FieldIDs: want, BatchRows: rewriteBatchRows})
		if err != nil {
			return s, fragmentErr(frag.GetId(), key, fmt.Errorf("read %s: %w", key, err))
		}
		ri := len(s.readers)
		s.readers = append(s.readers, r)
		rs := r.Schema()
		// The reader returns the projected fields in file order; find ours
		// by field id (a renamed column keeps its id, not its name).
		byID := map[string]int{}
		for i, f := range rs.Fields() {
			if v, ok := f.Metadata.GetValue(lancefile.FieldIDKey); ok {
				byID[v] = i
			}
		}
		for k, ti := range cols {
			i, ok := byID[strconv.Itoa(int(tops[ti].GetId()))]
			if !ok {
				return s, fmt.Errorf("%s: field %q (id %d) not found in the read", key, tops[ti].GetName(), want[k])
			}
			s.colSrc[ti] = [2]int{ri, i}
		}
	}
	return s, nil
}

// Deleted returns the fragment's deleted row offsets (nil if none).
func (s *fragmentScan) Deleted() *roaring.Bitmap { return s.deleted }

// Next returns the next batch of live rows, io.EOF at the end.
func (s *fragmentScan) Next(ctx context.Context) (arrow.RecordBatch, error) {
	for len(s.pending) == 0 {
		if s.pos >= s.phys {
			return nil, io.EOF
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, err := s.nextPhysical()
		if err != nil {
			return nil, err
		}
		s.filter(rec)
	}
	r := s.pending[0]
	s.pending = s.pending[1:]
	return r, nil
}

// nextPhysical reads the next batch of physical rows from every file and
// stitches them into one record in schema order.
func (s *fragmentScan) nextPhysical() (arrow.RecordBatch, error) {
	n := int64(-1)
	for _, r := range s.readers {
		if !r.Next() {
			if err := r.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("data file ended at row %d of %d", s.pos, s.phys)
		}
		got := r.RecordBatch().NumRows()
		if n >= 0 && got != n {
			return nil, fmt.Errorf("data files disagree on batch size (%d vs %d rows)", n, got)
		}
		n = got
	}
	if n < 0 { // no file provides any column
		n = min(int64(rewriteBatchRows), int64(s.phys-s.pos))
	}
	cols := make([]arrow.Array, len(s.colSrc))
	for i, src := range s.colSrc {
		if src[0] < 0 {
			cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, s.schema.Field(i).Type, int(n))
			continue
		}
		c := s.readers[src[0]].RecordBatch().Column(src[1])
		c.Retain()
		cols[i] = c
	}
	rec := array.NewRecordBatch(s.schema, cols, n)
	for _, c := range cols {
		c.Release()
	}
	s.pos += uint64(n)
	return rec, nil
}

// filter queues the live rows of rec (physical rows [pos-n, pos)) as slices
// of contiguous live runs; many tiny runs are concatenated into one record.
func (s *fragmentScan) filter(rec arrow.RecordBatch) {
	n := uint64(rec.NumRows())
	start := s.pos - n
	if s.deleted == nil || s.deleted.Rank(uint32(s.pos-1))-rankBefore(s.deleted, start) == 0 {
		s.pending = append(s.pending, rec)
		return
	}
	var runs [][2]int64
	var a int64 = -1
	for i := uint64(0); i < n; i++ {
		if s.deleted.Contains(uint32(start + i)) {
			if a >= 0 {
				runs = append(runs, [2]int64{a, int64(i)})
				a = -1
			}
			continue
		}
		if a < 0 {
			a = int64(i)
		}
	}
	if a >= 0 {
		runs = append(runs, [2]int64{a, int64(n)})
	}
	defer rec.Release()
	if len(runs) == 0 {
		return
	}
	if len(runs) <= 4 {
		for _, r := range runs {
			s.pending = append(s.pending, rec.NewSlice(r[0], r[1]))
		}
		return
	}
	cols := make([]arrow.Array, rec.NumCols())
	var total int64
	for _, r := range runs {
		total += r[1] - r[0]
	}
	for ci := range cols {
		parts := make([]arrow.Array, len(runs))
		for k, r := range runs {
			parts[k] = array.NewSlice(rec.Column(ci), r[0], r[1])
		}
		c, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			// Fall back to slices; correctness over batch size.
			for _, c := range cols[:ci] {
				c.Release()
			}
			for _, r := range runs {
				s.pending = append(s.pending, rec.NewSlice(r[0], r[1]))
			}
			return
		}
		cols[ci] = c
	}
	out := array.NewRecordBatch(rec.Schema(), cols, total)
	for _, c := range cols {
		c.Release()
	}
	s.pending = append(s.pending, out)
}

// rankBefore is the number of set bits below x.
func rankBefore(bm *roaring.Bitmap, x uint64) uint64 {
	if x == 0 {
		return 0
	}
	return bm.Rank(uint32(x - 1))
}

// Close releases the readers and the files.
func (s *fragmentScan) Close() {
	for _, r := range s.pending {
		r.Release()
	}
	s.pending = nil
	for _, r := range s.readers {
		r.Release()
	}
	for _, f := range s.files {
		_ = f.Close()
	}
}
