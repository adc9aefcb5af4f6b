package lancewrite

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/lancefile"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// swapScenario builds a scenario with real Lance, rewrites every fragment
// with our writer from real Lance's own read of it, commits the new files
// and checks that real Lance reads the table identically (scan and takes).
// It returns the total bytes of Lance's files and of ours, per table.
func swapScenario(t *testing.T, scenario string, opts Options) (lanceBytes, ourBytes int64) {
	return swapScenarioWith(t, scenario, opts, swapCase{})
}

type swapCase struct {
	physVersion uint64   // version whose scan holds every physical row (0 = latest)
	columns     []string // compared columns (nil = all)
	asV20       bool     // mark the table's data storage version 2.0
	prep        []oracle.Op
	noTakes     bool
}

func swapScenarioWith(t *testing.T, scenario string, opts Options, sc swapCase) (lanceBytes, ourBytes int64) {
	t.Helper()
	uri := oracle.Build(t, scenario, t.TempDir())
	if sc.prep != nil {
		oracle.RunOps(t, uri, sc.prep)
	}
	m, naming := latestManifest(t, uri)
	phys := oracle.Scan(t, uri, sc.physVersion, nil)
	want := phys
	if sc.physVersion != 0 {
		want = oracle.Scan(t, uri, 0, sc.columns)
	} else if sc.columns != nil {
		want = project(t, phys, sc.columns)
	}
	var frags []*tablepb.DataFragment
	var off int64
	lanceCols, ourCols := map[string]int64{}, map[string]int64{}
	defer func() {
		names := make([]string, 0, len(lanceCols))
		for n := range lanceCols {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "  %-14s lance %9d  ours %9d  ratio %.3f\n", n, lanceCols[n], ourCols[n], float64(ourCols[n])/float64(max(1, lanceCols[n])))
		}
		t.Logf("%s: page bytes per column:\n%s", scenario, b.String())
	}()
	for _, f := range m.PB.Fragments {
		if f.DeletionFile != nil && sc.physVersion == 0 {
			t.Fatalf("scenario %s: fragment %d has deletions; this test needs physical rows", scenario, f.Id)
		}
		for _, df := range f.Files {
			st, err := os.Stat(filepath.Join(uri, "data", df.Path))
			if err != nil {
				t.Fatal(err)
			}
			lanceBytes += st.Size()
			columnBytes(t, filepath.Join(uri, "data", df.Path), lanceCols)
		}
		n := int64(f.PhysicalRows)
		recs := recordsOf(t, phys, off, n, 700)
		df, res := writeDataFile(t, uri, m.PB.Fields, recs, opts)
		if res.NumRows != uint64(n) {
			t.Fatalf("fragment %d: wrote %d rows, want %d", f.Id, res.NumRows, n)
		}
		ourBytes += res.Size
		columnBytes(t, filepath.Join(uri, "data", df.Path), ourCols)
		nf := &tablepb.DataFragment{Id: f.Id, Files: []*tablepb.DataFile{df}, PhysicalRows: f.PhysicalRows,
			RowIdSequence: f.RowIdSequence, DeletionFile: f.DeletionFile}
		frags = append(frags, nf)
		off += n
	}
	if sc.asV20 {
		m.PB.DataFormat.Version = "2.0"
	}
	commitFragments(t, uri, m, naming, frags)
	got := oracle.Scan(t, uri, 0, sc.columns)
	oracle.Equal(t, want, got)
	if sc.noTakes {
		return lanceBytes, ourBytes
	}
	// random access through real Lance: first, last, page and fragment edges
	total := uint64(want.NumRows())
	takes := []uint64{0, 1, total - 1, total / 2, total/2 - 1, 1023, 1024, 1025, 777, 4095 % total}
	wantT := oracle.ScanWith(t, uri, oracle.ScanOptions{Version: m.PB.Version - 1, Columns: sc.columns, TakeOffsets: takes})
	gotT := oracle.ScanWith(t, uri, oracle.ScanOptions{Columns: sc.columns, TakeOffsets: takes})
	oracle.Equal(t, wantT, gotT)
	return lanceBytes, ourBytes
}

func TestOracleReadsOurTypes21(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	lb, ob := swapScenario(t, "types", Options{})
	t.Logf("types 2.1: lance %d bytes, ours %d bytes, ratio %.3f", lb, ob, float64(ob)/float64(lb))
}

func TestOracleReadsOurTypes21SmallPages(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	// 16 KiB pages: every column spans many pages (the 12 MB 768-d vector
	// column is left out of the comparison to keep the test quick)
	cols := []string{"id", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "flag", "s", "ls",
		"long_text", "bin", "d32", "ts", "ts_tz", "dec", "fsb", "vec128", "li", "ls_list", "st", "lst", "nested", "all_null", "all_null_s"}
	swapScenarioWith(t, "types", Options{PageBytes: 16 << 10}, swapCase{columns: cols, noTakes: true})
}

func TestOracleReadsOurText21(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	lb, ob := swapScenario(t, "text", Options{})
	t.Logf("text 2.1: lance %d bytes, ours %d bytes, ratio %.3f", lb, ob, float64(ob)/float64(lb))
	if float64(ob) > 1.2*float64(lb) {
		t.Errorf("text: our files are %.2fx real Lance's", float64(ob)/float64(lb))
	}
}

// columnBytes adds the page buffer bytes of every column of a data file
// to sizes, keyed by field name.
func columnBytes(t testing.TB, path string, sizes map[string]int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	lf, err := lancefile.Open(f, st.Size(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range lf.Columns {
		name := fmt.Sprint(c.FieldID)
		if fl := lf.Field(c.FieldID); fl != nil {
			name = fl.Name
			if p := lf.Field(fl.ParentId); p != nil {
				name = p.Name + "." + name
			}
		}
		for _, p := range c.Meta.GetPages() {
			for _, s := range p.GetBufferSizes() {
				sizes[name] += int64(s)
			}
		}
	}
}

func TestOracleReadsOurV20(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	// v2_0: a 2.0 table with a delete; physical rows come from the version before it
	m := func() uint64 {
		uri := oracle.Build(t, "v2_0", t.TempDir())
		mm, _ := latestManifest(t, uri)
		return mm.PB.Version - 1
	}()
	lb, ob := swapScenarioWith(t, "v2_0", Options{Version: V2_0}, swapCase{physVersion: m})
	t.Logf("v2_0: lance %d bytes, ours %d bytes", lb, ob)
}

// Every type of the types table written as 2.0 files (2.0 stores no struct
// validity, so the nullable struct column is left out of the comparison).
func TestOracleReadsOurTypesAsV20(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	cols := []string{"id", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "flag", "s", "ls",
		"long_text", "bin", "d32", "ts", "ts_tz", "dec", "fsb", "vec128", "big_vec", "li", "ls_list", "lst", "nested", "all_null", "all_null_s"}
	swapScenarioWith(t, "types", Options{Version: V2_0, PageBytes: 256 << 10}, swapCase{columns: cols, asV20: true, noTakes: true})
}

// Runs and constants (RLE pages) and a low-cardinality column added by real
// Lance's add_columns, then the whole table rewritten by our writer.
func TestOracleReadsOurRunsAndConstants(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	prep := []oracle.Op{{"op": "add_columns", "columns": []map[string]any{
		{"name": "run32", "value_sql": "CAST(id / 100 AS INT)"},
		{"name": "konst", "value_sql": "CAST(42 AS BIGINT)"},
		{"name": "run8", "value_sql": "CAST(id / 300 AS TINYINT)"},
	}}}
	swapScenarioWith(t, "types", Options{}, swapCase{prep: prep, columns: []string{"id", "run32", "konst", "run8"}})
}

// project keeps the named columns of tbl.
func project(t testing.TB, tbl arrow.Table, names []string) arrow.Table {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Column
	for _, n := range names {
		idx := tbl.Schema().FieldIndices(n)
		if len(idx) != 1 {
			t.Fatalf("project: column %q not found", n)
		}
		fields = append(fields, tbl.Schema().Field(idx[0]))
		cols = append(cols, *tbl.Column(idx[0]))
	}
	out := array.NewTable(arrow.NewSchema(fields, nil), cols, tbl.NumRows())
	t.Cleanup(out.Release)
	return out
}
