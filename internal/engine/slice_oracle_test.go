package engine_test

import (
	"context"
	"maps"
	"os"
	"strconv"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// sliceRows is the row count of the sliced fragment (LANCED_SLICE_ROWS
// overrides it; real Lance writes at most 1 Mi rows per fragment).
func sliceRows(t *testing.T, def int) int {
	if v := os.Getenv("LANCED_SLICE_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LANCED_SLICE_ROWS=%q", v)
		}
		return n
	}
	return def
}

// hugeFragment builds a table of one fragment of rows rows (16-d vectors),
// every 7th row deleted. Real Lance writes at most 1 Mi rows per fragment;
// a bigger one is made by real Lance as fragments of 1 Mi rows that lanced
// then rewrites into one (an unsliced rewrite), and the rows are deleted
// afterwards by real Lance.
func hugeFragment(t *testing.T, rows int) string {
	const lanceMax = 1 << 20
	if rows <= lanceMax {
		return oracle.Build(t, oracle.Sized{Fragments: 1, RowsPerFragment: rows, VectorDim: 16, DeleteEvery: 7}.Scenario(), t.TempDir())
	}
	if rows%lanceMax != 0 {
		t.Fatalf("LANCED_SLICE_ROWS over %d must be a multiple of it", lanceMax)
	}
	path := oracle.Build(t, oracle.Sized{Fragments: rows / lanceMax, RowsPerFragment: lanceMax, VectorDim: 16}.Scenario(), t.TempDir())
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, func(e *policy.Effective) {
		e.Scope.Value = policy.ScopeRewrite
		e.Compaction.TargetRowsPerFragment.Value = uint64(rows) + 1
		e.Compaction.SliceBytes.Value = 1 << 50
	})
	if sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{}); err != nil || sum.FragmentsAdded != 1 {
		t.Fatalf("merge into one fragment: %v (%+v)", err, sum)
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id % 7 = 0"}})
	return path
}

// TestSliceOracle: one fragment real Lance wrote (vectors, every 7th row
// deleted) and then backfilled with add_columns (a second data file) is
// repacked, then rewritten, each in three row slices run as separate tasks
// and joined by page copy, through lanced compact's own path (the slices
// and the join run in one process, then one commit each). Real Lance reads
// the same rows after each, and keeps writing the table. The rewrite's
// slices copy the pages inside their ranges (the fragment has one file by
// then); the joins copy every page of the pieces of a file made of
// several, take a file made of one piece as it is, and re-encode none.
func TestSliceOracle(t *testing.T) {
	oracle.Require(t)
	rows := sliceRows(t, 300_000)
	ctx := context.Background()
	path := hugeFragment(t, rows)
	oracle.RunOps(t, path, []oracle.Op{{"op": "add_columns", "columns": []map[string]string{{"name": "doubled", "value_sql": "id * 2"}}}})
	want := oracle.Digest(oracle.Scan(t, path, 0, nil))
	before := oracle.Inspect(t, path, 0)
	if before.Fragments != 1 || before.DataFiles != 2 {
		t.Fatalf("want one fragment of two data files, have %+v", before)
	}

	sliced := func(scope string, tune func(*policy.Effective)) *engine.Summary {
		t.Helper()
		tbl, m := tabletest.Open(t, "file://"+path)
		fb := m.PB.GetFragments()[0]
		var bytes uint64
		for _, df := range fb.GetFiles() {
			bytes += df.GetFileSizeBytes()
		}
		p := planFor(t, path, m, func(e *policy.Effective) {
			e.Scope.Value = scope
			e.Compaction.SliceBytes.Value = bytes/3 + 1
			if tune != nil {
				tune(e)
			}
		})
		tasks := p.Tasks()
		if len(tasks) != 3 || tasks[0].Slice == nil {
			t.Fatalf("%s: want 3 slice tasks, plan has %d: %+v", scope, len(tasks), p.Decisions)
		}
		sum, err := engine.Compact(ctx, tbl, m, tasks, engine.CompactOptions{})
		if err != nil {
			t.Fatalf("%s: compact: %v (%+v)", scope, err, sum)
		}
		if len(sum.VersionsCommitted) != 1 || sum.TasksCommitted != 1 {
			t.Fatalf("%s: want one commit of the join, got %+v", scope, sum)
		}
		// The join copied every page of the pieces and decoded nothing.
		if sum.Pages.Copied.Pages == 0 || sum.Pages.Copied.Bytes == 0 || sum.FilesReencoded != 0 {
			t.Fatalf("%s: join did not page-copy the pieces: %+v", scope, sum)
		}
		if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
			t.Fatalf("%s: real Lance reads different rows:\nbefore %v\nafter  %v", scope, want, got)
		}
		return sum
	}

	rp := sliced(policy.ScopeRepack, func(e *policy.Effective) { e.Repack.MaxDataFilesPerFragment.Value = 1 })
	afterRepack := oracle.Inspect(t, path, 0)
	if afterRepack.Fragments != 1 || afterRepack.DataFiles != 1 || afterRepack.DeletedRows != before.DeletedRows {
		t.Fatalf("repack: %+v, before %+v", afterRepack, before)
	}
	target := uint64(rows) * 2 / 5 // the rewrite writes 3 fragments
	rw := sliced(policy.ScopeRewrite, func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = target })
	after := oracle.Inspect(t, path, 0)
	if after.Fragments != 3 || after.DeletedRows != 0 || after.Rows != before.Rows {
		t.Fatalf("rewrite: %+v, before %+v", after, before)
	}
	if rw.FragmentsAdded != 3 || rw.FragmentsRemoved != 1 {
		t.Fatalf("rewrite summary: %+v", rw)
	}
	// The last new fragment's rows lie in the last slice: its one piece is
	// the file (adopted, not copied), and it stayed when the slices'
	// other pieces were deleted (real Lance read it above). Every repack
	// file has a piece from each slice.
	if rw.Pages.Adopted.Pages != 1 || rp.Pages.Adopted.Pages != 0 {
		t.Fatalf("want 1 adopted piece in the rewrite, 0 in the repack: %+v / %+v", rw.Pages, rp.Pages)
	}
	ops := []oracle.Op{
		{"op": "add", "rows": 50, "seed": 7},
		{"op": "delete", "where": "id % 11 = 3"},
		{"op": "optimize"},
		{"op": "count_rows"},
	}
	if res := oracle.RunOps(t, path, ops); len(res) != len(ops) {
		t.Fatalf("ops: %d results", len(res))
	}
	t.Logf("%d rows; repack joined %d pages (%d bytes); rewrite joined %d pages (%d bytes)",
		before.Rows, rp.Pages.Copied.Pages, rp.Pages.Copied.Bytes, rw.Pages.Copied.Pages, rw.Pages.Copied.Bytes)
}

// TestSliceStableRowIDsOracle: on a table with stable row ids, a rewrite in
// three slices keeps every row's id: real Lance's _rowid column reads the
// same after the join's commit, and so do the rows.
func TestSliceStableRowIDsOracle(t *testing.T) {
	oracle.Require(t)
	opts := oracle.Options{StorageOptions: map[string]string{"new_table_enable_stable_row_ids": "true"}}
	path := oracle.Build(t, oracle.Sized{Fragments: 1, RowsPerFragment: 200_000, VectorDim: 16, DeleteEvery: 7}.Scenario(), t.TempDir(), opts)
	want := oracle.Digest(oracle.Scan(t, path, 0, nil))
	wantIDs := oracle.Digest(oracle.ScanWith(t, path, oracle.ScanOptions{WithRowID: true}))["_rowid"]
	if wantIDs == "" {
		t.Fatal("no _rowid column in real Lance's scan")
	}
	tbl, m := tabletest.Open(t, "file://"+path)
	var bytes uint64
	for _, df := range m.PB.GetFragments()[0].GetFiles() {
		bytes += df.GetFileSizeBytes()
	}
	p := planFor(t, path, m, func(e *policy.Effective) { e.Compaction.SliceBytes.Value = bytes/3 + 1 })
	if tasks := p.Tasks(); len(tasks) != 3 || tasks[0].Slice == nil {
		t.Fatalf("want 3 slices: %+v", p.Decisions)
	}
	sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{})
	if err != nil || sum.TasksCommitted != 1 || sum.Pages.Copied.Pages == 0 {
		t.Fatalf("compact: %v (%+v)", err, sum)
	}
	if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
		t.Fatal("real Lance reads different rows after the sliced rewrite")
	}
	if got := oracle.Digest(oracle.ScanWith(t, path, oracle.ScanOptions{WithRowID: true}))["_rowid"]; got != wantIDs {
		t.Fatal("stable row ids changed in the sliced rewrite")
	}
	if r := oracle.Inspect(t, path, 0); r.DeletedRows != 0 || r.Fragments != 1 {
		t.Fatalf("after: %+v", r)
	}
}

// TestSliceMaxBytesOracle: a rewrite of one fragment (every 7th row
// deleted) in three row slices under max_bytes_per_file: the slices cut the
// new fragments at the same rows, so the join writes several fragments of
// about that many bytes each (without the limit it writes one), by page
// copy; real Lance reads the same rows.
func TestSliceMaxBytesOracle(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, oracle.Sized{Fragments: 1, RowsPerFragment: 200_000, VectorDim: 16, DeleteEvery: 7}.Scenario(), t.TempDir())
	want := oracle.Digest(oracle.Scan(t, path, 0, nil))
	live := oracle.Inspect(t, path, 0).Rows
	tbl, m := tabletest.Open(t, "file://"+path)
	var bytes uint64
	for _, df := range m.PB.GetFragments()[0].GetFiles() {
		bytes += df.GetFileSizeBytes()
	}
	maxBytes := bytes / 5
	p := planFor(t, path, m, func(e *policy.Effective) {
		e.Compaction.SliceBytes.Value = bytes/3 + 1
		e.Compaction.MaxBytesPerFile.Value = maxBytes
	})
	if tasks := p.Tasks(); len(tasks) != 3 || tasks[0].Slice == nil {
		t.Fatalf("want 3 slices: %+v", p.Decisions)
	}
	sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{})
	if err != nil || sum.TasksCommitted != 1 || sum.Pages.Copied.Pages == 0 || sum.FilesReencoded != 0 {
		t.Fatalf("compact: %v (%+v)", err, sum)
	}
	if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
		t.Fatal("real Lance reads different rows after the sliced rewrite")
	}
	_, after := tabletest.Open(t, "file://"+path)
	frags := after.PB.GetFragments()
	var rows uint64
	for _, f := range frags {
		rows += f.GetPhysicalRows()
		if sz := f.GetFiles()[0].GetFileSizeBytes(); sz > maxBytes*11/10 {
			t.Errorf("fragment %d: file of %d bytes, max_bytes_per_file %d", f.GetId(), sz, maxBytes)
		}
	}
	if len(frags) < 4 || rows != uint64(live) || anyDeleted(after.PB.GetFragments()) {
		t.Fatalf("want at least 4 fragments holding the %d live rows, none with deletions; have %d fragments of %d rows", live, len(frags), rows)
	}
	t.Logf("%d live rows in %d fragments (limit %d bytes); %d pages copied", live, len(frags), maxBytes, sum.Pages.Copied.Pages)
}

// anyDeleted says whether any fragment has a deletion file.
func anyDeleted(frags []*tablepb.DataFragment) bool {
	for _, f := range frags {
		if f.GetDeletionFile() != nil {
			return true
		}
	}
	return false
}

// TestSliceRepackColumnwiseOracle: the slices of a repack merging a
// fragment's two data files (real Lance's file and its add_columns
// backfill) cut their rows out of both files page by page and merge them
// column-wise (FilterConcat, Columnwise): each slice's result shows pages
// copied or cut and none re-encoded whole from a decode of the range; the
// joined repack reads the same in real Lance.
func TestSliceRepackColumnwiseOracle(t *testing.T) {
	oracle.Require(t)
	path := hugeFragment(t, 200_000)
	oracle.RunOps(t, path, []oracle.Op{{"op": "add_columns", "columns": []map[string]string{{"name": "doubled", "value_sql": "id * 2"}}}})
	want := oracle.Digest(oracle.Scan(t, path, 0, nil))
	tbl, m := tabletest.Open(t, "file://"+path)
	var bytes uint64
	for _, df := range m.PB.GetFragments()[0].GetFiles() {
		bytes += df.GetFileSizeBytes()
	}
	p := planFor(t, path, m, func(e *policy.Effective) {
		e.Scope.Value = policy.ScopeRepack
		e.Repack.MaxDataFilesPerFragment.Value = 1
		e.Compaction.SliceBytes.Value = bytes/3 + 1
	})
	tasks := p.Tasks()
	if len(tasks) != 3 || tasks[0].Slice == nil || tasks[0].Slice.Repack == nil {
		t.Fatalf("want 3 repack slices: %+v", p.Decisions)
	}
	for _, st := range tasks {
		out, err := engine.ExecuteSlice(context.Background(), tbl, m.PB, st.Slice)
		if err != nil {
			t.Fatalf("slice %d: %v", st.Slice.Index, err)
		}
		ps := out.Paths
		if len(out.Pieces) != 1 || ps.Copied.Pages+ps.Filtered.Pages+ps.Rechunked.Pages == 0 || ps.ColsCopied == 0 {
			t.Fatalf("slice %d: pieces %d, pages %+v: want one piece made page by page", st.Slice.Index, len(out.Pieces), ps)
		}
		t.Logf("slice %d: %+v", st.Slice.Index, ps)
	}
	sum, err := engine.Compact(context.Background(), tbl, m, tasks, engine.CompactOptions{})
	if err != nil || sum.TasksCommitted != 1 {
		t.Fatalf("compact: %v (%+v)", err, sum)
	}
	if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
		t.Fatal("real Lance reads different rows after the sliced repack")
	}
	if r := oracle.Inspect(t, path, 0); r.Fragments != 1 || r.DataFiles != 1 {
		t.Fatalf("after: %+v", r)
	}
}
