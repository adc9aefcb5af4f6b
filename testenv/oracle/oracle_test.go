package oracle

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/store/storetest"
)

func TestScenarioListMatchesScript(t *testing.T) {
	Require(t)
	out := run(t, "build.mjs", "--list")
	got := strings.Fields(string(out))
	if !slices.Equal(got, Scenarios()) {
		t.Fatalf("build.mjs scenarios %v, Go list %v", got, Scenarios())
	}
}

// scenarioCheck holds per-scenario facts about the shape real Lance built.
var scenarioCheck = map[string]func(t *testing.T, path string, r Report, tbl arrow.Table){
	"appends": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "fragments", r.Fragments, 30)
		wantEq(t, "versions", len(r.Versions), 30)
		wantEq(t, "rows", r.Rows, int64(1200))
	},
	"deletes_arrow": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "fragments", r.Fragments, 4)
		wantEq(t, "deletion files", r.DeletionFiles, 4)
		wantEq(t, "deleted rows", r.DeletedRows, int64(2000-1949))
		wantDeletionKinds(t, path, 4, 0)
	},
	"deletes_bitmap": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "deleted rows", r.DeletedRows, int64(6000+428)) // 428 multiples of 7 in [12000,15000)
		wantEq(t, "fragment 0 live rows", r.FragmentRows[0], int64(6000))
		wantDeletionKinds(t, path, 1, 1)
	},
	"backfill": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "data files", r.DataFiles, 3*r.Fragments)
		wantEq(t, "columns", len(r.Schema), 6)
	},
	"dropped_column": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		// "doubled" had a file of its own, which goes; "note" stays as a
		// dead slot in the base file.
		wantEq(t, "data files", r.DataFiles, 2*r.Fragments)
		var names []string
		for _, f := range r.Schema {
			names = append(names, f.Name)
		}
		wantEq(t, "columns", strings.Join(names, ","), "id,category,value,label")
	},
	"stable_row_ids": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		ra := ScanWith(t, path, ScanOptions{Columns: []string{"id"}, WithRowID: true, WithRowAddr: true})
		col := func(name string) []arrow.Array {
			idx := ra.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("scan has no %s column: %s", name, ra.Schema())
			}
			return ra.Column(idx[0]).Data().Chunks()
		}
		ids, addrs := col("_rowid"), col("_rowaddr")
		differ := 0
		for c := range ids {
			a, b := ids[c].(*array.Uint64), addrs[c].(*array.Uint64)
			for i := 0; i < a.Len(); i++ {
				if a.Value(i) != b.Value(i) {
					differ++
				}
			}
		}
		if differ == 0 {
			t.Errorf("stable row ids: every _rowid equals its _rowaddr; the updated rows should have kept their ids")
		}
	},
	"v1_paths": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		if _, err := os.Stat(filepath.Join(path, "_versions", "1.manifest")); err != nil {
			t.Errorf("V1 naming: %v", err)
		}
	},
	"v2_0": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		if _, err := os.Stat(filepath.Join(path, "_versions", "18446744073709551614.manifest")); err != nil {
			t.Errorf("V2 naming: %v", err)
		}
	},
	"indexed": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "indices", len(r.Indices), 2)
		for _, ix := range r.Indices {
			wantEq(t, ix.Name+" indexed rows", ix.IndexedRows, int64(2000))
			wantEq(t, ix.Name+" unindexed rows", ix.UnindexedRows, int64(300))
		}
	},
	"tags": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "tags", len(r.Tags), 3)
		wantEq(t, "tag middle", r.Tags["middle"], uint64(3))
		old := Inspect(t, path, r.Tags["middle"])
		wantEq(t, "rows at tag middle", old.Rows, int64(300))
		wantEq(t, "version at tag middle", old.Version, uint64(3))
	},
	"branches": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "rows on main", r.Rows, int64(250))
		dev, ok := r.Branches["dev"]
		if !ok {
			t.Fatalf("no branch dev: %v", r.Branches)
		}
		wantEq(t, "dev", dev, Branch{ParentBranch: "", ParentVersion: 2, Version: 3, Rows: 240})
		if _, err := os.Stat(filepath.Join(path, "_refs", "branches", "dev.json")); err != nil {
			t.Errorf("branch ref: %v", err)
		}
	},
	"compacted": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "fragments", r.Fragments, 2)
		wantEq(t, "deleted rows", r.DeletedRows, int64(0))
		wantEq(t, "rows", r.Rows, int64(2070))
		wantEq(t, "versions", len(r.Versions), int(r.Version))
		for _, ix := range r.Indices {
			wantEq(t, ix.Name+" unindexed rows", ix.UnindexedRows, int64(0))
		}
		// The pre-compaction version is still readable.
		wantEq(t, "rows at v6", Inspect(t, path, 6).Rows, int64(2300))
	},
	"types": func(t *testing.T, path string, r Report, tbl arrow.Table) {
		wantEq(t, "columns", len(r.Schema), 30)
		wantEq(t, "rows", r.Rows, int64(4000))
		digestAcrossChunkings(t, path, tbl)
	},
	"text": func(t *testing.T, path string, r Report, tbl arrow.Table) { wantEq(t, "rows", r.Rows, int64(6000)) },
	"wide": func(t *testing.T, path string, r Report, tbl arrow.Table) { wantEq(t, "columns", len(r.Schema), 121) },
}

func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// wantFileVersions checks the (major, minor) in the last 8 bytes of every
// data file: u16 major, u16 minor, "LANC".
func wantFileVersions(t *testing.T, path string, major, minor uint16) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(path, "data", "*.lance"))
	if err != nil || len(files) == 0 {
		t.Fatalf("data files under %s: %v (%d)", path, err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tail := b[len(b)-8:]
		gotMajor := binary.LittleEndian.Uint16(tail[0:2])
		gotMinor := binary.LittleEndian.Uint16(tail[2:4])
		if string(tail[4:]) != "LANC" || gotMajor != major || gotMinor != minor {
			t.Errorf("%s: footer %x, want version %d.%d", f, tail, major, minor)
		}
	}
}

func wantDeletionKinds(t *testing.T, path string, arrowFiles, bitmapFiles int) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(path, "_deletions"))
	if err != nil {
		t.Fatal(err)
	}
	var a, b int
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".arrow":
			a++
		case ".bin":
			b++
		}
	}
	// Superseded .arrow files stay on disk until cleanup, so arrow counts
	// are a lower bound.
	if a < arrowFiles || b != bitmapFiles {
		t.Errorf("_deletions: %d .arrow, %d .bin; want >= %d .arrow, %d .bin", a, b, arrowFiles, bitmapFiles)
	}
}

func TestScenarios(t *testing.T) {
	Require(t)
	for _, s := range Scenarios() {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			path := Build(t, s, t.TempDir())
			r := Inspect(t, path, 0)
			tbl := Scan(t, path, 0, nil)
			if tbl.NumRows() != r.Rows {
				t.Errorf("scan rows %d, countRows %d", tbl.NumRows(), r.Rows)
			}
			if int(tbl.NumCols()) != len(r.Schema) {
				t.Errorf("scan columns %d, schema fields %d", tbl.NumCols(), len(r.Schema))
			}
			var live int64
			for _, n := range r.FragmentRows {
				live += n
			}
			wantEq(t, "sum of fragment rows", live, r.Rows)
			wantEq(t, "physical-deleted rows", r.PhysicalRows-r.DeletedRows, r.Rows)
			wantEq(t, "version", r.Version, r.LatestVersion)
			wantEq(t, "latest listed version", r.Versions[len(r.Versions)-1], r.Version)
			if r.Fragments < 2 {
				t.Errorf("fragments %d: every scenario has several", r.Fragments)
			}
			wantMajor, wantMinor := uint16(2), uint16(1) // lance 8.0.0 default
			if s == "v2_0" {
				wantMajor, wantMinor = 0, 3 // how the 2.0 writer marks its files
			}
			wantFileVersions(t, path, wantMajor, wantMinor)
			if check := scenarioCheck[s]; check != nil {
				check(t, path, r, tbl)
			} else {
				t.Errorf("no shape check for scenario %s", s)
			}
		})
	}
}

// TestBuildCopiesAreIndependent: two builds of one scenario are separate
// tables; writing to one leaves the other (and the cache) unchanged.
func TestBuildCopiesAreIndependent(t *testing.T) {
	Require(t)
	a := Build(t, "deletes_arrow", t.TempDir())
	b := Build(t, "deletes_arrow", "file://"+t.TempDir())
	before := Digest(Scan(t, b, 0, nil))
	res := RunOps(t, a, []Op{
		{"op": "add", "rows": 10, "seed": 5},
		{"op": "delete", "where": "id < 100"},
	})
	var last struct {
		Version uint64 `json:"version"`
		Rows    int64  `json:"rows"`
	}
	if err := json.Unmarshal(res[1], &last); err != nil {
		t.Fatal(err)
	}
	ra := Inspect(t, a, 0)
	wantEq(t, "version after ops", ra.Version, last.Version)
	wantEq(t, "rows after ops", ra.Rows, last.Rows)
	if Inspect(t, b, 0).Version == ra.Version {
		t.Errorf("the second copy moved with the first")
	}
	if after := Digest(Scan(t, b, 0, nil)); !mapsEqual(before, after) {
		t.Errorf("second copy changed")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// digestAcrossChunkings: the types table read whole and read as two
// filtered halves (different batches) digests the same, and the halves'
// concatenation equals the whole row for row.
func digestAcrossChunkings(t *testing.T, path string, whole arrow.Table) {
	t.Helper()
	lo := ScanWith(t, path, ScanOptions{Where: "id < 1234"})
	hi := ScanWith(t, path, ScanOptions{Where: "id >= 1234"})
	joined := concatTables(t, lo, hi)
	defer joined.Release()
	Equal(t, whole, joined)
	dw, dj := Digest(whole), Digest(joined)
	for k, v := range dw {
		if dj[k] != v {
			t.Errorf("column %s: digest differs across chunkings", k)
		}
	}
	if dw["id"] == dw["i64"] || dw["s"] == dw["ls"] {
		t.Errorf("different columns share a digest: %v", dw)
	}
}

func concatTables(t *testing.T, tbls ...arrow.Table) arrow.Table {
	t.Helper()
	var recs []arrow.RecordBatch
	for _, tb := range tbls {
		tr := array.NewTableReader(tb, 1000)
		for tr.Next() {
			r := tr.RecordBatch()
			r.Retain()
			recs = append(recs, r)
		}
		tr.Release()
	}
	out := array.NewTableFromRecords(tbls[0].Schema(), recs)
	for _, r := range recs {
		r.Release()
	}
	return out
}

// TestS3Emulator builds a scenario with real Lance on the in-process S3
// emulator and checks that real Lance sees the same table there as the
// same scenario built on local disk (the data is deterministic).
func TestS3Emulator(t *testing.T) {
	Require(t)
	s3 := storetest.StartS3(t)
	opts := Options{StorageOptions: s3.LanceStorageOptions()}
	uri := Build(t, "deletes_arrow", s3.LanceURI("oracle-test"), opts)
	if !strings.HasPrefix(uri, "s3://") {
		t.Fatalf("Build on S3 returned %q", uri)
	}
	local := Build(t, "deletes_arrow", t.TempDir())

	rs, rl := Inspect(t, uri, 0, opts), Inspect(t, local, 0)
	wantEq(t, "rows", rs.Rows, rl.Rows)
	wantEq(t, "version", rs.Version, rl.Version)
	wantEq(t, "fragments", rs.Fragments, rl.Fragments)
	wantEq(t, "data files", rs.DataFiles, rl.DataFiles)
	wantEq(t, "deleted rows", rs.DeletedRows, rl.DeletedRows)
	Equal(t, Scan(t, local, 0, nil), Scan(t, uri, 0, nil, opts))

	res := RunOps(t, uri, []Op{{"op": "add", "rows": 25, "seed": 9}, {"op": "delete", "where": "id % 2 = 1"}}, opts)
	var last struct {
		Rows    int64  `json:"rows"`
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(res[len(res)-1], &last); err != nil {
		t.Fatal(err)
	}
	after := Inspect(t, uri, 0, opts)
	wantEq(t, "rows after ops", after.Rows, last.Rows)
	wantEq(t, "version after ops", after.Version, rl.Version+2)
	old := Scan(t, uri, rl.Version, []string{"id"}, opts)
	wantEq(t, "rows at the old version", old.NumRows(), rl.Rows)
}

// TestBuildWithOptions: storage options reach real Lance's table creation
// (here: data storage version 2.2 for a scenario that defaults to 2.1).
func TestBuildWithOptions(t *testing.T) {
	Require(t)
	path := Build(t, "deletes_arrow", t.TempDir(), Options{StorageOptions: map[string]string{"new_table_data_storage_version": "2.2"}})
	wantFileVersions(t, path, 2, 2)
	wantEq(t, "rows", Inspect(t, path, 0).Rows, int64(1949))
}

func TestSized(t *testing.T) {
	Require(t)
	spec := Sized{Fragments: 3, RowsPerFragment: 1500, VectorDim: 8, TextWords: 5, DeleteEvery: 7}
	path := Build(t, spec.Scenario(), t.TempDir())
	r := Inspect(t, path, 0)
	wantEq(t, "fragments", r.Fragments, 3)
	wantEq(t, "physical rows", r.PhysicalRows, int64(4500))
	wantEq(t, "rows", r.Rows, int64(4500-643)) // 643 multiples of 7 in [0,4500)
	var names []string
	for _, f := range r.Schema {
		names = append(names, f.Name)
	}
	wantEq(t, "columns", strings.Join(names, ","), "id,category,value,note,vec,body")
}
