package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// writerOps is a deterministic stream of real-Lance writes: appends with
// explicit ids, deletes and updates by predicate. Run once on the table
// lanced maintains and once on a control copy, the two must end equal.
func writerOps(n int) []oracle.Op {
	var ops []oracle.Op
	for i := 0; i < n; i++ {
		ops = append(ops, soakDataOps(i, 20, i+100, 10000+i*20)...)
	}
	return ops
}

// soakDataOps is step i of a soak writer: an append of rows rows (seed,
// ids from idStart), every third step a delete and every fourth an update,
// by predicates that depend on i.
func soakDataOps(i, rows, seed, idStart int) []oracle.Op {
	ops := []oracle.Op{{"op": "add", "rows": rows, "seed": seed, "id_start": idStart}}
	if i%3 == 1 {
		ops = append(ops, oracle.Op{"op": "delete", "where": "id % 17 = " + itoa(i%17)})
	}
	if i%4 == 2 {
		ops = append(ops, oracle.Op{"op": "update", "where": "id % 13 = " + itoa(i%13), "values_sql": map[string]string{"value": "value + 1"}})
	}
	return ops
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// TestSoakAgainstLanceWriter: a real-Lance writer appends, deletes and
// updates continuously while lanced runs compaction cycles on the same
// table. Afterwards the table equals a control copy that only the writer
// touched (every acknowledged write present, no deleted row back), and
// every conflict ended rebased, retried or abandoned.
func TestSoakAgainstLanceWriter(t *testing.T) {
	oracle.Require(t)
	if testing.Short() {
		t.Skip("soak")
	}
	dir := t.TempDir()
	path := oracle.Build(t, "appends", filepath.Join(dir, "a"))
	control := oracle.Build(t, "appends", filepath.Join(dir, "b"))
	ops := writerOps(45)

	done := make(chan error, 1)
	var retries int
	go func() {
		// Real Lance gives up an update after 30 s of conflicting with
		// compactions that land first (it retries a Rewrite-conflicted
		// update, as its conflict resolver says); the op committed nothing
		// and the writer retries it, as an application would.
		r, err := oracle.RunOpsRetryingConflicts(t, path, ops, 5)
		retries = r
		done <- err
	}()
	run := soakCompactLoop(t, path, done, 30, 0)
	t.Logf("writer ops retried after a retryable conflict: %d", retries)
	oracle.RunOps(t, control, ops)
	wantDigest, wantRows := rowSetDigest(oracle.Scan(t, control, 0, nil))
	gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	if gotRows != wantRows || gotDigest != wantDigest {
		t.Fatalf("after the soak: %d rows, control %d (digest equal: %v)", gotRows, wantRows, gotDigest == wantDigest)
	}
	if run.total.TasksCommitted == 0 {
		t.Fatal("lanced committed nothing during the soak")
	}
	logSoak(t, run)
}

func logSoak(t *testing.T, r soakRun) {
	t.Helper()
	total := r.total
	t.Logf("%d cycles, %d versions committed by lanced, %d tasks committed, %d stale; conflicts: %d rebased, %d retryable (dropped), %d incompatible",
		r.cycles, len(total.VersionsCommitted), total.TasksCommitted, total.TasksStale, total.Conflicts.Rebased, total.Conflicts.Retryable, total.Conflicts.Incompatible)
}

// soakCompactLoop runs lanced compaction cycles (default policy, small
// target fragments) on path until the writer reports on done and at least
// minCycles cycles, and afterCycles cycles after the writer finished, ran.
// A failing writer, cycle or task fails the test.
func soakCompactLoop(t *testing.T, path string, done <-chan error, minCycles, afterCycles int) soakRun {
	t.Helper()
	var r soakRun
	total := &r.total
	after, writerDone := 0, false
	tune := func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 400 }
	for r.cycles < minCycles || !writerDone || after < afterCycles {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("real-Lance writer failed: %v", err)
			}
			writerDone = true
		default:
		}
		tbl, m := tabletest.Open(t, "file://"+path)
		p := planFor(t, path, m, tune)
		sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{
			Commit: engine.CommitOptions{MaxRetries: 6, BackoffMin: 5 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		})
		if err != nil {
			t.Fatalf("cycle %d: %v", r.cycles, err)
		}
		if sum.TasksFailed != 0 {
			t.Fatalf("cycle %d: failed tasks: %v", r.cycles, sum.Errors)
		}
		total.Add(sum)
		if sum.TasksCommitted > 0 && slices.ContainsFunc(p.Indices, func(d plan.IndexDecision) bool { return d.Action == plan.IndexRemap }) {
			r.remapped++
			r.remapReads = append(r.remapReads, m.PB.GetVersion())
		}
		r.cycles++
		if writerDone {
			after++
		}
		time.Sleep(50 * time.Millisecond)
		if r.cycles > 2000 {
			t.Fatal("writer did not finish")
		}
	}
	return r
}

// soakRun is what soakCompactLoop did: the summed summaries, the cycles,
// how many cycles committed a plan that remapped indices and the versions
// those plans read.
type soakRun struct {
	total      engine.Summary
	cycles     int
	remapped   int
	remapReads []uint64
}

// remapsSince counts the remapping cycles whose plan read version v or a
// later one. A cycle that started before the writer's last op returned but
// read the version that op committed counts: what matters is which table
// state the remap saw, not when the writer's goroutine reported back.
func (r soakRun) remapsSince(v uint64) int {
	n := 0
	for _, read := range r.remapReads {
		if read >= v {
			n++
		}
	}
	return n
}

// lastWriterVersion is the newest version of the table at path that
// lanced did not write (its writer_version names another library).
func lastWriterVersion(t *testing.T, path string) uint64 {
	t.Helper()
	tbl, _ := tabletest.Open(t, "file://"+path)
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, v := range vs {
		m, err := tbl.Load(ctx, v.Version)
		if err != nil {
			t.Fatal(err)
		}
		if m.PB.GetWriterVersion().GetLibrary() != table.WriterLibrary && v.Version > last {
			last = v.Version
		}
	}
	return last
}

// soakIndices are the indices of the index soak, created by real Lance
// with these names and options and rebuilt by its writer
// (createIndex(replace)) in this order.
var soakIndices = []oracle.Op{
	createIDIdx,
	{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx",
		"options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
	{"op": "create_index", "column": "body", "type": "fts", "name": "body_idx"},
	{"op": "create_index", "column": "body", "type": "fm", "name": "fm_idx"},
}

var soakIndexNames = []string{"body_idx", "fm_idx", "id_idx", "vec_idx"}

// indexWriterOps is writerOps with upserts, index rebuilds and Lance's
// optimize() (compaction plus index optimization) mixed in, ending with an
// optimize() and a few more writes, so that the final table has indexed
// and unindexed rows.
func indexWriterOps(n int) []oracle.Op {
	var ops []oracle.Op
	for i := 0; i < n; i++ {
		ops = append(ops, soakDataOps(i, 30, i+200, 20000+i*30)...)
		if i%5 == 3 {
			ops = append(ops, oracle.Op{"op": "merge_insert", "on": "id", "rows": 20, "seed": i + 300, "id_start": 20000 + (i-2)*30})
		}
		if i%6 == 5 {
			ix := maps.Clone(soakIndices[(i/6)%len(soakIndices)])
			ix["replace"] = true
			ops = append(ops, ix)
		}
		if i%7 == 6 {
			ops = append(ops, oracle.Op{"op": "optimize"})
		}
	}
	// After the last optimize() every row is indexed; a third of them is
	// then deleted, so lanced's last cycles rewrite indexed fragments.
	return append(ops,
		oracle.Op{"op": "optimize"},
		oracle.Op{"op": "add", "rows": 30, "seed": 997, "id_start": 20000 + n*30},
		oracle.Op{"op": "add", "rows": 30, "seed": 998, "id_start": 20030 + n*30},
		oracle.Op{"op": "update", "where": "id % 23 = 7", "values_sql": map[string]string{"value": "value - 1"}},
		oracle.Op{"op": "delete", "where": "id % 3 = 1"},
	)
}

// runIndexWriter applies ops with real Lance one at a time and, after each,
// has real Lance list the indices: every index must still be listed. A
// commit conflict (lanced's rewrite landed first; Lance retries data
// writes itself but not its own compaction or index build) is retried: the
// op did not commit. pause spaces the writes (lanced needs windows to
// commit between them). It returns how many ops were retried.
func runIndexWriter(ctx context.Context, path string, ops []oracle.Op, pause time.Duration) (int, error) {
	retried := 0
	for i, op := range ops {
		time.Sleep(pause)
		var res []json.RawMessage
		var err error
		for attempt := 0; ; attempt++ {
			res, err = oracle.RunOpsContext(ctx, path, []oracle.Op{op, {"op": "list_indices"}})
			if err == nil || attempt == 30 || !strings.Contains(strings.ToLower(err.Error()), "conflict") {
				break
			}
			retried++
			time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
		}
		if err != nil {
			return retried, fmt.Errorf("op %d %v: %w", i, op, err)
		}
		var li struct {
			Indices []struct {
				Name string `json:"name"`
			} `json:"indices"`
		}
		if err := json.Unmarshal(res[1], &li); err != nil {
			return retried, err
		}
		var names []string
		for _, ix := range li.Indices {
			names = append(names, ix.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, soakIndexNames) {
			return retried, fmt.Errorf("after op %d %v real Lance lists indices %v, want %v", i, op, names, soakIndexNames)
		}
	}
	return retried, nil
}

// TestSoakIndexedAgainstLanceWriter: the table carries a BTree on id, an
// IVF_PQ on vec and an FTS index on body. A real-Lance writer appends,
// deletes, updates, upserts, rebuilds one index after another
// (createIndex(replace)) and runs optimize() while lanced compacts in a
// loop with the default policy (indices remapped). Real Lance lists every
// index after every write. At the end the table equals a control that only
// the writer touched (same ops, no lanced); every index counts every row
// as indexed or unindexed and indexes at least the rows it indexes on the
// control (lanced's catch-up may index more); a BTree filter, FTS
// matches, substring queries (FM index) and exact vector searches return the same rows as on the
// control, through the indices (explainPlan); searches through the IVF_PQ
// (all partitions, refined) find the exact top 10 as well as on the
// control. LANCED_SOAK=1 runs a longer writer.
func TestSoakIndexedAgainstLanceWriter(t *testing.T) {
	oracle.Require(t)
	if testing.Short() {
		t.Skip("soak")
	}
	n := 21
	if os.Getenv("LANCED_SOAK") == "1" {
		n = 84
	}
	dir := t.TempDir()
	path := oracle.Build(t, "sized-4x500-v32-t8-d0", filepath.Join(dir, "a"))
	oracle.RunOps(t, path, soakIndices)
	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	ops := indexWriterOps(n)

	done := make(chan error, 1)
	var retried int
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		var err error
		retried, err = runIndexWriter(wctx, path, ops, 300*time.Millisecond)
		done <- err
	}()
	run := soakCompactLoop(t, path, done, 10, 3)
	if _, err := runIndexWriter(ctx, control, ops, 0); err != nil {
		t.Fatalf("control: %v", err)
	}

	wantDigest, wantRows := rowSetDigest(oracle.Scan(t, control, 0, nil))
	gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	if gotRows != wantRows || gotDigest != wantDigest {
		t.Fatalf("after the soak: %d rows, control %d (digest equal: %v)", gotRows, wantRows, gotDigest == wantDigest)
	}
	lastDelete := lastWriterVersion(t, path) // the writer's last op is a delete
	remappedAfter := run.remapsSince(lastDelete)
	if run.remapped == 0 || remappedAfter == 0 {
		t.Fatalf("lanced committed %d index remaps during the soak, %d read version %d (the writer's last delete) or later (%d cycles, %d tasks committed)", run.remapped, remappedAfter, lastDelete, run.cycles, run.total.TasksCommitted)
	}

	got, want := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if g := got.IndexNames(); !slices.Equal(g, soakIndexNames) {
		t.Fatalf("real Lance lists indices %v, want %v", g, soakIndexNames)
	}
	for _, name := range soakIndexNames {
		a, b := got.Index(t, name), want.Index(t, name)
		// lanced's catch-up may index rows the control leaves unindexed,
		// never the other way round.
		if a.IndexedRows < b.IndexedRows || a.IndexedRows+a.UnindexedRows != got.Rows || b.IndexedRows == 0 {
			t.Fatalf("%s indexStats %d indexed / %d unindexed of %d rows, control %d / %d of %d", name, a.IndexedRows, a.UnindexedRows, got.Rows, b.IndexedRows, b.UnindexedRows, want.Rows)
		}
	}

	qs := soakQueries(20000 + n*30)
	gq, wq := oracle.Queries(t, path, qs), oracle.Queries(t, control, qs)
	for i, q := range qs {
		if !slices.Equal(gq[i].IDs(), wq[i].IDs()) || len(wq[i].IDs()) == 0 {
			t.Fatalf("%v: %d rows, control %d (ids %v vs %v)", q, len(gq[i].IDs()), len(wq[i].IDs()), gq[i].IDs(), wq[i].IDs())
		}
		if q["explain"] == true {
			kind := "ScalarIndexQuery"
			switch {
			case q["op"] == "fts_search":
				kind = "MatchQuery"
			case q["fm"] == true:
				kind = "fm_idx"
			}
			if !strings.Contains(gq[i].Plan, kind) {
				t.Fatalf("%v: plan has no %s:\n%s", q, kind, gq[i].Plan)
			}
		}
	}
	// The two IVF_PQ indices were trained apart (createIndex(replace) on
	// different layouts), so compare recall against an exact search, with
	// every partition probed and the candidates refined.
	vc := remapEngineCase{typ: "ivf_pq", refine: 50}
	vq := remapQueries(16)
	recall, plans := recallAt10(t, path, vq, vc)
	recallControl, _ := recallAt10(t, control, vq, vc)
	for _, pl := range plans {
		if !strings.Contains(pl, "ANN") {
			t.Fatalf("vector search does not go through the index:\n%s", pl)
		}
	}
	if recall < 0.95 || recall+0.05 < recallControl {
		t.Fatalf("recall@10 through vec_idx %.3f, control %.3f", recall, recallControl)
	}
	t.Logf("writer: %d ops (%d retried after a conflict); rows %d; recall@10 %.3f, control %.3f", len(ops), retried, gotRows, recall, recallControl)
	for _, name := range soakIndexNames {
		a := got.Index(t, name)
		t.Logf("%s: %d indexed, %d unindexed, %d segments", name, a.IndexedRows, a.UnindexedRows, a.Segments)
	}
	t.Logf("%d cycles committed a rewrite with remapped indices, %d of them read the writer's last delete or later", run.remapped, remappedAfter)
	logSoak(t, run)
}

// soakQueries: filters the BTree on id serves, FTS matches, and exact
// vector searches (the same rows on any two equal tables).
// The filters include ids of the writer's last appends (start last), which
// no loop delete reaches however long the writer ran.
func soakQueries(last int) []oracle.Op {
	in := fmt.Sprintf("id IN (3, 77, 1001, 1999, 20005, 20100, 20333, %d, %d, %d, %d)", last, last+2, last+29, last+33)
	ops := []oracle.Op{
		{"op": "query", "where": in, "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": fmt.Sprintf("id >= 20150 AND id < %d", last+45), "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": fmt.Sprintf("id >= %d AND id < %d", last-600, last-300), "columns": []string{"id"}},
	}
	for _, w := range []string{"river", "harbour", "copper winter", "table"} {
		ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 100000, "columns": []string{"id"}, "explain": true})
	}
	// Substrings through the FM index (within and across words).
	for _, w := range []string{"iver", "r harb", "copper w"} {
		ops = append(ops, oracle.Op{"op": "query", "where": "contains(body, '" + w + "')", "columns": []string{"id"}, "explain": true, "fm": true})
	}
	for _, q := range remapQueries(4) {
		ops = append(ops, oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "columns": []string{"id"}, "bypass_vector_index": true})
	}
	return ops
}
