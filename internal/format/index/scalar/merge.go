package scalar

import (
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
)

// A catch-up adds rows written after an index was built to it, as Lance's
// optimize does for scalar indices (BTreeIndex::update merges the old pages
// with the new rows sorted by value, old rows first among equal values;
// BitmapIndex::update adds the new rows to each value's bitmap):
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/btree.rs
// (combine_old_new) and bitmap.rs (update).

// MergeBTree writes a btree segment holding the old segment's pairs (each
// passed through keep when it is not nil: rows it reports deleted are
// dropped, moved rows take their new address) merged with added: records
// of (values, ids) sorted by value, nulls first, as Lance sorts them. Among
// equal values the old rows come first. Memory: one old page, one added
// record and the writer's page.
func MergeBTree(ctx context.Context, old *BTree, keep index.Mapping, added array.RecordReader, data, lookup io.Writer) (RemapResult, error) {
	var res RemapResult
	bw, err := NewBTreeWriter(data, old.writerOptions(meta(old.Data)))
	if err != nil {
		return res, err
	}
	m := &merger{bw: bw, res: &res}
	// One sequential reader over the pages: each page of the file is
	// decoded once (a reader per page would decode the file page holding
	// it again for every index page).
	pages, err := old.Data.NewReader(ctx, lancefile.ReadOptions{BatchRows: int(old.BatchSize), ChunkReads: true})
	if err != nil {
		return res, err
	}
	defer pages.Release()
	nextOld := 0
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if m.oldVals == nil || m.oi >= m.oldVals.Len() {
			m.releaseOld()
			for m.oldVals == nil && nextOld < old.NumPages {
				if err := m.loadOld(old, pages, nextOld, keep); err != nil {
					return res, err
				}
				nextOld++
			}
		}
		if m.newVals == nil || m.ni >= m.newVals.Len() {
			if err := m.loadNew(added); err != nil {
				return res, err
			}
		}
		if m.oldVals == nil && m.newVals == nil {
			break
		}
		if err := m.step(); err != nil {
			return res, err
		}
	}
	m.releaseOld()
	br, err := bw.Close(lookup)
	if err != nil {
		return res, err
	}
	res.Keys = uint64(br.Pages)
	res.Files = []File{{Name: BTreeDataFileName, Size: br.DataSize}, {Name: BTreeLookupFileName, Size: br.LookupSize}}
	return res, nil
}

// merger holds one old page (filtered, ids mapped) and one added record.
type merger struct {
	bw               *BTreeWriter
	res              *RemapResult
	oldVals, newVals arrow.Array
	oldIDs, newIDs   []uint64
	oi, ni           int
	newRec           arrow.RecordBatch
	prevNew          arrow.Array // last added value written, to check the order
	cmp              compareFunc // old against new
	cmpNew           compareFunc // previous added value against the next
}

func (m *merger) releaseOld() {
	if m.oldVals != nil {
		m.oldVals.Release()
		m.oldVals, m.oldIDs, m.oi = nil, nil, 0
		m.cmp = nil
	}
}

// loadOld reads page p (the next batch of pages) with keep applied; a page
// whose rows are all dropped leaves oldVals nil.
func (m *merger) loadOld(old *BTree, pages *lancefile.Reader, p int, keep index.Mapping) error {
	if !pages.Next() {
		if err := pages.Err(); err != nil {
			return err
		}
		return errorf(old.Data, ErrCorrupt, "page %d of %d: no rows", p, old.NumPages)
	}
	rec := pages.RecordBatch()
	if want := min(old.BatchSize, old.Data.NumRows()-uint64(p)*old.BatchSize); uint64(rec.NumRows()) != want {
		return errorf(old.Data, ErrCorrupt, "page %d: read %d rows, want %d", p, rec.NumRows(), want)
	}
	col, ok := rec.Column(1).(*array.Uint64)
	if !ok || col.NullN() > 0 {
		return errorf(old.Data, ErrCorrupt, "page %d: ids read as %s with %d nulls", p, rec.Column(1).DataType(), rec.Column(1).NullN())
	}
	vals, ids := rec.Column(0), col.Uint64Values()
	if keep == nil {
		vals.Retain()
		m.oldVals, m.oldIDs = vals, append([]uint64(nil), ids...)
		return nil
	}
	var parts []arrow.Array
	var newIDs []uint64
	start := -1
	cut := func(end int) {
		if start >= 0 {
			parts = append(parts, array.NewSlice(vals, int64(start), int64(end)))
			start = -1
		}
	}
	for i, id := range ids {
		nid, ok := keep.Map(id)
		if !ok {
			m.res.Dropped++
			cut(i)
			continue
		}
		if start < 0 {
			start = i
		}
		newIDs = append(newIDs, nid)
	}
	cut(len(ids))
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	if len(parts) == 0 {
		return nil
	}
	kept, err := array.Concatenate(parts, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	m.oldVals, m.oldIDs = kept, newIDs
	return nil
}

// loadNew reads the next non-empty added record (nil at the end).
func (m *merger) loadNew(added array.RecordReader) error {
	if m.newRec != nil {
		// Keep the last value to check the next record's order.
		if m.prevNew != nil {
			m.prevNew.Release()
		}
		m.prevNew = array.NewSlice(m.newVals, int64(m.newVals.Len()-1), int64(m.newVals.Len()))
		m.newRec.Release()
		m.newRec, m.newVals, m.newIDs, m.ni, m.cmp = nil, nil, nil, 0, nil
	}
	if added == nil {
		return nil
	}
	for added.Next() {
		rec := added.RecordBatch()
		if rec.NumRows() == 0 {
			continue
		}
		if rec.NumCols() != 2 {
			return fmt.Errorf("scalar: added rows have %d columns, want values and row addresses", rec.NumCols())
		}
		ids, ok := rec.Column(1).(*array.Uint64)
		if !ok || ids.NullN() > 0 {
			return fmt.Errorf("scalar: added row addresses are %s with %d nulls, want non-null uint64", rec.Column(1).DataType(), rec.Column(1).NullN())
		}
		rec.Retain()
		m.newRec, m.newVals, m.newIDs = rec, rec.Column(0), ids.Uint64Values()
		// Added rows must be sorted, also across records.
		c, err := newCompare(m.newVals, m.newVals)
		if err != nil {
			return err
		}
		for i := 1; i < m.newVals.Len(); i++ {
			if c(i-1, i) > 0 {
				return fmt.Errorf("scalar: added rows are not sorted: %s after %s", m.newVals.ValueStr(i), m.newVals.ValueStr(i-1))
			}
		}
		if m.prevNew != nil {
			c, err := newCompare(m.prevNew, m.newVals)
			if err != nil {
				return err
			}
			if c(0, 0) > 0 {
				return fmt.Errorf("scalar: added rows are not sorted: %s after %s", m.newVals.ValueStr(0), m.prevNew.ValueStr(0))
			}
		}
		return nil
	}
	return added.Err()
}

// step writes the next run: old rows up to the current added value
// (inclusive: old first among equals), or added rows below the current old
// value.
func (m *merger) step() error {
	switch {
	case m.newVals == nil:
		return m.emitOld(m.oldVals.Len())
	case m.oldVals == nil:
		return m.emitNew(m.newVals.Len())
	}
	if m.cmp == nil {
		c, err := newCompare(m.oldVals, m.newVals)
		if err != nil {
			return err
		}
		m.cmp = c
	}
	end := m.oi
	for end < m.oldVals.Len() && m.cmp(end, m.ni) <= 0 {
		end++
	}
	if end > m.oi {
		return m.emitOld(end)
	}
	end = m.ni
	for end < m.newVals.Len() && m.cmp(m.oi, end) > 0 {
		end++
	}
	return m.emitNew(end)
}

func (m *merger) emitOld(end int) error {
	sl := array.NewSlice(m.oldVals, int64(m.oi), int64(end))
	defer sl.Release()
	if err := m.bw.Write(sl, m.oldIDs[m.oi:end]); err != nil {
		return err
	}
	m.res.Rows += uint64(end - m.oi)
	m.oi = end
	return nil
}

func (m *merger) emitNew(end int) error {
	sl := array.NewSlice(m.newVals, int64(m.ni), int64(end))
	defer sl.Release()
	if err := m.bw.Write(sl, m.newIDs[m.ni:end]); err != nil {
		return err
	}
	m.res.Rows += uint64(end - m.ni)
	m.ni = end
	return nil
}

// BitmapAdditions collects the rows a catch-up adds to a bitmap or
// labelList index, grouped by value. Memory: the added rows' bitmaps and
// one copy of each distinct added value.
type BitmapAdditions struct {
	dt    arrow.DataType
	order []string               // distinct values in first-seen order
	rows  map[string]*RowAddrs   // value key -> rows
	vals  map[string]arrow.Array // value key -> the value (length 1)
	nulls *RowAddrs              // labelList: rows whose list is null
}

// NewBitmapAdditions starts collecting rows whose values have type dt (the
// index's key type: the column's type, or a labelList's item type).
func NewBitmapAdditions(dt arrow.DataType) *BitmapAdditions {
	return &BitmapAdditions{dt: dt, rows: map[string]*RowAddrs{}, vals: map[string]arrow.Array{}}
}

// Add records row ids[i] under values[i] (a null value under the null key).
func (a *BitmapAdditions) Add(values arrow.Array, ids []uint64) error {
	if !arrow.TypeEqual(values.DataType(), a.dt) {
		return fmt.Errorf("%w: values of type %s, the index holds %s", ErrUnsupported, values.DataType(), a.dt)
	}
	if values.Len() != len(ids) {
		return fmt.Errorf("scalar: %d values with %d row addresses", values.Len(), len(ids))
	}
	for i, id := range ids {
		set, err := a.key(values, i)
		if err != nil {
			return err
		}
		set.Add(id)
	}
	return nil
}

// key returns the rows of values[i]'s key, a new empty set for a value
// not seen before (copied out of the caller's buffers).
func (a *BitmapAdditions) key(values arrow.Array, i int) (*RowAddrs, error) {
	k := keyOf(values, i)
	if set, ok := a.rows[k]; ok {
		return set, nil
	}
	set := NewRowAddrs()
	v := array.NewSlice(values, int64(i), int64(i+1))
	cp, err := array.Concatenate([]arrow.Array{v}, memory.DefaultAllocator)
	v.Release()
	if err != nil {
		return nil, err
	}
	a.rows[k], a.vals[k] = set, cp
	a.order = append(a.order, k)
	return set, nil
}

// AddLists records a labelList column: row ids[i] under every item of
// lists[i] (a null item under the null key, as Lance's unnest yields it);
// a null list goes to the null-list rows.
func (a *BitmapAdditions) AddLists(lists arrow.Array, ids []uint64) error {
	var items arrow.Array
	var offsets func(i int) (int64, int64)
	switch l := lists.(type) {
	case *array.List:
		items, offsets = l.ListValues(), l.ValueOffsets
	case *array.LargeList:
		items, offsets = l.ListValues(), l.ValueOffsets
	default:
		return fmt.Errorf("%w: a labelList over %s", ErrUnsupported, lists.DataType())
	}
	if lists.Len() != len(ids) {
		return fmt.Errorf("scalar: %d lists with %d row addresses", lists.Len(), len(ids))
	}
	for i, id := range ids {
		if lists.IsNull(i) {
			if a.nulls == nil {
				a.nulls = NewRowAddrs()
			}
			a.nulls.Add(id)
			continue
		}
		s, e := offsets(i)
		if e == s {
			continue
		}
		sl := array.NewSlice(items, s, e)
		rep := make([]uint64, e-s)
		for k := range rep {
			rep[k] = id
		}
		err := a.Add(sl, rep)
		sl.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// Release frees the collected values.
func (a *BitmapAdditions) Release() {
	for _, v := range a.vals {
		v.Release()
	}
	a.vals, a.rows, a.order = map[string]arrow.Array{}, map[string]*RowAddrs{}, nil
}

// MergeBitmap writes a bitmap or labelList file holding the old file's
// keys, each with its rows passed through keep (when not nil) and the
// added rows of the same value, then the added values the old file does
// not hold; a labelList's null-list rows are merged the same way. add may
// be nil (a remap). Memory: one batch of old keys plus the additions.
func MergeBitmap(ctx context.Context, old *Bitmap, keep index.Mapping, add *BitmapAdditions, out io.Writer) (RemapResult, error) {
	ver := lancewrite.V2_1
	if old.File.Format == lancefile.Format20 {
		ver = lancewrite.V2_0
	}
	bw, err := NewBitmapWriter(out, old.File.Fields(), ver, meta(old.File))
	if err != nil {
		return RemapResult{}, err
	}
	if add == nil {
		add = NewBitmapAdditions(bw.schema.Field(0).Type)
	}
	if !arrow.TypeEqual(bw.schema.Field(0).Type, add.dt) {
		return RemapResult{}, fmt.Errorf("%w: additions of type %s, the index holds %s", ErrUnsupported, add.dt, bw.schema.Field(0).Type)
	}
	m := &bitmapMerge{bw: bw, add: add, keep: keep, merged: map[string]bool{}}
	if keep != nil {
		m.rewritten = rewrittenFunc(keep)
	}
	if err := m.oldKeys(ctx, old); err != nil {
		return m.res, err
	}
	if err := m.newKeys(); err != nil {
		return m.res, err
	}
	if err := m.listNulls(old); err != nil {
		return m.res, err
	}
	size, err := bw.Close()
	if err != nil {
		return m.res, err
	}
	m.res.Files = []File{{Name: BitmapFileName, Size: size}}
	return m.res, nil
}

// bitmapMerge is one MergeBitmap in progress.
type bitmapMerge struct {
	bw        *BitmapWriter
	add       *BitmapAdditions
	keep      index.Mapping
	rewritten func(uint64) bool
	merged    map[string]bool // added values found among the old keys
	res       RemapResult
}

// pass applies keep to an old key's rows.
func (m *bitmapMerge) pass(s *RowAddrs) (*RowAddrs, error) {
	if m.keep == nil {
		return s, nil
	}
	out, dropped, err := s.Remap(m.keep, m.rewritten)
	m.res.Dropped += dropped
	return out, err
}

// oldKeys writes every old key, a batch at a time, with its rows passed
// and the added rows of the same value.
func (m *bitmapMerge) oldKeys(ctx context.Context, old *Bitmap) error {
	r, err := old.Batches(ctx, 0)
	if err != nil {
		return err
	}
	defer r.Release()
	for r.Next() {
		rec := r.RecordBatch()
		keys := rec.Column(0)
		maps, ok := rec.Column(1).(*array.Binary)
		if !ok {
			return errorf(old.File, ErrUnsupported, "bitmaps column read as %s", rec.Column(1).DataType())
		}
		enc := make([][]byte, rec.NumRows())
		for i := range enc {
			if enc[i], err = m.oldKey(old, keys, maps, i); err != nil {
				return err
			}
		}
		if err := m.bw.Write(keys, enc); err != nil {
			return err
		}
		m.res.Keys += uint64(len(enc))
	}
	return r.Err()
}

// oldKey returns old key i's merged rows, encoded.
func (m *bitmapMerge) oldKey(old *Bitmap, keys arrow.Array, maps *array.Binary, i int) ([]byte, error) {
	if maps.IsNull(i) {
		return nil, errorf(old.File, ErrCorrupt, "key %s has a null bitmap", keys.ValueStr(i))
	}
	set, err := DecodeRowAddrs(maps.Value(i))
	if err != nil {
		return nil, fmt.Errorf("%s: key %s: %w", old.File.Name(), keys.ValueStr(i), err)
	}
	if set, err = m.pass(set); err != nil {
		return nil, fmt.Errorf("%s: key %s: %w", old.File.Name(), keys.ValueStr(i), err)
	}
	k := keyOf(keys, i)
	if more, ok := m.add.rows[k]; ok {
		set.Union(more)
		m.merged[k] = true
	}
	n, _ := set.Len()
	m.res.Rows += n
	return set.Encode()
}

// newKeys writes the added values the old file does not hold, a batch at
// a time.
func (m *bitmapMerge) newKeys() error {
	var vals []arrow.Array
	var enc [][]byte
	flush := func() error {
		if len(vals) == 0 {
			return nil
		}
		keys, err := array.Concatenate(vals, memory.DefaultAllocator)
		if err != nil {
			return err
		}
		defer keys.Release()
		err = m.bw.Write(keys, enc)
		m.res.Keys += uint64(len(enc))
		vals, enc = vals[:0], enc[:0]
		return err
	}
	for _, k := range m.add.order {
		if m.merged[k] {
			continue
		}
		b, err := m.add.rows[k].Encode()
		if err != nil {
			return err
		}
		n, _ := m.add.rows[k].Len()
		m.res.Rows += n
		vals, enc = append(vals, m.add.vals[k]), append(enc, b)
		if len(vals) == BitmapBatchRows {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// listNulls merges a labelList's null-list rows (old passed, added).
func (m *bitmapMerge) listNulls(old *Bitmap) error {
	nulls, err := old.ListNulls()
	if err != nil {
		return err
	}
	if nulls == nil && m.add.nulls == nil {
		return nil
	}
	if nulls == nil {
		nulls = NewRowAddrs()
	}
	if nulls, err = m.pass(nulls); err != nil {
		return fmt.Errorf("%s: null lists: %w", old.File.Name(), err)
	}
	if m.add.nulls != nil {
		nulls.Union(m.add.nulls)
	}
	return m.bw.SetListNulls(nulls)
}
