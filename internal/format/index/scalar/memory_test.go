package scalar_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/testenv/heapwatch"
)

// peakHeap runs f while sampling the live heap; it returns the peak above
// the heap before f and f's wall time.
func peakHeap(t *testing.T, f func()) (uint64, time.Duration) {
	t.Helper()
	var d time.Duration
	peak := heapwatch.Peak(func() {
		start := time.Now()
		f()
		d = time.Since(start)
	}, 2*time.Millisecond, heapwatch.HeapAlloc)
	return peak, d
}

// writeBTree writes a btree of n int64 values (value i at row i of
// fragments of 100,000 rows) under dir.
func writeBTree(t *testing.T, dir string, n int) *scalar.BTree {
	t.Helper()
	df, _ := lancewrite.FieldsFromArrow(scalar.BTreeDataSchema(arrow.PrimitiveTypes.Int64), 0)
	lf, _ := lancewrite.FieldsFromArrow(scalar.BTreeLookupSchema(arrow.PrimitiveTypes.Int64), 0)
	data, err := os.Create(filepath.Join(dir, scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	lookup, err := os.Create(filepath.Join(dir, scalar.BTreeLookupFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer lookup.Close()
	w, err := scalar.NewBTreeWriter(data, scalar.BTreeOptions{DataFields: df, LookupFields: lf})
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 65536
	for off := 0; off < n; off += chunk {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		ids := make([]uint64, 0, chunk)
		for i := off; i < min(off+chunk, n); i++ {
			b.Append(int64(i))
			ids = append(ids, index.Addr(uint64(i/100000), uint64(i%100000)))
		}
		arr := b.NewArray()
		if err := w.Write(arr, ids); err != nil {
			t.Fatal(err)
		}
		arr.Release()
		b.Release()
	}
	if _, err := w.Close(lookup); err != nil {
		t.Fatal(err)
	}
	return openBTree(t, dir)
}

// every fragment of 100,000 rows loses every 10th row and the rest are
// rewritten into fragments of 1,000,000 rows.
func tenthDeleted(t *testing.T, n int) *index.CompactionMapping {
	t.Helper()
	var g index.RewriteGroup
	var live uint64
	for f := 0; f*100000 < n; f++ {
		rows := uint64(min(100000, n-f*100000))
		del := roaring.New()
		for o := uint64(0); o < rows; o += 10 {
			del.Add(uint32(o))
		}
		g.Old = append(g.Old, index.OldFragment{ID: uint64(f), PhysicalRows: rows, Deleted: del})
		live += rows - del.GetCardinality()
	}
	for id := uint64(1000); live > 0; id++ {
		r := min(live, 1000000)
		g.New = append(g.New, index.NewFragment{ID: id, Rows: r})
		live -= r
	}
	m, err := index.NewCompactionMapping([]index.RewriteGroup{g})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRemapMemoryFlat: the btree remap's peak heap does not grow with the
// index, and its speed is reported against copying the same bytes. Its own
// state is two index pages; the Lance file reader and writer under it hold
// up to a file page per column (lancewrite.DefaultPageBytes of values), so
// both sizes are past that: 1.5M and 4.5M rows (10% deleted).
func TestRemapMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and remaps a 2M-row btree")
	}
	ctx := context.Background()
	var peaks []uint64
	for _, n := range []int{1500000, 4500000} {
		dir := t.TempDir()
		bt := writeBTree(t, dir, n)
		m := tenthDeleted(t, n)
		out := t.TempDir()
		var res scalar.RemapResult
		peak, took := peakHeap(t, func() {
			data, _ := os.Create(filepath.Join(out, scalar.BTreeDataFileName))
			lookup, _ := os.Create(filepath.Join(out, scalar.BTreeLookupFileName))
			defer data.Close()
			defer lookup.Close()
			var err error
			if res, err = scalar.RemapBTree(ctx, bt, m, data, lookup); err != nil {
				t.Error(err)
			}
		})
		if res.Rows != uint64(n-n/10) {
			t.Fatalf("%d rows: kept %d", n, res.Rows)
		}
		// The same bytes copied (file to file), for scale.
		_, cpTook := peakHeap(t, func() {
			src := lancefiletest.Open(t, filepath.Join(dir, scalar.BTreeDataFileName))
			dst, _ := os.Create(filepath.Join(out, "copy"))
			defer dst.Close()
			io.Copy(dst, io.NewSectionReader(src.ReaderAt(), 0, src.Size()))
		})
		t.Logf("btree remap of %d rows (%d MiB of pages): %v (%.1fx a copy of the pages, %v), peak heap %.1f MiB",
			n, bt.Data.Size()>>20, took.Round(time.Millisecond), float64(took)/float64(max(cpTook, time.Microsecond)), cpTook.Round(time.Millisecond), float64(peak)/(1<<20))
		peaks = append(peaks, peak)
	}
	// Three times the rows, not three times the memory: allow 1.5x plus
	// 8 MiB of sampling and allocator noise.
	if peaks[1] > peaks[0]*3/2+8<<20 {
		t.Fatalf("peak heap grew from %d to %d bytes with 3x the rows", peaks[0], peaks[1])
	}
}
