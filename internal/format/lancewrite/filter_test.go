package lancewrite

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// liveRecords returns the rows of recs (one source) not in del, as slices.
func liveRecords(recs []arrow.RecordBatch, del *roaring.Bitmap) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	var base uint64
	for _, r := range recs {
		n := uint64(r.NumRows())
		start := int64(-1)
		for i := uint64(0); i <= n; i++ {
			dead := i == n || (del != nil && del.Contains(uint32(base+i)))
			if !dead && start < 0 {
				start = int64(i)
			}
			if dead && start >= 0 {
				out = append(out, r.NewSlice(start, int64(i)))
				start = -1
			}
		}
		base += n
	}
	return out
}

// filterCase writes three sources with small pages and runs FilterConcat
// on them; it returns the diff against the live rows and the page events
// by column name.
func filterCase(t *testing.T, dels []*roaring.Bitmap, opts FilterOptions) (string, map[string]map[PagePath]int, FilterResult) {
	t.Helper()
	r := filterRun(t, dels, opts)
	return r.diff, r.events, r.res
}

// filterRunOut is one FilterConcat run of filterRun.
type filterRunOut struct {
	diff   string
	events map[string]map[PagePath]int
	all    []PageEvent // in output order (per column: drops, then pages as written)
	names  []string    // leaf name per output column
	srcs   []FilterSource
	out    []byte
	res    FilterResult
}

func filterRun(t *testing.T, dels []*roaring.Bitmap, opts FilterOptions) filterRunOut {
	t.Helper()
	schema := testSchema(true)
	fields, top := fieldsAndNames(t, schema)
	var srcs []FilterSource
	var want []arrow.RecordBatch
	for i, d := range dels {
		recs := randomRecords(schema, uint64(10+i), 4, 500, 0.1, true)
		srcs = append(srcs, FilterSource{CopySource: writeMem(t, fields, top, recs, Options{PageBytes: 16 << 10}), Deleted: d})
		want = append(want, liveRecords(recs, d)...)
	}
	var mu sync.Mutex
	events := map[string]map[PagePath]int{}
	var leafNames []string
	{
		w, err := NewWriter(&bytes.Buffer{}, fields, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range w.all {
			name := ""
			for _, n := range l.path {
				if name != "" {
					name += "."
				}
				name += n.f.Name
			}
			leafNames = append(leafNames, name)
		}
	}
	var all []PageEvent
	opts.OnPage = func(ev PageEvent) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, ev)
		n := leafNames[ev.Column]
		if events[n] == nil {
			events[n] = map[PagePath]int{}
		}
		events[n][ev.Path]++
	}
	var out bytes.Buffer
	res, err := FilterConcat(context.Background(), &out, fields, srcs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(out.Len()) {
		t.Fatalf("Result.Size %d, wrote %d", res.Size, out.Len())
	}
	var live int64
	for _, r := range want {
		live += r.NumRows()
	}
	if uint64(live) != res.NumRows {
		t.Fatalf("Result.NumRows %d, want %d", res.NumRows, live)
	}
	return filterRunOut{diff: diffFile(t, out.Bytes(), schema, want), events: events, all: all, names: leafNames, srcs: srcs, out: out.Bytes(), res: res}
}

func bitmapOf(rows ...uint32) *roaring.Bitmap { return roaring.BitmapOf(rows...) }

// TestFilterConcatPaths: every page takes the path its encoding allows,
// and the file holds exactly the live rows.
func TestFilterConcatPaths(t *testing.T) {
	every := func(k, from, to uint32) *roaring.Bitmap {
		b := roaring.New()
		for i := from; i < to; i += k {
			b.Add(i)
		}
		return b
	}
	d2 := every(3, 0, 2000)
	d2.AddRange(0, 1200)
	dels := []*roaring.Bitmap{nil, every(7, 3, 2000), d2}
	diff, ev, res := filterCase(t, dels, FilterOptions{PageCost: -1, Workers: 3, BudgetBytes: 1 << 20, PageBytes: 64 << 10})
	if diff != "" {
		t.Fatalf("rows differ: %s", diff)
	}
	names := make([]string, 0, len(ev))
	for n := range ev {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%-12s %v", n, ev[n])
	}
	// wide values without repetition: filtered, never decoded
	for _, n := range []string{"vec96", "long"} {
		if ev[n][PathFilter] == 0 || ev[n][PathReencode] != 0 {
			t.Errorf("%s: want filtered pages and no re-encoded ones: %v", n, ev[n])
		}
	}
	// mini-block without repetition (plain, bit-packed, dictionary):
	// re-chunked; lists (repetition) and small fixed-size lists: re-encoded
	for _, n := range []string{"id", "f64", "cat", "s", "st.a", "st.b"} {
		if ev[n][PathRechunk] == 0 || ev[n][PathReencode] != 0 || ev[n][PathFilter] != 0 {
			t.Errorf("%s: want re-chunked pages only: %v", n, ev[n])
		}
	}
	for _, n := range []string{"li.item", "llong.item", "vec4"} {
		if ev[n][PathReencode] == 0 || ev[n][PathFilter] != 0 || ev[n][PathRechunk] != 0 {
			t.Errorf("%s: want re-encoded pages and no filtered ones: %v", n, ev[n])
		}
	}
	for n, m := range ev {
		if m[PathCopy] == 0 {
			t.Errorf("%s: no page copied verbatim (source 0 has no deletions): %v", n, m)
		}
	}
	if ev["vec96"][PathDrop] == 0 || ev["long"][PathDrop] == 0 {
		t.Errorf("want dropped pages for rows [0,1200) of source 2: vec96 %v long %v", ev["vec96"], ev["long"])
	}
	if res.Paths.ColsCopied != len(ev) {
		t.Errorf("%d columns copied page by page, want all %d", res.Paths.ColsCopied, len(ev))
	}
	if res.Paths.Filtered.Pages == 0 || res.Paths.Filtered.Bytes == 0 || res.Paths.Copied.Bytes == 0 {
		t.Errorf("stats: %+v", res.Paths)
	}
}

// With the default page rule, columns of small pages are re-encoded whole
// (merged into big pages); wide columns are still copied.
func TestFilterConcatPageRule(t *testing.T) {
	dels := []*roaring.Bitmap{bitmapOf(5, 6, 7), nil, bitmapOf(1999)}
	diff, ev, res := filterCase(t, dels, FilterOptions{PageCost: 4 << 10, Workers: 2})
	if diff != "" {
		t.Fatalf("rows differ: %s", diff)
	}
	if ev["id"][PathCopy] != 0 || ev["id"][PathReencode] != 1 {
		t.Errorf("id: want one merged re-encoded page: %v", ev["id"])
	}
	if ev["vec96"][PathCopy] == 0 {
		t.Errorf("vec96: want copied pages: %v", ev["vec96"])
	}
	if res.Paths.ColsCopied == 0 || res.Paths.ColsCopied == len(ev) {
		t.Errorf("columns copied %d of %d: want some, not all", res.Paths.ColsCopied, len(ev))
	}
}

// Every row deleted in one source, none in another; one worker; a
// budget smaller than one page.
func TestFilterConcatEdges(t *testing.T) {
	all := roaring.New()
	all.AddRange(0, 2000)
	diff, ev, _ := filterCase(t, []*roaring.Bitmap{all, nil}, FilterOptions{PageCost: -1, Workers: 1, BudgetBytes: 1})
	if diff != "" {
		t.Fatalf("rows differ: %s", diff)
	}
	if ev["id"][PathDrop] == 0 || ev["id"][PathReencode] != 0 {
		t.Errorf("id: %v", ev["id"])
	}
}

func TestFilterConcatRefusals(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	fields, err := FieldsFromArrow(schema, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	for i := 0; i < 10; i++ {
		b.Append(int64(i))
	}
	col := b.NewArray()
	defer col.Release()
	src20 := writeMemFields(t, fields, col)
	_ = src20
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 10)
	defer rec.Release()
	s := FilterSource{CopySource: writeMem(t, fields, []string{"id"}, []arrow.RecordBatch{rec}, Options{Version: V2_0})}
	var out bytes.Buffer
	if _, err := FilterConcat(context.Background(), &out, fields, []FilterSource{s}, FilterOptions{}); !errors.Is(err, ErrCopyUnsupported) {
		t.Fatalf("2.0 source: %v, want ErrCopyUnsupported", err)
	}
	if out.Len() != 0 {
		t.Fatalf("wrote %d bytes before refusing", out.Len())
	}
	// a deleted row beyond the file
	s21 := FilterSource{CopySource: src20, Deleted: bitmapOf(10)}
	if _, err := FilterConcat(context.Background(), &out, fields, []FilterSource{s21}, FilterOptions{}); err == nil {
		t.Fatal("deleted row 10 of a 10-row file: no error")
	}
}

// TestOracleFilterConcatTables: tables real Lance wrote (every type, long
// text, vectors) with rows deleted by real Lance are rewritten by
// FilterConcat with every column taking the page paths; real Lance reads
// the same rows, in the same order, and takes rows by offset.
func TestOracleFilterConcatTables(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	for _, sc := range []string{"types", "text", "wide", oracle.Sized{Fragments: 3, RowsPerFragment: 2500, VectorDim: 64, TextWords: 60}.Scenario()} {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			uri := oracle.Build(t, sc, t.TempDir())
			oracle.RunOps(t, uri, []oracle.Op{{"op": "delete", "where": "id % 5 = 1 OR (id >= 100 AND id < 1300)"}})
			want := oracle.Scan(t, uri, 0, nil)
			m, naming := latestManifest(t, uri)
			var srcs []FilterSource
			var live uint64
			for _, fr := range m.PB.Fragments {
				if len(fr.Files) != 1 {
					t.Fatalf("fragment %d has %d files", fr.Id, len(fr.Files))
				}
				cs := openCopySources(t, uri, fr.Files)[0]
				fs := FilterSource{CopySource: cs}
				live += fr.PhysicalRows
				if df := fr.DeletionFile; df != nil {
					key := format.DeletionFileKey(fr.Id, df)
					data, err := os.ReadFile(filepath.Join(uri, key))
					if err != nil {
						t.Fatal(err)
					}
					bm, err := format.DecodeDeletionFile(key, df.FileType, data)
					if err != nil {
						t.Fatal(err)
					}
					fs.Deleted = bm
					live -= bm.GetCardinality()
				}
				srcs = append(srcs, fs)
			}
			out, name := createData(t, uri)
			var mu sync.Mutex
			paths := map[PagePath]int{}
			res, err := FilterConcat(context.Background(), out, m.PB.Fields, srcs, FilterOptions{PageCost: -1, Workers: 2,
				OnPage: func(ev PageEvent) { mu.Lock(); paths[ev.Path]++; mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			if res.NumRows != live || live != uint64(want.NumRows()) {
				t.Fatalf("wrote %d rows, fragments hold %d live, Lance scans %d", res.NumRows, live, want.NumRows())
			}
			var maxID uint64
			for _, fr := range m.PB.Fragments {
				maxID = max(maxID, fr.Id)
			}
			commitFragments(t, uri, m, naming, []*tablepb.DataFragment{{Id: maxID + 1, Files: []*tablepb.DataFile{dataFileOf(name, res.Result)}, PhysicalRows: res.NumRows}})
			oracle.Equal(t, want, oracle.Scan(t, uri, 0, nil))
			takes := []uint64{0, 1, 99, 100, live / 2, live - 1}
			oracle.Equal(t, oracle.ScanWith(t, uri, oracle.ScanOptions{Version: m.PB.Version, TakeOffsets: takes}),
				oracle.ScanWith(t, uri, oracle.ScanOptions{TakeOffsets: takes}))
			// every scenario has mini-block (scalar) pages; all but "wide"
			// have full-zip ones (long text, vectors)
			if paths[PathRechunk] == 0 || (sc != "wide" && paths[PathFilter] == 0) {
				t.Errorf("paths %v: want re-chunked pages and (but for wide) filtered ones", paths)
			}
			t.Logf("paths %v, stats %+v", paths, res.Paths)
		})
	}
}

// Workers take columns in order, one worker preferring copied columns and
// the others re-encoded ones, so the output copies pages while columns
// are re-encoded; the plans keep their order for the result.
func TestPlanQueuePrefersKinds(t *testing.T) {
	plans := []*colPlan{{col: 0}, {col: 1}, {col: 2, copy: true}, {col: 3, copy: true}, {col: 4}}
	q := &planQueue{left: slices.Clone(plans)}
	var got []int
	for _, prefer := range []bool{true, false, true, true, false, false} {
		if p := q.next(prefer); p != nil {
			got = append(got, p.col)
		} else {
			got = append(got, -1)
		}
	}
	if want := []int{2, 0, 3, 1, 4, -1}; !slices.Equal(got, want) {
		t.Errorf("plans taken %v, want %v", got, want)
	}
	for i, p := range plans {
		if p.col != i {
			t.Fatalf("plans reordered: %d at %d", p.col, i)
		}
	}
}
