package lancewrite

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// latestManifest reads the newest manifest of a local table.
func latestManifest(t testing.TB, dir string) (*format.Manifest, format.Naming) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, format.VersionsDir))
	if err != nil {
		t.Fatal(err)
	}
	var best uint64
	var bestName string
	var naming format.Naming
	for _, e := range ents {
		v, n, err := format.ParseManifestName(e.Name())
		if err != nil {
			continue
		}
		if v >= best {
			best, bestName, naming = v, e.Name(), n
		}
	}
	if bestName == "" {
		t.Fatalf("no manifest in %s", dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, format.VersionsDir, bestName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := format.DecodeManifestFile(bestName, data)
	if err != nil {
		t.Fatal(err)
	}
	return m, naming
}

// commitFragments writes version latest+1 whose fragments are frags (a test
// stand-in for the engine's commit path: same manifest, new fragment list).
func commitFragments(t testing.TB, dir string, m *format.Manifest, naming format.Naming, frags []*tablepb.DataFragment) {
	t.Helper()
	pb := m.PB
	pb.Version++
	pb.Fragments = frags
	pb.TransactionFile = ""
	var maxID uint32
	for _, f := range frags {
		maxID = max(maxID, uint32(f.Id))
	}
	if pb.MaxFragmentId == nil || *pb.MaxFragmentId < maxID {
		pb.MaxFragmentId = &maxID
	}
	data, err := format.EncodeManifest(pb, m.IndexSectionRaw, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, format.ManifestKey(naming, pb.Version))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeDataFile writes recs to a new data file under dir/data and returns
// its DataFile entry.
func writeDataFile(t testing.TB, dir string, fields []*filepb.Field, recs []arrow.RecordBatch, opts Options) (*tablepb.DataFile, Result) {
	t.Helper()
	name := uuid.NewString() + ".lance"
	f, err := os.Create(filepath.Join(dir, "data", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, fields, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "data", name))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != res.Size {
		t.Fatalf("Result.Size %d, file has %d bytes", res.Size, st.Size())
	}
	return &tablepb.DataFile{Path: name, Fields: res.Fields, ColumnIndices: res.ColumnIndices,
		FileMajorVersion: res.Major, FileMinorVersion: res.Minor, FileSizeBytes: uint64(res.Size)}, res
}

// recordsOf cuts rows [off, off+n) of tbl into records of at most chunk rows.
func recordsOf(t testing.TB, tbl arrow.Table, off, n, chunk int64) []arrow.RecordBatch {
	t.Helper()
	cols := make([]arrow.Column, tbl.NumCols())
	for i := range cols {
		ch := array.NewChunkedSlice(tbl.Column(i).Data(), off, off+n)
		cols[i] = *arrow.NewColumn(tbl.Schema().Field(i), ch)
		ch.Release()
	}
	sl := array.NewTable(tbl.Schema(), cols, n)
	defer sl.Release()
	rd := array.NewTableReader(sl, chunk)
	defer rd.Release()
	var out []arrow.RecordBatch
	for rd.Next() {
		r := rd.RecordBatch()
		r.Retain()
		out = append(out, r)
		t.Cleanup(r.Release)
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
