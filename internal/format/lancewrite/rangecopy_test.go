package lancewrite

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// rangeDst is a destination that copies source ranges itself
// (RangeWriter), by reading them straight into its buffer; with refuse it
// declines every range, as a store does for a source it cannot reach.
type rangeDst struct {
	bytes.Buffer
	staged bool // copies into its own buffers (KernelCopies false)
	refuse bool
	copied int64
	calls  int
	ranges [][3]int64 // offered ranges: output position, source offset, size
}

func (d *rangeDst) KernelCopies() bool { return !d.staged }

func (d *rangeDst) CopyRange(src io.ReaderAt, off, n int64) (bool, error) {
	d.calls++
	d.ranges = append(d.ranges, [3]int64{int64(d.Len()), off, n})
	if d.refuse {
		return false, nil
	}
	b := make([]byte, n)
	if _, err := src.ReadAt(b, off); err != nil {
		return true, err
	}
	d.Write(b)
	d.copied += n
	return true, nil
}

// TestFilterConcatRangeWriter: with a destination that copies ranges
// itself, the copied pages and the surviving rows of filtered full-zip
// pages are handed to it as source ranges, and the file is byte for byte
// the one written through memory; a destination that declines gets the
// same bytes written through memory.
func TestFilterConcatRangeWriter(t *testing.T) {
	d1 := roaring.New()
	for i := uint32(3); i < 2000; i += 7 {
		d1.Add(i)
	}
	d2 := roaring.New()
	d2.AddRange(0, 1200)
	d2.Add(1500)
	opts := FilterOptions{PageCost: -1, Workers: 1, BudgetBytes: 1 << 20, PageBytes: 64 << 10}
	base := filterRun(t, []*roaring.Bitmap{nil, d1, d2}, opts)
	if base.diff != "" {
		t.Fatalf("rows differ: %s", base.diff)
	}
	if base.res.RangeBytes != 0 {
		t.Fatalf("a bytes.Buffer copied %d bytes itself", base.res.RangeBytes)
	}
	fields, err := FieldsFromArrow(testSchema(true), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, refuse := range []bool{false, true} {
		dst := &rangeDst{refuse: refuse}
		res, err := FilterConcat(context.Background(), dst, fields, base.srcs, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst.Bytes(), base.out) {
			t.Fatalf("refuse=%v: %d bytes differ from the %d written through memory", refuse, dst.Len(), len(base.out))
		}
		if res.RangeBytes != dst.copied || res.Paths.RangeBytes != dst.copied {
			t.Fatalf("refuse=%v: result counts %d/%d bytes copied by the destination, it copied %d", refuse, res.RangeBytes, res.Paths.RangeBytes, dst.copied)
		}
		// filtered pages hold a little metadata (the repetition index of
		// variable-width rows) beside their copied rows
		if !refuse && (dst.copied < res.Paths.Copied.Bytes/2 || dst.copied < res.Paths.Filtered.Bytes/2 || dst.copied > res.Paths.Copied.Bytes+res.Paths.Filtered.Bytes) {
			t.Fatalf("destination copied %d bytes; copied pages %+v, filtered %+v", dst.copied, res.Paths.Copied, res.Paths.Filtered)
		}
		if dst.calls == 0 {
			t.Fatalf("refuse=%v: no range was offered", refuse)
		}
		t.Logf("refuse=%v: %d ranges offered, %d bytes copied by the destination, paths %+v", refuse, dst.calls, dst.copied, res.Paths)
	}
}

// TestConcatRowsRangeWriter: ConcatRows and CopyColumns hand whole page
// buffers to a destination that copies ranges itself; same bytes.
func TestConcatRowsRangeWriter(t *testing.T) {
	schema := testSchema(true)
	all, names := fieldsAndNames(t, schema)
	opts := Options{Version: V2_1, PageBytes: 8 << 10}
	recs := randomRecords(schema, 9, 2, 400, 0.2, true)
	var parts []CopySource
	for _, r := range recs {
		parts = append(parts, writeMem(t, all, names, []arrow.RecordBatch{r}, opts))
	}
	a := writeMem(t, all, names[:6], recs, opts)
	b := writeMem(t, all, names[6:], recs, opts)
	for _, tc := range []struct {
		name string
		run  func(io.Writer) (Result, error)
	}{
		{"concat", func(w io.Writer) (Result, error) { return ConcatRows(context.Background(), w, parts...) }},
		{"columns", func(w io.Writer) (Result, error) {
			return CopyColumns(context.Background(), w, []CopySource{b, a}, all)
		}},
	} {
		var plain bytes.Buffer
		if _, err := tc.run(&plain); err != nil {
			t.Fatal(err)
		}
		dst := &rangeDst{}
		res, err := tc.run(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst.Bytes(), plain.Bytes()) {
			t.Fatalf("%s: output differs from the copy through memory", tc.name)
		}
		if dst.copied == 0 || res.RangeBytes != dst.copied || res.Size < dst.copied {
			t.Fatalf("%s: destination copied %d bytes, result says %d of %d", tc.name, dst.copied, res.RangeBytes, res.Size)
		}
	}
}

// TestKernelCopiesKeepPageOffsets: a buffer of at least pageAlignMin
// handed to a destination that copies ranges itself starts at the same
// offset within a 4 KiB page as in its source (a kernel copy then fills
// each output page from one source page); smaller buffers and a
// destination that writes through memory get the packed layout, and so
// does one that copies ranges into its own buffers (KernelCopies false:
// the same bytes as through memory). The files hold the same rows either
// way.
func TestKernelCopiesKeepPageOffsets(t *testing.T) {
	schema := testSchema(false)
	all, names := fieldsAndNames(t, schema)
	opts := Options{Version: V2_1, PageBytes: 8 << 20}
	var srcs []CopySource
	var fsrcs []FilterSource
	for i := range 3 {
		// vec96 holds 384 bytes a row: 700-1100 rows make one page of
		// 262-412 KiB per source
		recs := randomRecords(schema, uint64(20+i), 1, 700+200*i, 0, false)
		s := writeMem(t, all, names, recs, opts)
		srcs = append(srcs, s)
		fsrcs = append(fsrcs, FilterSource{CopySource: s})
	}
	for _, tc := range []struct {
		name string
		run  func(io.Writer) (Result, error)
	}{
		{"concat", func(w io.Writer) (Result, error) { return ConcatRows(context.Background(), w, srcs...) }},
		{"filter", func(w io.Writer) (Result, error) {
			r, err := FilterConcat(context.Background(), w, all, fsrcs, FilterOptions{PageCost: -1, Workers: 1})
			return r.Result, err
		}},
	} {
		var plain bytes.Buffer
		if _, err := tc.run(&plain); err != nil {
			t.Fatal(err)
		}
		dst := &rangeDst{}
		if _, err := tc.run(dst); err != nil {
			t.Fatal(err)
		}
		large, moved := 0, 0
		for _, r := range dst.ranges {
			if r[2] < pageAlignMin {
				continue
			}
			large++
			if r[0]%bufferAlign != 0 || (r[0]-r[1])%4096 != 0 {
				t.Fatalf("%s: %d bytes from source offset %d copied to output offset %d", tc.name, r[2], r[1], r[0])
			}
			if r[0] != r[1] {
				moved++
			}
		}
		if large < 3 || moved == 0 {
			t.Fatalf("%s: %d ranges of at least %d bytes, %d at another offset than in their source: the case tests nothing", tc.name, large, pageAlignMin, moved)
		}
		if pad := int64(dst.Len() - plain.Len()); pad <= 0 || pad > int64(large)*4096 {
			t.Fatalf("%s: %d bytes through the range copier, %d through memory, %d large ranges", tc.name, dst.Len(), plain.Len(), large)
		}
		if d := oracle.Diff(readBack(t, plain.Bytes()), readBack(t, dst.Bytes())); d != "" {
			t.Fatalf("%s: rows differ: %s", tc.name, d)
		}
		// a destination that copies into its own buffers gets no padding:
		// the same bytes as through memory
		staged := &rangeDst{staged: true}
		if _, err := tc.run(staged); err != nil {
			t.Fatal(err)
		}
		if staged.copied == 0 || !bytes.Equal(staged.Bytes(), plain.Bytes()) {
			t.Fatalf("%s: a staging destination copied %d bytes and got %d bytes, through memory %d", tc.name, staged.copied, staged.Len(), plain.Len())
		}
	}
}
