package scan

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

func TestLiveRuns(t *testing.T) {
	del := roaring.BitmapOf(3, 4, 9, 20)
	got := liveRuns(del, 2, 10) // rows 2..11
	want := [][2]int64{{0, 1}, {3, 7}, {8, 10}}
	if len(got) != len(want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("runs %v, want %v", got, want)
		}
	}
	if r := liveRuns(roaring.BitmapOf(0, 1, 2), 0, 3); len(r) != 0 {
		t.Fatalf("all deleted: %v", r)
	}
}

// A fragment whose DataFile lists its fields out of schema order, with a
// deletion file: columns are found by field id, deleted rows dropped.
func TestScanFragmentMapsByFieldID(t *testing.T) {
	ctx := context.Background()
	src, err := os.ReadFile("../../format/lancefile/testdata/tiny21.lance")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "f.lance"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lf, err := lancefile.Open(bytes.NewReader(src), int64(len(src)), "tiny21")
	if err != nil {
		t.Fatal(err)
	}
	fields := lf.Fields()
	var ids, cols []int32
	for ci := len(lf.Columns) - 1; ci >= 0; ci-- { // reversed listing
		ids = append(ids, lf.Columns[ci].FieldID)
		cols = append(cols, int32(ci))
	}
	deleted := roaring.BitmapOf(0, 5, 6, 7, 299)
	df := &tablepb.DeletionFile{FileType: tablepb.DeletionFile_BITMAP, ReadVersion: 1, Id: 9, NumDeletedRows: deleted.GetCardinality()}
	data, err := format.EncodeDeletionFile(df.FileType, deleted)
	if err != nil {
		t.Fatal(err)
	}
	frag := &tablepb.DataFragment{Id: 3, PhysicalRows: 300, DeletionFile: df,
		Files: []*tablepb.DataFile{{Path: "f.lance", Fields: ids, ColumnIndices: cols, FileMajorVersion: 2, FileMinorVersion: 1}}}
	if err := b.Put(ctx, format.DeletionFileKey(3, df), data); err != nil {
		t.Fatal(err)
	}
	full, err := lf.ReadAll(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Release()
	fr, err := ScanFragment(ctx, b, fields, frag, ScanOptions{BatchRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Release()
	var recs []arrow.RecordBatch
	for fr.Next() {
		r := fr.RecordBatch()
		r.Retain()
		recs = append(recs, r)
	}
	if fr.Err() != nil {
		t.Fatal(fr.Err())
	}
	got := array.NewTableFromRecords(fr.Schema(), recs)
	defer got.Release()
	if got.NumRows() != 295 {
		t.Fatalf("%d live rows, want 295", got.NumRows())
	}
	for c := 0; c < int(full.NumCols()); c++ {
		var parts []arrow.Array
		for from := int64(0); from < 300; {
			if deleted.Contains(uint32(from)) {
				from++
				continue
			}
			to := from
			for to < 300 && !deleted.Contains(uint32(to)) {
				to++
			}
			parts = append(parts, array.NewSlice(full.Column(c), from, to))
			from = to
		}
		want, err := array.Concatenate(parts, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		gotCol, err := array.Concatenate(got.Column(c).Data().Chunks(), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		if !array.Equal(want, gotCol) {
			t.Errorf("column %s differs", full.ColumnName(c))
		}
	}
}
