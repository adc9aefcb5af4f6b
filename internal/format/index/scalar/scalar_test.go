package scalar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func open(t *testing.T, b []byte, name string) *lancefile.File {
	t.Helper()
	f, err := lancefile.Open(bytes.NewReader(b), int64(len(b)), name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRowAddrsRoundTrip(t *testing.T) {
	s := scalar.NewRowAddrs()
	for _, a := range []uint64{index.Addr(3, 7), index.Addr(3, 1), index.Addr(0, 5), index.Addr(9, 70000)} {
		s.Add(a)
	}
	enc, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := scalar.DecodeRowAddrs(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Fragments(); !slices.Equal(got, []uint32{0, 3, 9}) {
		t.Fatalf("fragments %v", got)
	}
	bm, full, ok := back.Fragment(3)
	if !ok || full || !slices.Equal(bm.ToArray(), []uint32{1, 7}) {
		t.Fatalf("fragment 3: %v %v %v", bm, full, ok)
	}
	enc2, _ := back.Encode()
	if !bytes.Equal(enc, enc2) {
		t.Fatal("re-encoding differs")
	}
	// Fragment ids ascending, u32 count, u32 id, u32 size.
	if n := enc[0]; n != 3 || enc[4] != 0 {
		t.Fatalf("header % x", enc[:12])
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0}, append(slices.Clone(enc), 0), enc[:len(enc)-1]} {
		if _, err := scalar.DecodeRowAddrs(bad); !errors.Is(err, scalar.ErrCorrupt) {
			t.Errorf("decode % x: %v, want ErrCorrupt", bad, err)
		}
	}
}

// mapping: fragments 0 and 1 (10 rows each, offsets 0..9) are rewritten
// into fragment 5, with offsets 0 and 3 of fragment 0 deleted.
func testMapping(t *testing.T) *index.CompactionMapping {
	t.Helper()
	m, err := index.NewCompactionMapping([]index.RewriteGroup{{
		Old: []index.OldFragment{{ID: 0, PhysicalRows: 10, Deleted: roaring.BitmapOf(0, 3)}, {ID: 1, PhysicalRows: 10}},
		New: []index.NewFragment{{ID: 5, Rows: 18}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRowAddrsRemap(t *testing.T) {
	m := testMapping(t)
	s := scalar.NewRowAddrs()
	for _, a := range []uint64{index.Addr(0, 0), index.Addr(0, 4), index.Addr(1, 2), index.Addr(2, 1)} {
		s.Add(a)
	}
	out, dropped, err := s.Remap(m, m.Rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 1 {
		t.Fatalf("dropped %d", dropped)
	}
	if got := out.Fragments(); !slices.Equal(got, []uint32{2, 5}) {
		t.Fatalf("fragments %v", got)
	}
	bm, _, _ := out.Fragment(5)
	// 0/4 is the 3rd live row of the group (rank 2), 1/2 is rank 8+2 = 10.
	if !slices.Equal(bm.ToArray(), []uint32{2, 10}) {
		t.Fatalf("fragment 5: %v", bm.ToArray())
	}
}

func TestBTreeWriterPagesAndRemap(t *testing.T) {
	ctx := context.Background()
	mem := memory.DefaultAllocator
	// 23 sorted values (3 nulls first) over fragments 0, 1 and 2.
	vb := array.NewStringBuilder(mem)
	var ids []uint64
	for i := 0; i < 23; i++ {
		if i < 3 {
			vb.AppendNull()
		} else {
			vb.Append(fmt.Sprintf("v%02d", i))
		}
		ids = append(ids, index.Addr(uint64(i%3), uint64(i/3)))
	}
	vals := vb.NewArray()
	defer vals.Release()
	dataFields, err := lancewrite.FieldsFromArrow(scalar.BTreeDataSchema(arrow.BinaryTypes.String), 0)
	if err != nil {
		t.Fatal(err)
	}
	lookupFields, err := lancewrite.FieldsFromArrow(scalar.BTreeLookupSchema(arrow.BinaryTypes.String), 0)
	if err != nil {
		t.Fatal(err)
	}
	var data, lookup bytes.Buffer
	w, err := scalar.NewBTreeWriter(&data, scalar.BTreeOptions{DataFields: dataFields, LookupFields: lookupFields, BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	// Hand the rows in uneven pieces: pages are still cut at 5.
	for _, cut := range [][2]int{{0, 2}, {2, 9}, {9, 23}} {
		sl := array.NewSlice(vals, int64(cut[0]), int64(cut[1]))
		if err := w.Write(sl, ids[cut[0]:cut[1]]); err != nil {
			t.Fatal(err)
		}
		sl.Release()
	}
	res, err := w.Close(&lookup)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages != 5 || res.Rows != 23 || res.DataSize != int64(data.Len()) || res.LookupSize != int64(lookup.Len()) {
		t.Fatalf("result %+v (data %d lookup %d)", res, data.Len(), lookup.Len())
	}
	bt, err := scalar.OpenBTree(open(t, lookup.Bytes(), scalar.BTreeLookupFileName), open(t, data.Bytes(), scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	if bt.BatchSize != 5 || bt.NumPages != 5 {
		t.Fatalf("batch %d pages %d", bt.BatchSize, bt.NumPages)
	}
	lk, err := bt.ReadLookup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := [][4]string{{"(null)", "v04", "3", "0"}, {"v05", "v09", "0", "1"}, {"v10", "v14", "0", "2"}, {"v15", "v19", "0", "3"}, {"v20", "v22", "0", "4"}}
	for i, wr := range want {
		got := [4]string{lk.Column(0).ValueStr(i), lk.Column(1).ValueStr(i), lk.Column(2).ValueStr(i), lk.Column(3).ValueStr(i)}
		if got != wr {
			t.Errorf("lookup row %d: %v, want %v", i, got, wr)
		}
	}
	lk.Release()

	// Remap: fragments 0 and 1 go to fragment 5 (rows 0/0 and 0/3
	// deleted); fragment 2 stays.
	m := testMapping(t)
	var data2, lookup2 bytes.Buffer
	rr, err := scalar.RemapBTree(ctx, bt, m, &data2, &lookup2)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Dropped != 2 || rr.Rows != 21 || rr.Keys != 5 {
		t.Fatalf("remap %+v", rr)
	}
	bt2, err := scalar.OpenBTree(open(t, lookup2.Bytes(), scalar.BTreeLookupFileName), open(t, data2.Bytes(), scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	var gotVals []string
	var gotIDs []uint64
	for p := 0; p < bt2.NumPages; p++ {
		rec, err := bt2.ReadPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if p < bt2.NumPages-1 && rec.NumRows() != 5 {
			t.Fatalf("page %d has %d rows", p, rec.NumRows())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			gotVals = append(gotVals, rec.Column(0).ValueStr(i))
			gotIDs = append(gotIDs, rec.Column(1).(*array.Uint64).Value(i))
		}
		rec.Release()
	}
	var wantVals []string
	var wantIDs []uint64
	for i := 0; i < 23; i++ {
		nid, ok := m.Map(ids[i])
		if !ok {
			continue
		}
		wantVals = append(wantVals, vals.ValueStr(i))
		wantIDs = append(wantIDs, nid)
	}
	if !slices.Equal(gotVals, wantVals) || !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("remapped pairs\n %v %v\nwant\n %v %v", gotVals, gotIDs, wantVals, wantIDs)
	}
}

func TestBTreeEmpty(t *testing.T) {
	dataFields, _ := lancewrite.FieldsFromArrow(scalar.BTreeDataSchema(arrow.PrimitiveTypes.Int64), 0)
	lookupFields, _ := lancewrite.FieldsFromArrow(scalar.BTreeLookupSchema(arrow.PrimitiveTypes.Int64), 0)
	var data, lookup bytes.Buffer
	w, err := scalar.NewBTreeWriter(&data, scalar.BTreeOptions{DataFields: dataFields, LookupFields: lookupFields})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Close(&lookup)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := scalar.OpenBTree(open(t, lookup.Bytes(), scalar.BTreeLookupFileName), open(t, data.Bytes(), scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages != 0 || bt.NumPages != 0 {
		t.Fatalf("pages %d/%d", res.Pages, bt.NumPages)
	}
}

func TestBitmapRemap(t *testing.T) {
	ctx := context.Background()
	mem := memory.DefaultAllocator
	fields, err := lancewrite.FieldsFromArrow(scalar.BitmapSchema(arrow.PrimitiveTypes.Int32), 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := scalar.NewBitmapWriter(&buf, fields, lancewrite.V2_1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kb := array.NewInt32Builder(mem)
	kb.Append(7)
	kb.AppendNull()
	kb.Append(8)
	keys := kb.NewArray()
	defer keys.Release()
	sets := [][]uint64{
		{index.Addr(0, 1), index.Addr(1, 0), index.Addr(2, 4)},
		{index.Addr(0, 0), index.Addr(0, 3)}, // all deleted
		{index.Addr(2, 0)},
	}
	var enc [][]byte
	for _, s := range sets {
		ra := scalar.NewRowAddrs()
		for _, a := range s {
			ra.Add(a)
		}
		e, err := ra.Encode()
		if err != nil {
			t.Fatal(err)
		}
		enc = append(enc, e)
	}
	if err := w.Write(keys, enc); err != nil {
		t.Fatal(err)
	}
	bm := closeBitmap(t, w, &buf)
	m := testMapping(t)
	var out bytes.Buffer
	res, err := scalar.RemapBitmap(ctx, bm, m, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Keys != 3 || res.Dropped != 2 || res.Rows != 4 || res.Files[0].Size != int64(out.Len()) {
		t.Fatalf("remap %+v", res)
	}
	f := open(t, out.Bytes(), scalar.BitmapFileName)
	if got := string(f.Descriptor.GetSchema().GetMetadata()["lance:index_stats"]); got != `{"num_bitmaps":3}` {
		t.Fatalf("index stats %q", got)
	}
	rec, err := f.ReadAll(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if !array.Equal(rec.Column(0), keys) {
		t.Fatalf("keys %v", rec.Column(0))
	}
	for i, s := range sets {
		got, err := scalar.DecodeRowAddrs(rec.Column(1).(*array.Binary).Value(i))
		if err != nil {
			t.Fatal(err)
		}
		var want []uint64
		for _, a := range s {
			if n, ok := m.Map(a); ok {
				want = append(want, n)
			}
		}
		var have []uint64
		for _, fr := range got.Fragments() {
			b, _, _ := got.Fragment(fr)
			for _, o := range b.ToArray() {
				have = append(have, index.Addr(uint64(fr), uint64(o)))
			}
		}
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("key %d: %v, want %v", i, have, want)
		}
	}
}

func TestCheck(t *testing.T) {
	seg := func(url string, v int32) *tablepb.IndexMetadata {
		return &tablepb.IndexMetadata{Name: "x_idx", IndexDetails: &anypb.Any{TypeUrl: url}, IndexVersion: &v}
	}
	for _, ok := range []*tablepb.IndexMetadata{
		seg("/lance.table.BTreeIndexDetails", 0), seg("/lance.table.BitmapIndexDetails", 0),
		seg("/lance.table.LabelListIndexDetails", 0), seg("/lance.table.LabelListIndexDetails", 1),
	} {
		if err := index.CanRemap(ok); err != nil {
			t.Errorf("CanRemap(%s v%d) = %v", ok.GetIndexDetails().GetTypeUrl(), ok.GetIndexVersion(), err)
		}
	}
	for _, bad := range []*tablepb.IndexMetadata{seg("/lance.table.BTreeIndexDetails", 1), seg("/lance.table.LabelListIndexDetails", 2)} {
		err := index.CanRemap(bad)
		if !errors.Is(err, index.ErrNoRemapper) || !strings.Contains(err.Error(), "x_idx") {
			t.Errorf("CanRemap(%s v%d) = %v, want ErrNoRemapper naming the index", bad.GetIndexDetails().GetTypeUrl(), bad.GetIndexVersion(), err)
		}
	}
}

// btreeOf writes a btree (pages of 4) of the given sorted int64 values
// (nil = null) with ids 0, 1, 2, ... of fragment frag.
func btreeOf(t *testing.T, frag uint64, vals []*int64) *scalar.BTree {
	t.Helper()
	b := array.NewInt64Builder(memory.DefaultAllocator)
	var ids []uint64
	for i, v := range vals {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(*v)
		}
		ids = append(ids, index.Addr(frag, uint64(i)))
	}
	arr := b.NewArray()
	defer arr.Release()
	dataFields, _ := lancewrite.FieldsFromArrow(scalar.BTreeDataSchema(arrow.PrimitiveTypes.Int64), 0)
	lookupFields, _ := lancewrite.FieldsFromArrow(scalar.BTreeLookupSchema(arrow.PrimitiveTypes.Int64), 0)
	var data, lookup bytes.Buffer
	w, err := scalar.NewBTreeWriter(&data, scalar.BTreeOptions{DataFields: dataFields, LookupFields: lookupFields, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(arr, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(&lookup); err != nil {
		t.Fatal(err)
	}
	bt, err := scalar.OpenBTree(open(t, lookup.Bytes(), scalar.BTreeLookupFileName), open(t, data.Bytes(), scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

func i64s(vs ...int64) []*int64 {
	out := make([]*int64, len(vs))
	for i := range vs {
		out[i] = &vs[i]
	}
	return out
}

func pairs(t *testing.T, bt *scalar.BTree) []string {
	t.Helper()
	var out []string
	for p := 0; p < bt.NumPages; p++ {
		rec, err := bt.ReadPage(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if p < bt.NumPages-1 && uint64(rec.NumRows()) != bt.BatchSize {
			t.Fatalf("page %d of %d rows", p, rec.NumRows())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			id := rec.Column(1).(*array.Uint64).Value(i)
			out = append(out, fmt.Sprintf("%s@%d/%d", rec.Column(0).ValueStr(i), id>>32, id&0xffffffff))
		}
		rec.Release()
	}
	return out
}

func TestMergeBTree(t *testing.T) {
	old := btreeOf(t, 0, append([]*int64{nil}, i64s(1, 3, 3, 5, 7, 9)...))
	added := btreeOf(t, 1, append([]*int64{nil}, i64s(0, 3, 4, 9, 10)...))
	// The added rows as a record reader over the second btree's pages.
	var recs []arrow.RecordBatch
	for p := 0; p < added.NumPages; p++ {
		rec, err := added.ReadPage(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	rr, err := array.NewRecordReader(recs[0].Schema(), recs)
	if err != nil {
		t.Fatal(err)
	}
	// keep drops old row 0/4 (value 5).
	keep, err := index.NewCompactionMapping([]index.RewriteGroup{{
		Old: []index.OldFragment{{ID: 0, PhysicalRows: 7, Deleted: roaring.BitmapOf(4)}},
		New: []index.NewFragment{{ID: 0, Rows: 6}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var data, lookup bytes.Buffer
	res, err := scalar.MergeBTree(context.Background(), old, keep, rr, &data, &lookup)
	if err != nil {
		t.Fatal(err)
	}
	bt, err := scalar.OpenBTree(open(t, lookup.Bytes(), scalar.BTreeLookupFileName), open(t, data.Bytes(), scalar.BTreeDataFileName))
	if err != nil {
		t.Fatal(err)
	}
	got := pairs(t, bt)
	want := []string{"(null)@0/0", "(null)@1/0", "0@1/1", "1@0/1", "3@0/2", "3@0/3", "3@1/2", "4@1/3", "7@0/4", "9@0/5", "9@1/4", "10@1/5"}
	if !slices.Equal(got, want) {
		t.Fatalf("merged\n %v\nwant\n %v", got, want)
	}
	if res.Rows != 12 || res.Dropped != 1 || res.Keys != 3 {
		t.Fatalf("result %+v", res)
	}
	// Unsorted additions are refused.
	bad := btreeOf(t, 1, i64s(4, 2))
	rec, _ := bad.ReadPage(context.Background(), 0)
	rr2, _ := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if _, err := scalar.MergeBTree(context.Background(), old, nil, rr2, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "not sorted") {
		t.Fatalf("unsorted additions: %v", err)
	}
}

func TestMergeBitmapLabelList(t *testing.T) {
	ctx := context.Background()
	mem := memory.DefaultAllocator
	fields, _ := lancewrite.FieldsFromArrow(scalar.BitmapSchema(arrow.BinaryTypes.String), 0)
	var buf bytes.Buffer
	w, _ := scalar.NewBitmapWriter(&buf, fields, lancewrite.V2_1, nil)
	kb := array.NewStringBuilder(mem)
	kb.AppendValues([]string{"a", "b"}, nil)
	keys := kb.NewArray()
	a, b := scalar.NewRowAddrs(), scalar.NewRowAddrs()
	a.Add(index.Addr(0, 0))
	b.Add(index.Addr(0, 1))
	ea, _ := a.Encode()
	eb, _ := b.Encode()
	if err := w.Write(keys, [][]byte{ea, eb}); err != nil {
		t.Fatal(err)
	}
	old := scalar.NewRowAddrs()
	old.Add(index.Addr(0, 2))
	if err := w.SetListNulls(old); err != nil {
		t.Fatal(err)
	}
	bm := closeBitmap(t, w, &buf)
	// New rows of fragment 1: [b c], null, [c], [] .
	lb := array.NewListBuilder(mem, arrow.BinaryTypes.String)
	vb := lb.ValueBuilder().(*array.StringBuilder)
	lb.Append(true)
	vb.AppendValues([]string{"b", "c"}, nil)
	lb.AppendNull()
	lb.Append(true)
	vb.Append("c")
	lb.Append(true)
	lists := lb.NewArray()
	add := scalar.NewBitmapAdditions(arrow.BinaryTypes.String)
	defer add.Release()
	if err := add.AddLists(lists, []uint64{index.Addr(1, 0), index.Addr(1, 1), index.Addr(1, 2), index.Addr(1, 3)}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := scalar.MergeBitmap(ctx, bm, nil, add, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Keys != 3 {
		t.Fatalf("result %+v", res)
	}
	back, err := scalar.OpenBitmap(open(t, out.Bytes(), scalar.BitmapFileName))
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := back.File.ReadAll(ctx, nil)
	defer rec.Release()
	got := map[string]string{}
	for i := 0; i < int(rec.NumRows()); i++ {
		s, _ := scalar.DecodeRowAddrs(rec.Column(1).(*array.Binary).Value(i))
		got[rec.Column(0).ValueStr(i)] = render(s)
	}
	want := map[string]string{"a": "0:[0]", "b": "0:[1] 1:[0]", "c": "1:[0 2]"}
	if !maps.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
	nulls, err := back.ListNulls()
	if err != nil || render(nulls) != "0:[2] 1:[1]" {
		t.Fatalf("null lists %v %v", render(nulls), err)
	}
}

func render(s *scalar.RowAddrs) string {
	var parts []string
	for _, f := range s.Fragments() {
		b, _, _ := s.Fragment(f)
		parts = append(parts, fmt.Sprintf("%d:%v", f, b.ToArray()))
	}
	return strings.Join(parts, " ")
}

// closeBitmap finishes a bitmap file written to buf and opens it.
func closeBitmap(t *testing.T, w *scalar.BitmapWriter, buf *bytes.Buffer) *scalar.Bitmap {
	t.Helper()
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	bm, err := scalar.OpenBitmap(open(t, buf.Bytes(), scalar.BitmapFileName))
	if err != nil {
		t.Fatal(err)
	}
	return bm
}

func TestOrderFloatsAndNulls(t *testing.T) {
	// Lance's btree order for floats: nulls first, then total order.
	in := []float64{math.NaN(), 1, math.Inf(-1), 0, math.Copysign(0, -1), -2, math.Inf(1)}
	b := array.NewFloat64Builder(memory.DefaultAllocator)
	b.AppendNull()
	b.AppendValues(in, nil)
	arr := b.NewArray()
	defer arr.Release()
	order := make([]int, arr.Len())
	for i := range order {
		order[i] = i
	}
	cmp := scalar.CompareForTest(arr, arr)
	slices.SortFunc(order, cmp)
	var got []string
	for _, i := range order {
		if arr.IsNull(i) {
			got = append(got, "null")
			continue
		}
		got = append(got, strconv.FormatFloat(arr.(*array.Float64).Value(i), 'g', -1, 64))
	}
	want := []string{"null", "-Inf", "-2", "-0", "0", "1", "+Inf", "NaN"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
