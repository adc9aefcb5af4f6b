package fm

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// fmTextOps give a table's body column the documents an FM index must
// handle: empty, null, non-ASCII, a NUL byte (sanitized to a space).
var fmTextOps = []oracle.Op{
	{"op": "update", "where": "id = 3", "values_sql": map[string]string{"body": "''"}},
	{"op": "update", "where": "id = 5 OR id = 11", "values_sql": map[string]string{"body": "NULL"}},
	{"op": "update", "where": "id = 8", "values_sql": map[string]string{"body": "'héllo wörld ünïcode 日本語 river'"}},
	{"op": "update", "where": "id = 9", "values_sql": map[string]string{"body": "concat('nul', chr(0), 'byte')"}},
}

// TestBuildMatchesLanceOracle builds the FM segment of a table's body
// column from real Lance's scan of it (row addresses in scan order) and
// compares it with the segment real Lance's createIndex(fm) wrote for the
// same table: the same partition files, each with the same schema
// metadata (every key, byte for byte) and the same rows (node_id,
// block_id, words, prefix_rank, bit_len). Only the files' page layout may
// differ (lance's writer buffers 8 MiB per column, ours index.FilePageBytes).
func TestBuildMatchesLanceOracle(t *testing.T) {
	oracle.Require(t)
	for _, sc := range []string{"sized-3x4000-v0-t8-d7", "text", "sized-4x500-v0-t12-d0"} {
		t.Run(sc, func(t *testing.T) {
			path := oracle.Build(t, sc, t.TempDir())
			var ops []oracle.Op
			switch sc {
			case "sized-3x4000-v0-t8-d7":
				ops = fmTextOps
			case "sized-4x500-v0-t12-d0":
				// No document at all: one empty partition.
				ops = []oracle.Op{{"op": "update", "values_sql": map[string]string{"body": "NULL"}}}
			}
			oracle.RunOps(t, path, append(slices.Clone(ops), oracle.Op{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"}))
			rep := oracle.Inspect(t, path, 0)
			m := indextest.ReadManifest(t, path, rep.Version)
			ix := indextest.Index(t, m, "body_idx")
			var lanceFiles []string
			for _, f := range ix.GetFiles() {
				lanceFiles = append(lanceFiles, f.GetPath())
			}
			seg, res := buildFromScan(t, path, 0)
			if !slices.Equal(res.Files, lanceFiles) {
				t.Fatalf("files %v, lance %v", res.Files, lanceFiles)
			}
			dir := filepath.Join(path, "_indices", indextest.UUID(t, ix.GetUuid()))
			for _, name := range res.Files {
				theirs, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				compareFiles(t, name, seg[name], theirs)
				t.Logf("%s: %d bytes, lance %d, identical %v", name, len(seg[name]), len(theirs), bytes.Equal(seg[name], theirs))
			}
			if sc == "sized-3x4000-v0-t8-d7" {
				// The NUL byte of row id 9 was sanitized to a space.
				var hits int
				for _, name := range res.Files {
					hits += len(seg.partition(t, name).Search([]byte("nul byte")))
				}
				if hits != 1 {
					t.Fatalf("'nul byte' found in %d documents, want 1", hits)
				}
			}
			t.Logf("%s: %d docs (%d null) in %d partitions, %d bytes of text: every partition file's metadata and rows equal lance's", sc, res.Docs, res.Nulls, len(res.Files), res.Text)
		})
	}
}

// compareFiles fails unless two partition files hold the same schema
// metadata and rows.
func compareFiles(t *testing.T, name string, ours, theirs []byte) {
	t.Helper()
	ctx := context.Background()
	open := func(data []byte) (*lancefile.File, arrow.RecordBatch) {
		f, err := lancefile.Open(bytes.NewReader(data), int64(len(data)), name)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := f.ReadAll(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return f, rec
	}
	fo, ro := open(ours)
	ft, rt := open(theirs)
	mo, mt := fo.Descriptor.GetSchema().GetMetadata(), ft.Descriptor.GetSchema().GetMetadata()
	keys := slices.Sorted(maps.Keys(mt))
	if !slices.Equal(slices.Sorted(maps.Keys(mo)), keys) {
		t.Fatalf("%s: metadata keys %v, lance %v", name, slices.Sorted(maps.Keys(mo)), keys)
	}
	for _, k := range keys {
		if !bytes.Equal(mo[k], mt[k]) {
			t.Fatalf("%s: metadata %s differs: %s vs lance %s", name, k, clip(mo[k]), clip(mt[k]))
		}
	}
	if fmt.Sprint(fo.Fields()) != fmt.Sprint(ft.Fields()) {
		t.Fatalf("%s: fields %v, lance %v", name, fo.Fields(), ft.Fields())
	}
	if ro.NumRows() != rt.NumRows() || ro.NumCols() != rt.NumCols() {
		t.Fatalf("%s: %d rows x %d columns, lance %d x %d", name, ro.NumRows(), ro.NumCols(), rt.NumRows(), rt.NumCols())
	}
	for c := 0; c < int(rt.NumCols()); c++ {
		if !array.Equal(ro.Column(c), rt.Column(c)) {
			t.Fatalf("%s: column %s differs", name, rt.ColumnName(c))
		}
	}
}

// buildFromScan builds the FM segment of the body column from real
// Lance's scan of the table at version (0: latest), rows with their
// addresses in scan order.
func buildFromScan(t *testing.T, path string, version uint64) (memSegment, Result) {
	t.Helper()
	tbl := oracle.ScanWith(t, path, oracle.ScanOptions{Version: version, Columns: []string{"body"}, WithRowAddr: true})
	seg := memSegment{}
	b := NewBuilder(context.Background(), seg, 1<<30)
	rdr := array.NewTableReader(tbl, 1024)
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		addrs := rec.Column(rec.Schema().FieldIndices("_rowaddr")[0]).(*array.Uint64).Uint64Values()
		if err := b.AddColumn(rec.Column(rec.Schema().FieldIndices("body")[0]), addrs); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return seg, res
}

func clip(b []byte) string {
	if len(b) > 120 {
		return fmt.Sprintf("%s...(%d bytes)", b[:120], len(b))
	}
	return string(b)
}
