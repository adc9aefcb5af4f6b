package lancewrite

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// dictSources writes one file per values list, a string column "s" (each
// file a dictionary page of its own distinct values).
func dictSources(t *testing.T, vals [][]string) ([]FilterSource, []string) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	fields, top := fieldsAndNames(t, schema)
	var srcs []FilterSource
	var all []string
	for i, vs := range vals {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.AppendValues(vs, nil)
		col := b.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(col.Len()))
		cs := writeMem(t, fields, top, []arrow.RecordBatch{rec}, Options{})
		cs.Name = fmt.Sprintf("src%d.lance", i)
		srcs = append(srcs, FilterSource{CopySource: cs})
		rec.Release()
		col.Release()
		b.Release()
		all = append(all, vs...)
	}
	return srcs, all
}

// readStrings reads column 0 of a file and the layouts of its pages.
func readStrings(t *testing.T, out []byte) ([]string, []*enc21pb.PageLayout) {
	t.Helper()
	f, err := lancefile.Open(bytes.NewReader(out), int64(len(out)), "out.lance")
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.NewReader(context.Background(), lancefile.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var got []string
	for r.Next() {
		c := r.RecordBatch().Column(0).(*array.String)
		for i := 0; i < c.Len(); i++ {
			got = append(got, c.Value(i))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	var layouts []*enc21pb.PageLayout
	for _, pg := range f.Columns[0].Meta.GetPages() {
		pl, err := pageLayout(pg)
		if err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, pl)
	}
	return got, layouts
}

// A string column of dictionary pages, re-encoded whole, is written as one
// dictionary page over the merged dictionaries with the values in order,
// as big as a re-encode of the decoded values writes (same rules, same
// sizes).
func TestFilterConcatMergesDictionaries(t *testing.T) {
	cycle := func(n int, names ...string) []string {
		var out []string
		for i := range n {
			out = append(out, names[i%len(names)])
		}
		return out
	}
	distinct := func(from, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("v-%d", from+i))
		}
		return out
	}
	cases := []struct {
		name     string
		vals     [][]string
		wantDict int // entries of the output's dictionary, 0: no dictionary
	}{
		{"different dictionaries", [][]string{cycle(1000, "b", "a", "c"), cycle(700, "c", "d"), cycle(1500, "e", "a", "", "b")}, 5 + 1},
		{"disjoint dictionaries", [][]string{append(cycle(150, "x"), distinct(0, 50)...), append(cycle(150, "y"), distinct(50, 50)...)}, 102},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srcs, want := dictSources(t, c.vals)
			var pages int
			for _, s := range srcs {
				f, err := lancefile.Open(s.R, s.Size, s.Name)
				if err != nil {
					t.Fatal(err)
				}
				for _, pg := range f.Columns[0].Meta.GetPages() {
					pl, _ := pageLayout(pg)
					if pl.GetMiniBlockLayout().GetDictionary() == nil {
						t.Fatalf("%s: source page is not a dictionary page", s.Name)
					}
					pages++
				}
			}
			fields, _ := fieldsAndNames(t, arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil))
			run := func(srcs []FilterSource) ([]byte, FilterResult) {
				var out bytes.Buffer
				res, err := FilterConcat(context.Background(), &out, fields, srcs, FilterOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return out.Bytes(), res
			}
			out, res := run(srcs)
			if res.Paths.ColsCopied != 0 || res.Paths.Reencoded.Pages != 1 {
				t.Fatalf("want the column re-encoded as one page: %+v", res.Paths)
			}
			if res.Paths.DictMerged != res.Paths.Reencoded {
				t.Fatalf("want the page written from the merged dictionaries, not decoded: %+v", res.Paths)
			}
			got, layouts := readStrings(t, out)
			if !slices.Equal(got, want) {
				t.Fatalf("rows differ: got %d rows, want %d", len(got), len(want))
			}
			mb := layouts[0].GetMiniBlockLayout()
			if n := int(mb.GetNumDictionaryItems()); n != c.wantDict || (n == 0) != (mb.GetDictionary() == nil) {
				t.Fatalf("output dictionary of %d entries (%v), want %d", n, mb.GetDictionary() != nil, c.wantDict)
			}
			// the same rows decoded and re-encoded (a deleted row in
			// every source sends each page down the decoding path): the
			// same encoding, and as many bytes give or take the row
			var decoded []FilterSource
			for _, s := range srcs {
				s.Deleted = roaring.BitmapOf(0)
				decoded = append(decoded, s)
			}
			out2, res2 := run(decoded)
			if res2.Paths.DictMerged.Pages != 0 || res2.Paths.Reencoded.Pages == 0 {
				t.Fatalf("sources with deleted rows: want the decoding path: %+v", res2.Paths)
			}
			_, layouts2 := readStrings(t, out2)
			mb2 := layouts2[0].GetMiniBlockLayout()
			if (mb2.GetDictionary() == nil) != (mb.GetDictionary() == nil) || !proto.Equal(mb2.GetValueCompression(), mb.GetValueCompression()) {
				t.Errorf("merged page encoding %v differs from the decoded re-encode's %v", mb, mb2)
			}
			if d := len(out) - len(out2); d < -64 || d > 64 {
				t.Errorf("merged file %d bytes, decoded re-encode %d", len(out), len(out2))
			}
		})
	}
}

// A merged dictionary that fails lance's rules for one (here more distinct
// values than half the values) is written from its values: the same page
// as a leaf given the values themselves writes.
func TestMergedDictionaryFallsBack(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	fields, _ := fieldsAndNames(t, schema)
	leafOf := func() *leaf {
		w, err := NewWriter(&bytes.Buffer{}, fields, Options{Version: V2_1})
		if err != nil {
			t.Fatal(err)
		}
		return w.all[0]
	}
	var entries [][]byte
	var idx []uint32
	var vals []string
	for i := range 300 {
		v := fmt.Sprintf("value-%d", i%200)
		if i%200 == len(entries) {
			entries = append(entries, []byte(v))
		}
		idx = append(idx, uint32(i%200))
		vals = append(vals, v)
	}
	merged := leafOf()
	merged.dict = &mergedDict{ids: map[string]uint32{}}
	merged.addDictPage(entries[:150], idx[:150])
	// the second page's dictionary lists the entries in another order
	rev := slices.Clone(entries)
	slices.Reverse(rev)
	var idx2 []uint32
	for _, k := range idx[150:] {
		idx2 = append(idx2, uint32(len(rev)-1)-k)
	}
	merged.addDictPage(rev, idx2)
	if merged.mergedPage() != nil {
		t.Fatal("200 distinct of 300 values: want no dictionary")
	}
	plain := leafOf()
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	col := b.NewArray()
	defer col.Release()
	if err := plain.add(col); err != nil {
		t.Fatal(err)
	}
	gotBufs, gotLayout, err := merged.encodePage()
	if err != nil {
		t.Fatal(err)
	}
	wantBufs, wantLayout, err := plain.encodePage()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotLayout, wantLayout) || len(gotBufs) != len(wantBufs) {
		t.Fatalf("layout differs from the plain re-encode's")
	}
	for i := range gotBufs {
		if !bytes.Equal(gotBufs[i], wantBufs[i]) {
			t.Fatalf("buffer %d differs from the plain re-encode's", i)
		}
	}
}
