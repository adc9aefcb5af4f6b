package scalar_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index/scalar"
)

// BTreeAdditions yields the added rows as Lance sorts a btree: nulls
// first, ascending, equal values in the order added; in records of at
// most the batch size; and refuses rows past its byte bound.
func TestBTreeAdditionsSorted(t *testing.T) {
	add := scalar.NewBTreeAdditions(0)
	defer add.Release()
	batches := [][]*int64{{p(5), nil, p(3)}, {p(3), p(9), nil, p(-1)}}
	var id uint64
	for _, vals := range batches {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		var ids []uint64
		for _, v := range vals {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(*v)
			}
			ids = append(ids, id)
			id++
		}
		a := b.NewArray()
		if err := add.Add(a, ids); err != nil {
			t.Fatal(err)
		}
		a.Release() // Add keeps its own reference
		b.Release()
	}
	rr, err := add.Sorted(3)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var got []string
	var ids []uint64
	var sizes []int64
	for rr.Next() {
		rec := rr.RecordBatch()
		sizes = append(sizes, rec.NumRows())
		for i := 0; i < int(rec.NumRows()); i++ {
			got = append(got, rec.Column(0).ValueStr(i))
		}
		ids = append(ids, rec.Column(1).(*array.Uint64).Uint64Values()...)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"(null)", "(null)", "-1", "3", "3", "5", "9"}; !slices.Equal(got, want) {
		t.Fatalf("values %v, want %v", got, want)
	}
	if want := []uint64{1, 5, 6, 2, 3, 0, 4}; !slices.Equal(ids, want) {
		t.Fatalf("row addresses %v, want %v", ids, want)
	}
	if !slices.Equal(sizes, []int64{3, 3, 1}) {
		t.Fatalf("record sizes %v", sizes)
	}

	small := scalar.NewBTreeAdditions(64)
	defer small.Release()
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(make([]int64, 100), nil)
	a := b.NewArray()
	defer a.Release()
	if err := small.Add(a, make([]uint64, 100)); !errors.Is(err, scalar.ErrTooLarge) {
		t.Fatalf("past the bound: %v", err)
	}
}

func p(v int64) *int64 { return &v }
