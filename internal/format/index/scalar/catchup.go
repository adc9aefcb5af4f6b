package scalar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// CatchUp writes the segment lance 8.0.0's optimize_indices writes for a
// scalar index with rows it does not cover: the old segment (read through
// old) merged with the added rows into one new segment (written through
// out), which replaces the old one (Lance keeps no scalar deltas:
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/append.rs).
//   - btree: the added rows are sorted by value (nulls first) and merged
//     with the old pages, old rows first among equal values
//     (BTreeIndex::update, combine_old_new), in pages of the old segment's
//     batch size.
//   - bitmap: each added row goes to its value's bitmap, old keys keep
//     their rows (BitmapIndex::update).
//   - labelList: the same over each list's items, null lists to the
//     null-list rows (LabelListIndex::update unnests and updates its
//     bitmap index).
//
// Memory: the added rows (their values, row addresses and, for a btree,
// one sort position each) plus what the merges hold (MergeBTree,
// MergeBitmap); maxBytes bounds the added values held (0: no bound), past
// it the catch-up fails with ErrTooLarge so a smaller task can be planned.
//
// others are the index's other segments (an index of several segments):
// their rows join the added rows, so the new segment holds every
// segment's rows and replaces them all, as Lance keeps one segment per
// scalar index; they count against maxBytes like added rows.
func CatchUp(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, others []index.SegmentReader, out index.SegmentWriter, rows index.RowSource, maxBytes int64) (RemapResult, error) {
	var res RemapResult
	kind := index.Detect(seg)
	if err := (remapper{}).Check(seg); err != nil {
		return res, err
	}
	switch kind {
	case index.KindBTree:
		bt, err := openBTreeSegment(ctx, old)
		if err != nil {
			return res, err
		}
		add := NewBTreeAdditions(maxBytes)
		defer add.Release()
		for _, o := range others {
			if err := add.addSegment(ctx, o); err != nil {
				return res, err
			}
		}
		if err := rows(ctx, add.Add); err != nil {
			return res, err
		}
		return writeSortedBTree(ctx, out, bt, add)
	case index.KindBitmap, index.KindLabelList:
		f, err := index.OpenSegmentFile(ctx, old, BitmapFileName)
		if err != nil {
			return res, err
		}
		bm, err := OpenBitmap(f)
		if err != nil {
			return res, err
		}
		keyType, err := bm.KeyType()
		if err != nil {
			return res, err
		}
		add := NewBitmapAdditions(keyType)
		defer add.Release()
		var held int64
		for _, o := range others {
			n, err := add.addSegment(ctx, o)
			if err != nil {
				return res, err
			}
			if held += 8 * int64(n); maxBytes > 0 && held > maxBytes {
				return res, fmt.Errorf("%w: the other segments' %d rows hold over %d bytes", ErrTooLarge, held/8, maxBytes)
			}
		}
		err = rows(ctx, func(values arrow.Array, ids []uint64) error {
			if kind == index.KindLabelList {
				err = add.AddLists(values, ids)
			} else {
				err = add.Add(values, ids)
			}
			// Each added row costs about one bitmap entry; a new value
			// is copied once.
			held += int64(len(ids)) * 8
			if maxBytes > 0 && held > maxBytes {
				return fmt.Errorf("%w: %d added rows hold over %d bytes", ErrTooLarge, len(ids), maxBytes)
			}
			return err
		})
		if err != nil {
			return res, err
		}
		err = index.WriteFiles(ctx, out, []string{BitmapFileName}, func(w []io.Writer) error {
			res, err = MergeBitmap(ctx, bm, nil, add, w[0])
			return err
		})
		return res, err
	}
	return res, fmt.Errorf("%w: catch-up of a %s index", ErrUnsupported, kind)
}

// addSegment adds every (value, row id) pair of another btree segment.
func (a *BTreeAdditions) addSegment(ctx context.Context, seg index.SegmentReader) error {
	bt, err := openBTreeSegment(ctx, seg)
	if err != nil {
		return err
	}
	r, err := bt.Data.NewReader(ctx, lancefile.ReadOptions{BatchRows: int(bt.BatchSize), ChunkReads: true})
	if err != nil {
		return err
	}
	defer r.Release()
	for r.Next() {
		rec := r.RecordBatch()
		ids, ok := rec.Column(1).(*array.Uint64)
		if !ok || ids.NullN() > 0 {
			return errorf(bt.Data, ErrCorrupt, "ids read as %s with %d nulls", rec.Column(1).DataType(), rec.Column(1).NullN())
		}
		if err := a.Add(rec.Column(0), ids.Uint64Values()); err != nil {
			return err
		}
	}
	return r.Err()
}

// addSegment adds every key of another bitmap or labelList segment with
// its rows (and its null-list rows) and returns how many rows it added.
func (a *BitmapAdditions) addSegment(ctx context.Context, seg index.SegmentReader) (uint64, error) {
	f, err := index.OpenSegmentFile(ctx, seg, BitmapFileName)
	if err != nil {
		return 0, err
	}
	bm, err := OpenBitmap(f)
	if err != nil {
		return 0, err
	}
	if kt, err := bm.KeyType(); err != nil || !arrow.TypeEqual(kt, a.dt) {
		return 0, fmt.Errorf("%w: segments of key types %v and %s (%v)", ErrUnsupported, kt, a.dt, err)
	}
	r, err := bm.Batches(ctx, 0)
	if err != nil {
		return 0, err
	}
	defer r.Release()
	var n uint64
	for r.Next() {
		rec := r.RecordBatch()
		keys := rec.Column(0)
		maps, ok := rec.Column(1).(*array.Binary)
		if !ok {
			return n, errorf(bm.File, ErrUnsupported, "bitmaps column read as %s", rec.Column(1).DataType())
		}
		for i := 0; i < keys.Len(); i++ {
			if maps.IsNull(i) {
				return n, errorf(bm.File, ErrCorrupt, "key %s has a null bitmap", keys.ValueStr(i))
			}
			set, err := DecodeRowAddrs(maps.Value(i))
			if err != nil {
				return n, fmt.Errorf("%s: key %s: %w", bm.File.Name(), keys.ValueStr(i), err)
			}
			rows, err := a.key(keys, i)
			if err != nil {
				return n, err
			}
			rows.Union(set)
			c, _ := set.Len()
			n += c
		}
	}
	if err := r.Err(); err != nil {
		return n, err
	}
	nulls, err := bm.ListNulls()
	if err != nil || nulls == nil {
		return n, err
	}
	if a.nulls == nil {
		a.nulls = NewRowAddrs()
	}
	a.nulls.Union(nulls)
	c, _ := nulls.Len()
	return n + c, nil
}

// ErrTooLarge: the rows of one catch-up pass its memory bound; plan it
// over fewer fragments.
var ErrTooLarge = errors.New("scalar: catch-up rows past the task's memory bound")

// BTreeAdditions collects the rows a catch-up adds to a btree and yields
// them sorted as Lance sorts btree values (nulls first, ascending; equal
// values in the order they were added, which is row address order).
// Memory: the added values and row addresses and one int per row.
type BTreeAdditions struct {
	maxBytes int64
	bytes    int64
	vals     []arrow.Array
	ids      []uint64
}

// NewBTreeAdditions starts collecting rows; maxBytes bounds the values'
// buffers and row addresses held (0: no bound). The merge checks the
// values' type against the index's.
func NewBTreeAdditions(maxBytes int64) *BTreeAdditions {
	return &BTreeAdditions{maxBytes: maxBytes}
}

// Add retains values (the caller may release its reference) and copies
// the row addresses.
func (a *BTreeAdditions) Add(values arrow.Array, ids []uint64) error {
	if values.Len() != len(ids) {
		return fmt.Errorf("scalar: %d values with %d row addresses", values.Len(), len(ids))
	}
	if len(a.vals) > 0 && !arrow.TypeEqual(values.DataType(), a.vals[0].DataType()) {
		return fmt.Errorf("%w: added values of types %s and %s", ErrUnsupported, a.vals[0].DataType(), values.DataType())
	}
	if len(ids) == 0 {
		return nil
	}
	a.bytes += arrayBytes(values.Data()) + 8*int64(len(ids))
	if a.maxBytes > 0 && a.bytes > a.maxBytes {
		return fmt.Errorf("%w: %d bytes of added values and row addresses (bound %d)", ErrTooLarge, a.bytes, a.maxBytes)
	}
	values.Retain()
	a.vals = append(a.vals, values)
	a.ids = append(a.ids, ids...)
	return nil
}

// arrayBytes is the size of an array's buffers, children included (a
// slice counts its whole buffers: that is what it keeps alive).
func arrayBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += arrayBytes(c)
	}
	return n
}

// Release frees the collected values.
func (a *BTreeAdditions) Release() {
	for _, v := range a.vals {
		v.Release()
	}
	a.vals, a.ids = nil, nil
}

// Sorted returns the added rows sorted, as records of (values, ids) of at
// most batch rows (BTreeDataSchema). With no rows added it returns an
// empty reader.
func (a *BTreeAdditions) Sorted(batch int) (array.RecordReader, error) {
	if len(a.vals) == 0 {
		return array.NewRecordReader(BTreeDataSchema(arrow.Null), nil)
	}
	all, err := array.Concatenate(a.vals, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	for _, v := range a.vals {
		v.Release()
	}
	a.vals = []arrow.Array{all}
	c, err := newCompare(all, all)
	if err != nil {
		return nil, err
	}
	order := make([]int, all.Len())
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return c(order[i], order[j]) < 0 })
	schema := BTreeDataSchema(all.DataType())
	all.Retain()
	return array.ReaderFromIter(schema, func(yield func(arrow.RecordBatch, error) bool) {
		defer all.Release()
		for start := 0; start < len(order); start += batch {
			rec, err := a.gather(schema, all, order[start:min(start+batch, len(order))])
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}), nil
}

// gather builds a record of the rows at pos (runs of consecutive rows are
// sliced whole).
func (a *BTreeAdditions) gather(schema *arrow.Schema, all arrow.Array, pos []int) (arrow.RecordBatch, error) {
	var parts []arrow.Array
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	ids := make([]uint64, len(pos))
	for i := 0; i < len(pos); {
		j := i + 1
		for j < len(pos) && pos[j] == pos[j-1]+1 {
			j++
		}
		parts = append(parts, array.NewSlice(all, int64(pos[i]), int64(pos[j-1]+1)))
		for k := i; k < j; k++ {
			ids[k] = a.ids[pos[k]]
		}
		i = j
	}
	vals, err := array.Concatenate(parts, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	defer vals.Release()
	ib := array.NewUint64Builder(memory.DefaultAllocator)
	defer ib.Release()
	ib.AppendValues(ids, nil)
	ia := ib.NewArray()
	defer ia.Release()
	return array.NewRecordBatch(schema, []arrow.Array{vals, ia}, int64(len(ids))), nil
}
