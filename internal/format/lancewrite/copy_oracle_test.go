package lancewrite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// openCopySources opens the data files of a fragment as copy sources.
func openCopySources(t testing.TB, uri string, files []*tablepb.DataFile) []CopySource {
	t.Helper()
	var out []CopySource
	for _, df := range files {
		p := filepath.Join(uri, "data", df.Path)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, CopySource{R: f, Size: st.Size(), Name: p, File: df})
	}
	return out
}

// createData opens a new data file for writing.
func createData(t testing.TB, uri string) (*os.File, string) {
	t.Helper()
	name := uuid.NewString() + ".lance"
	f, err := os.Create(filepath.Join(uri, "data", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, name
}

func dataFileOf(name string, res Result) *tablepb.DataFile {
	return &tablepb.DataFile{Path: name, Fields: res.Fields, ColumnIndices: res.ColumnIndices,
		FileMajorVersion: res.Major, FileMinorVersion: res.Minor, FileSizeBytes: uint64(res.Size)}
}

// mergeFragments column-merges every fragment's data files into one file by
// page copy, commits, and checks real Lance reads the same table.
func mergeFragments(t *testing.T, scenario string) {
	t.Helper()
	uri := oracle.Build(t, scenario, t.TempDir())
	want := oracle.Scan(t, uri, 0, nil)
	m, naming := latestManifest(t, uri)
	var frags []*tablepb.DataFragment
	merged := 0
	for i, fr := range m.PB.Fragments {
		files := fr.Files
		// odd fragments get their files in reverse order: they must still
		// land in schema order (mapping by field id, never by position)
		if i%2 == 1 {
			files = make([]*tablepb.DataFile, len(fr.Files))
			for i, f := range fr.Files {
				files[len(files)-1-i] = f
			}
		}
		if len(files) > 1 {
			merged++
		}
		srcs := openCopySources(t, uri, files)
		out, name := createData(t, uri)
		res, err := CopyColumns(context.Background(), out, srcs, m.PB.Fields)
		if err != nil {
			t.Fatalf("fragment %d: %v", fr.Id, err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		if res.NumRows != fr.PhysicalRows {
			t.Fatalf("fragment %d: %d rows, want %d", fr.Id, res.NumRows, fr.PhysicalRows)
		}
		nf := proto.Clone(fr).(*tablepb.DataFragment)
		nf.Files = []*tablepb.DataFile{dataFileOf(name, res)}
		frags = append(frags, nf)
	}
	if merged == 0 {
		t.Fatalf("scenario %s has no multi-file fragment", scenario)
	}
	commitFragments(t, uri, m, naming, frags)
	got := oracle.Scan(t, uri, 0, nil)
	oracle.Equal(t, want, got)
	takes := []uint64{0, 5, uint64(want.NumRows()) - 1, uint64(want.NumRows()) / 2}
	oracle.Equal(t, oracle.ScanWith(t, uri, oracle.ScanOptions{Version: m.PB.Version - 1, TakeOffsets: takes}),
		oracle.ScanWith(t, uri, oracle.ScanOptions{TakeOffsets: takes}))
}

func TestOracleCopyColumnsBackfill(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	mergeFragments(t, "backfill")
}

// Files holding dropped columns: only the schema's fields are copied.
func TestOracleCopyColumnsDroppedColumn(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	mergeFragments(t, "dropped_column")
}

// Row-wise: fragments of the appends table concatenated by page copy into
// fewer fragments read identically.
func TestOracleConcatRowsAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	uri := oracle.Build(t, "appends", t.TempDir())
	want := oracle.Scan(t, uri, 0, nil)
	m, naming := latestManifest(t, uri)
	var frags []*tablepb.DataFragment
	nextID := uint64(0)
	for _, fr := range m.PB.Fragments {
		nextID = max(nextID, fr.Id+1)
	}
	const group = 7
	for i := 0; i < len(m.PB.Fragments); i += group {
		g := m.PB.Fragments[i:min(len(m.PB.Fragments), i+group)]
		var files []*tablepb.DataFile
		var rows uint64
		for _, fr := range g {
			if len(fr.Files) != 1 || fr.DeletionFile != nil {
				t.Fatalf("fragment %d: want one file and no deletions", fr.Id)
			}
			files = append(files, fr.Files[0])
			rows += fr.PhysicalRows
		}
		out, name := createData(t, uri)
		res, err := ConcatRows(context.Background(), out, openCopySources(t, uri, files)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		if res.NumRows != rows {
			t.Fatalf("concat: %d rows, want %d", res.NumRows, rows)
		}
		frags = append(frags, &tablepb.DataFragment{Id: nextID, Files: []*tablepb.DataFile{dataFileOf(name, res)}, PhysicalRows: rows})
		nextID++
	}
	commitFragments(t, uri, m, naming, frags)
	got := oracle.Scan(t, uri, 0, nil)
	oracle.Equal(t, want, got)
	takes := []uint64{0, 39, 40, 41, 279, 280, uint64(want.NumRows()) - 1}
	oracle.Equal(t, oracle.ScanWith(t, uri, oracle.ScanOptions{Version: m.PB.Version - 1, TakeOffsets: takes}),
		oracle.ScanWith(t, uri, oracle.ScanOptions{TakeOffsets: takes}))
}
