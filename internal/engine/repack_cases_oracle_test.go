package engine_test

// Column repack execution and commit cases (repacks next to rewrites,
// deletes and indices), each judged by real Lance.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
	"google.golang.org/protobuf/proto"
)

var ctx = context.Background()

func fragIDs(m *format.Manifest) []uint64 {
	var ids []uint64
	for _, f := range m.PB.GetFragments() {
		ids = append(ids, f.GetId())
	}
	return ids
}

func filesPerFragment(m *format.Manifest) []int {
	var n []int
	for _, f := range m.PB.GetFragments() {
		n = append(n, len(f.GetFiles()))
	}
	return n
}

// digestInOrder is real Lance's per-column digest of the table in scan order.
func digestInOrder(t *testing.T, path string, version uint64) map[string]string {
	t.Helper()
	return oracle.Digest(oracle.Scan(t, path, version, nil))
}

func repackPlan(t *testing.T, path string, m *format.Manifest, max uint64) *plan.Plan {
	t.Helper()
	p := planFor(t, path, m, repackOnly(max))
	if len(p.Repacks) == 0 {
		t.Fatalf("no repack planned: %+v", p.Decisions)
	}
	return p
}

func dataFileExists(t *testing.T, path, key string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(path, key))
	return err == nil
}

func Test_repack_collapses_backfilled_files(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "backfill", t.TempDir())
	want := digestInOrder(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	if got := filesPerFragment(m); !slices.Equal(got, []int{3, 3, 3}) {
		t.Fatalf("backfill fixture has %v files per fragment", got)
	}
	sum, err := engine.Compact(ctx, tbl, m, repackPlan(t, path, m, 1).Tasks(), engine.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.VersionsCommitted) != 1 {
		t.Fatalf("want one commit, got %v", sum.VersionsCommitted)
	}
	_, m2 := tabletest.Open(t, "file://"+path)
	if got := filesPerFragment(m2); !slices.Equal(got, []int{1, 1, 1}) {
		t.Fatalf("files per fragment after repack: %v", got)
	}
	if !slices.Equal(fragIDs(m2), fragIDs(m)) {
		t.Fatalf("fragment ids changed: %v -> %v", fragIDs(m), fragIDs(m2))
	}
	if got := digestInOrder(t, path, 0); !maps_equal(got, want) {
		t.Fatalf("values changed:\nwant %v\ngot  %v", want, got)
	}
	tbl3, m3 := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m3, repackOnly(1))
	sum2, err := engine.Compact(ctx, tbl3, m3, p.Tasks(), engine.CompactOptions{})
	if err != nil || len(sum2.VersionsCommitted) != 0 {
		t.Fatalf("second run committed %v (err %v)", sum2.VersionsCommitted, err)
	}
}

func maps_equal(a, b map[string]string) bool {
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

func Test_repack_keeps_deletions(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "backfill", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id % 3 = 0"}})
	before := oracle.Inspect(t, path, 0)
	want := digestInOrder(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	if _, err := engine.Compact(ctx, tbl, m, repackPlan(t, path, m, 1).Tasks(), engine.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	after := oracle.Inspect(t, path, 0)
	if after.Rows != before.Rows || !maps_equal(digestInOrder(t, path, 0), want) {
		t.Fatalf("rows %d -> %d or values changed", before.Rows, after.Rows)
	}
	_, m2 := tabletest.Open(t, "file://"+path)
	for i, f := range m2.PB.GetFragments() {
		if !proto.Equal(f.GetDeletionFile(), m.PB.GetFragments()[i].GetDeletionFile()) {
			t.Fatalf("fragment %d deletion file changed", f.GetId())
		}
	}
	n := oracle.RunOps(t, path, []oracle.Op{{"op": "count_rows", "where": "id % 3 = 0"}})
	var res struct{ Count int64 }
	if err := json.Unmarshal(n[0], &res); err != nil || res.Count != 0 {
		t.Fatalf("deleted rows came back: %s", n[0])
	}
}

func Test_repack_drops_file_left_with_only_dropped_columns(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "dropped_column", t.TempDir())
	want := digestInOrder(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	if _, err := engine.Compact(ctx, tbl, m, repackPlan(t, path, m, 1).Tasks(), engine.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	_, m2 := tabletest.Open(t, "file://"+path)
	st := format.ComputeLayoutStats(m2.PB)
	for _, f := range st.Fragments {
		if f.DataFiles != 1 {
			t.Fatalf("fragment %d has %d data files", f.ID, f.DataFiles)
		}
		for _, df := range f.Files {
			if df.DeadFields != 0 {
				t.Fatalf("fragment %d file %s still carries %d dead fields", f.ID, df.Path, df.DeadFields)
			}
		}
	}
	if !maps_equal(digestInOrder(t, path, 0), want) {
		t.Fatal("values changed")
	}
}

// indexedBackfill: the oracle's indexed table (BTree on id, IVF_PQ on vec,
// covering fragments 0-1) with two backfills, so every fragment has three
// files and the indexed columns sit in the first.
func indexedBackfill(t *testing.T) string {
	path := lanceTable(t, "indexed",
		oracle.Op{"op": "add_columns", "columns": []map[string]string{{"name": "b1", "value_sql": "id * 2"}}},
		oracle.Op{"op": "add_columns", "columns": []map[string]string{{"name": "b2", "value_sql": "concat(category, '-x')"}}},
	)
	return path
}

func indexQueries(t *testing.T, path string) []json.RawMessage {
	t.Helper()
	vec := make([]float64, 32)
	for i := range vec {
		vec[i] = float64(i%5) * 0.1
	}
	return oracle.RunOps(t, path, []oracle.Op{
		{"op": "query", "where": "id = 1234 OR id = 7", "columns": []string{"id", "b1", "b2"}},
		{"op": "vector_search", "vector": vec, "k": 10, "columns": []string{"id", "b2"}},
		{"op": "vector_search", "vector": vec, "k": 10, "where": "id < 500", "columns": []string{"id"}},
	})
}

func stripVersions(rs []json.RawMessage) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		var m map[string]any
		_ = json.Unmarshal(r, &m)
		delete(m, "version")
		delete(m, "elapsed_ms")
		b, _ := json.Marshal(m)
		out[i] = string(b)
	}
	return out
}

func Test_repack_keeps_scalar_and_vector_indices(t *testing.T) {
	// A repack keeps both a scalar index and a vector index usable.
	oracle.Require(t)
	path := indexedBackfill(t)
	beforeQ := stripVersions(indexQueries(t, path))
	before := oracle.Inspect(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	if _, err := engine.Compact(ctx, tbl, m, repackPlan(t, path, m, 1).Tasks(), engine.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	_, m2 := tabletest.Open(t, "file://"+path)
	if !proto.Equal(m.Indices, m2.Indices) {
		t.Fatalf("index metadata changed:\n%v\n%v", m.Indices, m2.Indices)
	}
	after := oracle.Inspect(t, path, 0)
	if len(after.Indices) != len(before.Indices) {
		t.Fatalf("indices %v -> %v", before.Indices, after.Indices)
	}
	for i := range before.Indices {
		if before.Indices[i].IndexedRows != after.Indices[i].IndexedRows || before.Indices[i].UnindexedRows != after.Indices[i].UnindexedRows {
			t.Fatalf("index %s coverage %d/%d -> %d/%d", before.Indices[i].Name, before.Indices[i].IndexedRows, before.Indices[i].UnindexedRows, after.Indices[i].IndexedRows, after.Indices[i].UnindexedRows)
		}
	}
	if got := stripVersions(indexQueries(t, path)); !slices.Equal(got, beforeQ) {
		t.Fatalf("query results changed:\n%v\n%v", beforeQ, got)
	}
}

func Test_compaction_rewrites_and_repacks_in_one_run(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "backfill", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 50, "seed": 1}, {"op": "add", "rows": 50, "seed": 2}})
	wantDigest, wantRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, func(e *policy.Effective) {
		e.Repack.MaxDataFilesPerFragment.Value = 1
		e.Compaction.TargetRowsPerFragment.Value = 300 // the 300-row fragments are not small
	})
	if len(p.Rewrites) != 1 || len(p.Repacks) != 3 {
		t.Fatalf("plan: %d rewrites, %d repacks: %+v", len(p.Rewrites), len(p.Repacks), p.Decisions)
	}
	sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.VersionsCommitted) != 2 {
		t.Fatalf("want two versions, got %v", sum.VersionsCommitted)
	}
	v1, err := tbl.Load(ctx, sum.VersionsCommitted[0])
	if err != nil {
		t.Fatal(err)
	}
	v2, err := tbl.Load(ctx, sum.VersionsCommitted[1])
	if err != nil {
		t.Fatal(err)
	}
	if v1.Txn.GetRewrite() == nil || v2.Txn.GetUpdate().GetUpdateMode() != tablepb.Transaction_REWRITE_COLUMNS {
		t.Fatalf("commits are %s then %s", format.OperationName(v1.Txn), format.OperationName(v2.Txn))
	}
	gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	if gotRows != wantRows || gotDigest != wantDigest {
		t.Fatalf("rows changed: %d -> %d", wantRows, gotRows)
	}
}

func Test_commit_rejects_a_fragment_in_both_kinds_of_task(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "backfill", t.TempDir())
	tbl, m := tabletest.Open(t, "file://"+path)
	p := repackPlan(t, path, m, 1)
	tasks := append(p.Tasks(), job.Task{Rewrite: &job.RewriteTask{Table: path, ReadVersion: m.Version(), Fragments: []uint64{p.Repacks[0].Fragment}, TargetRowsPerFragment: 1 << 20}})
	_, err := engine.Compact(ctx, tbl, m, tasks, engine.CompactOptions{})
	if !errors.Is(err, job.ErrMixedTasks) {
		t.Fatalf("want job.ErrMixedTasks, got %v", err)
	}
	if latest, _ := tbl.LatestVersion(ctx); latest != m.Version() {
		t.Fatalf("something was committed: version %d -> %d", m.Version(), latest)
	}
}

func Test_repack_tasks_run_distributed(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "backfill", t.TempDir())
	want := digestInOrder(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	p := repackPlan(t, path, m, 1)
	var outs []*job.RepackOutput
	for _, task := range p.Tasks() {
		wire, err := json.Marshal(task) // coordinator -> worker
		if err != nil {
			t.Fatal(err)
		}
		var got job.Task
		if err := json.Unmarshal(wire, &got); err != nil {
			t.Fatal(err)
		}
		out, err := engine.ExecuteRepack(ctx, tbl, m.PB, got.Repack)
		if err != nil {
			t.Fatal(err)
		}
		wire, err = json.Marshal(job.Result{Repack: out}) // worker -> coordinator
		if err != nil {
			t.Fatal(err)
		}
		var res job.Result
		if err := json.Unmarshal(wire, &res); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res.Repack)
	}
	rep, err := engine.CommitJobs(ctx, tbl, m.Version(), job.RepackTxn, job.List(outs), engine.CommitOptions{})
	if err != nil || rep.Version == 0 || len(rep.Committed) != len(outs) {
		t.Fatalf("commit: %+v %v", rep, err)
	}
	if !maps_equal(digestInOrder(t, path, 0), want) {
		t.Fatal("values changed")
	}
}

// executeRepacks runs the repack plan of a backfill table without committing.
func executeRepacks(t *testing.T, tbl *table.Table, m *format.Manifest, p *plan.Plan) []*job.RepackOutput {
	t.Helper()
	var outs []*job.RepackOutput
	for i := range p.Repacks {
		out, err := engine.ExecuteRepack(ctx, tbl, m.PB, &p.Repacks[i])
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	return outs
}

// concurrentCase: execute repacks at V, let real Lance run ops (V+1...),
// then commit, and compare with a control copy where only Lance's ops ran.
func concurrentCase(t *testing.T, ops []oracle.Op) (committed *engine.CommitReport, path string) {
	t.Helper()
	oracle.Require(t)
	dir := t.TempDir()
	path = oracle.Build(t, "backfill", filepath.Join(dir, "a"))
	control := oracle.Build(t, "backfill", filepath.Join(dir, "b"))
	tbl, m := tabletest.Open(t, "file://"+path)
	outs := executeRepacks(t, tbl, m, repackPlan(t, path, m, 1))
	oracle.RunOps(t, path, ops)
	oracle.RunOps(t, control, ops)
	rep, err := engine.CommitJobs(ctx, tbl, m.Version(), job.RepackTxn, job.List(outs), engine.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, wantRows := rowSetDigest(oracle.Scan(t, control, 0, nil))
	gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	if gotRows != wantRows || gotDigest != wantDigest {
		t.Fatalf("rows differ from the Lance-only control: %d vs %d", gotRows, wantRows)
	}
	// Whatever was not committed left no file behind.
	for _, d := range rep.Dropped {
		for _, o := range outs {
			if o.Task().Key() == d.Key {
				for _, k := range o.Written() {
					if dataFileExists(t, path, k) {
						t.Fatalf("dropped task left %s", k)
					}
				}
			}
		}
	}
	return rep, path
}

func Test_repack_against_concurrent_delete(t *testing.T) {
	rep, path := concurrentCase(t, []oracle.Op{{"op": "delete", "where": "id % 4 = 1"}})
	if rep.Version == 0 || len(rep.Committed) != 3 || rep.Rebased == 0 {
		t.Fatalf("repack should rebase over a delete and commit: %+v", rep)
	}
	_, m := tabletest.Open(t, "file://"+path)
	for _, f := range m.PB.GetFragments() {
		if len(f.GetFiles()) != 1 || f.GetDeletionFile() == nil {
			t.Fatalf("fragment %d: %d files, deletion %v", f.GetId(), len(f.GetFiles()), f.GetDeletionFile())
		}
	}
}

func Test_repack_against_concurrent_update_of_moved_column(t *testing.T) {
	// Lance's update on an address-row-id table deletes the old rows and
	// appends new ones: the repacked fragment only gains deletions.
	rep, _ := concurrentCase(t, []oracle.Op{{"op": "update", "where": "id < 30", "values_sql": map[string]string{"label": "'updated'"}}})
	if rep.Version == 0 {
		t.Fatalf("nothing committed: %+v", rep)
	}
}

func Test_repack_against_concurrent_drop(t *testing.T) {
	// Dropping a moved column removes its file from every fragment: the
	// repacks read files that are gone and must not commit.
	rep, path := concurrentCase(t, []oracle.Op{{"op": "drop_columns", "columns": []string{"doubled"}}})
	if rep.Version != 0 || len(rep.Dropped) != 3 {
		t.Fatalf("repack over a dropped moved column must retry, got %+v", rep)
	}
	if r := oracle.Inspect(t, path, 0); r.Rows != 900 {
		t.Fatalf("rows %d", r.Rows)
	}
}

// The gatekeeper's stale-rewrite test: execute a rewrite at version V, real
// Lance deletes a row at V+1, our commit conflicts and the row stays deleted.
func Test_stale_rewrite_keeps_concurrent_delete(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "appends", t.TempDir())
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, nil)
	if len(p.Rewrites) == 0 {
		t.Fatal("no rewrite planned")
	}
	var outs []*job.RewriteOutput
	for i := range p.Rewrites {
		out, err := engine.ExecuteRewrite(ctx, tbl, m.PB, &p.Rewrites[i])
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id = 5"}})
	rep, err := engine.CommitJobs(ctx, tbl, m.Version(), job.RewriteTxn, job.List(outs), engine.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != 0 || len(rep.Dropped) != len(outs) || rep.Dropped[0].Verdict != job.Retryable {
		t.Fatalf("stale rewrite must conflict: %+v", rep)
	}
	r := oracle.Inspect(t, path, 0)
	if r.Rows != 1199 {
		t.Fatalf("rows %d, want 1199", r.Rows)
	}
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "count_rows", "where": "id = 5"}})
	var c struct{ Count int64 }
	if err := json.Unmarshal(res[0], &c); err != nil || c.Count != 0 {
		t.Fatalf("deleted row is back: %s", res[0])
	}
	for _, o := range outs {
		for _, k := range o.Written() {
			if dataFileExists(t, path, k) {
				t.Fatalf("abandoned output %s left behind", k)
			}
		}
	}
}

// TestCompactExecutesTasksAtOnceOracle: with Workers 3, the three repack
// tasks of the backfill table (one per fragment) execute at once (all three
// start before the first one ends) and commit as one version; real Lance
// reads the same values in the same order. With Workers 1 they run one
// after the other.
func TestCompactExecutesTasksAtOnceOracle(t *testing.T) {
	oracle.Require(t)
	for _, workers := range []int{3, 1} {
		path := oracle.Build(t, "backfill", t.TempDir())
		want := digestInOrder(t, path, 0)
		tbl, m := tabletest.Open(t, "file://"+path)
		p := repackPlan(t, path, m, 1)
		if len(p.Repacks) != 3 {
			t.Fatalf("%d repacks planned, want one per fragment (3)", len(p.Repacks))
		}
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{Workers: workers, Logger: log})
		if err != nil || sum.TasksCommitted != 3 || len(sum.VersionsCommitted) != 1 {
			t.Fatalf("workers %d: %v, summary %+v", workers, err, sum)
		}
		if got := digestInOrder(t, path, 0); !maps_equal(got, want) {
			t.Fatalf("workers %d: values changed:\nwant %v\ngot  %v", workers, want, got)
		}
		// how many tasks had started when the first one ended
		started := 0
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec struct{ Msg string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec.Msg == "task executed" {
				break
			}
			if rec.Msg == "task started" {
				started++
			}
		}
		if want := min(workers, 3); started != want {
			t.Fatalf("workers %d: %d tasks started before the first ended, want %d\n%s", workers, started, want, logs.String())
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
