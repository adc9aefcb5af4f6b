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
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A catch-up of a large backlog may run as several delta tasks, each over
// a range of the new fragments, and one merge task. For a btree each delta
// is a btree segment of its added rows alone, laid out like the index's
// segment (BTreeDelta); the merge reads the deltas' pages in one k-way
// merge by value and merges that stream with the old segment's pages
// (MergeBTreeDeltas), which writes the segment one catch-up over every
// fragment writes (CatchUp): the same pairs in the same order, as among
// equal values the deltas come in fragment order, each sorted stably.

// checkBTree refuses a segment that is not a btree lanced writes.
func checkBTree(seg *tablepb.IndexMetadata) error {
	if err := (remapper{}).Check(seg); err != nil {
		return err
	}
	if k := index.Detect(seg); k != index.KindBTree {
		return fmt.Errorf("%w: delta catch-up of a %s index", ErrUnsupported, k)
	}
	return nil
}

// BTreeDelta writes the rows of rows alone as a btree segment through out,
// with the files, schema, metadata and page size of seg (read through
// old). Memory: the added rows, as in CatchUp; maxBytes bounds them.
func BTreeDelta(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, out index.SegmentWriter, rows index.RowSource, maxBytes int64) (RemapResult, error) {
	bt, err := openCheckedBTree(ctx, seg, old)
	if err != nil {
		return RemapResult{}, err
	}
	add := NewBTreeAdditions(maxBytes)
	defer add.Release()
	if err := rows(ctx, add.Add); err != nil {
		return RemapResult{}, err
	}
	layout := *bt
	layout.NumPages = 0 // the old segment's layout, none of its pages
	return writeSortedBTree(ctx, out, &layout, add)
}

// writeSortedBTree writes the btree segment of old's pages merged with
// add's rows, sorted (MergeBTree).
func writeSortedBTree(ctx context.Context, out index.SegmentWriter, old *BTree, add *BTreeAdditions) (RemapResult, error) {
	sorted, err := add.Sorted(int(old.BatchSize))
	if err != nil {
		return RemapResult{}, err
	}
	defer sorted.Release()
	return writeBTree(ctx, out, old, sorted)
}

// writeBTree writes the btree segment of old's pages merged with the
// sorted added rows (MergeBTree) through out.
func writeBTree(ctx context.Context, out index.SegmentWriter, old *BTree, added array.RecordReader) (res RemapResult, err error) {
	err = index.WriteFiles(ctx, out, []string{BTreeDataFileName, BTreeLookupFileName}, func(w []io.Writer) error {
		res, err = MergeBTree(ctx, old, nil, added, w[0], w[1])
		return err
	})
	return res, err
}

// openCheckedBTree checks seg is a btree lanced writes and opens it.
func openCheckedBTree(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader) (*BTree, error) {
	if err := checkBTree(seg); err != nil {
		return nil, err
	}
	return openBTreeSegment(ctx, old)
}

// MergeBTreeDeltas writes through out the btree segment holding the pairs
// of seg's segment (read through old) and of every delta (written by
// BTreeDelta or CombineBTreeDeltas on seg), as CatchUp over all the
// deltas' rows writes it. Memory: one page of the old segment and one of
// each delta, plus the writer's page; the caller bounds the number of
// deltas (CombineBTreeDeltas folds more into fewer).
func MergeBTreeDeltas(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, deltas []index.SegmentReader, out index.SegmentWriter) (RemapResult, error) {
	return mergeBTreeDeltas(ctx, seg, old, deltas, out, true)
}

// CombineBTreeDeltas writes through out one delta holding the pairs of
// every delta (written by BTreeDelta or CombineBTreeDeltas on seg, in
// fragment order): the delta BTreeDelta over all their rows writes. Memory
// as MergeBTreeDeltas without the old segment's page.
func CombineBTreeDeltas(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, deltas []index.SegmentReader, out index.SegmentWriter) (RemapResult, error) {
	return mergeBTreeDeltas(ctx, seg, old, deltas, out, false)
}

// mergeBTreeDeltas merges the deltas' pages by value (k-way, one page of
// each at a time) and, withOld, with seg's old pages.
func mergeBTreeDeltas(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, deltas []index.SegmentReader, out index.SegmentWriter, withOld bool) (RemapResult, error) {
	var res RemapResult
	bt, err := openCheckedBTree(ctx, seg, old)
	if err != nil {
		return res, err
	}
	var readers []array.RecordReader
	defer func() {
		for _, r := range readers {
			r.Release()
		}
	}()
	for _, d := range deltas {
		dt, err := openBTreeSegment(ctx, d)
		if err != nil {
			return res, err
		}
		r, err := dt.Data.NewReader(ctx, lancefile.ReadOptions{BatchRows: int(dt.BatchSize), ChunkReads: true, ChunkWindow: index.MergeReadWindow(len(deltas))})
		if err != nil {
			return res, err
		}
		readers = append(readers, r)
	}
	merged := &kwayMerge{ins: make([]*sortedCursor, len(readers)), batch: int(bt.BatchSize)}
	for i, r := range readers {
		merged.ins[i] = &sortedCursor{r: r}
	}
	layout := *bt
	if !withOld {
		layout.NumPages = 0 // the old segment's layout, none of its pages
	}
	return writeBTree(ctx, out, &layout, merged.reader())
}

// sortedCursor is one sorted input of a k-way merge: its current record
// and the next row in it.
type sortedCursor struct {
	r    array.RecordReader
	vals arrow.Array
	ids  []uint64
	pos  int
	done bool
}

// fill moves to the next non-empty record when the current one is used up.
func (c *sortedCursor) fill() error {
	for !c.done && (c.vals == nil || c.pos >= c.vals.Len()) {
		if !c.r.Next() {
			c.done, c.vals, c.ids = true, nil, nil
			return c.r.Err()
		}
		rec := c.r.RecordBatch()
		ids, ok := rec.Column(1).(*array.Uint64)
		if rec.NumCols() != 2 || !ok || ids.NullN() > 0 {
			return fmt.Errorf("%w: delta btree page of %d columns, ids %s", ErrCorrupt, rec.NumCols(), rec.Column(1).DataType())
		}
		c.vals, c.ids, c.pos = rec.Column(0), ids.Uint64Values(), 0
	}
	return nil
}

// kwayMerge merges sorted (values, ids) streams by value; among equal
// values the earlier stream comes first.
type kwayMerge struct {
	ins   []*sortedCursor
	batch int
}

// next returns the index of the stream holding the smallest current
// value (-1 when all are done) and how many of its rows come before any
// other stream's current value.
func (k *kwayMerge) next() (int, int, error) {
	best := -1
	for i, c := range k.ins {
		if err := c.fill(); err != nil {
			return -1, 0, err
		}
		if c.done {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		cmp, err := newCompare(c.vals, k.ins[best].vals)
		if err != nil {
			return -1, 0, err
		}
		if cmp(c.pos, k.ins[best].pos) < 0 {
			best = i
		}
	}
	if best < 0 {
		return -1, 0, nil
	}
	b := k.ins[best]
	end := b.vals.Len()
	for i, c := range k.ins {
		if i == best || c.done {
			continue
		}
		cmp, err := newCompare(b.vals, c.vals)
		if err != nil {
			return -1, 0, err
		}
		// Rows of b up to c's value; equal values too when b comes first.
		n := b.pos
		for n < end && (cmp(n, c.pos) < 0 || i > best && cmp(n, c.pos) == 0) {
			n++
		}
		end = n
	}
	return best, max(end-b.pos, 1), nil
}

// reader yields the merged rows in records of up to batch rows.
func (k *kwayMerge) reader() array.RecordReader {
	var schema *arrow.Schema
	for _, c := range k.ins {
		if err := c.fill(); err == nil && !c.done {
			schema = BTreeDataSchema(c.vals.DataType())
			break
		}
	}
	if schema == nil {
		schema = BTreeDataSchema(arrow.Null)
	}
	return array.ReaderFromIter(schema, func(yield func(arrow.RecordBatch, error) bool) {
		for {
			rec, err := k.record(schema)
			if rec == nil && err == nil {
				return
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	})
}

// record takes up to batch merged rows (nil at the end).
func (k *kwayMerge) record(schema *arrow.Schema) (arrow.RecordBatch, error) {
	var parts []arrow.Array
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	var ids []uint64
	for len(ids) < k.batch {
		i, n, err := k.next()
		if err != nil {
			return nil, err
		}
		if i < 0 {
			break
		}
		c := k.ins[i]
		n = min(n, k.batch-len(ids))
		parts = append(parts, array.NewSlice(c.vals, int64(c.pos), int64(c.pos+n)))
		ids = append(ids, c.ids[c.pos:c.pos+n]...)
		c.pos += n
	}
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := array.Concatenate(parts, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	defer vals.Release()
	idArr := array.NewUint64Data(array.NewData(arrow.PrimitiveTypes.Uint64, len(ids), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Uint64Traits.CastToBytes(ids))}, nil, 0, 0))
	defer idArr.Release()
	return array.NewRecordBatch(schema, []arrow.Array{vals, idArr}, int64(len(ids))), nil
}
