package engine_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCatchUpConflictsOracle executes an index catch-up, lets real Lance
// commit in between, then commits: an append or a delete is rebased over
// (the catch-up commits, every live row it read is indexed); Lance's
// optimize() or createIndex(replace) on the same index drops it (its files
// deleted). Real Lance then reads the table with the index intact.
func TestCatchUpConflictsOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []struct {
		name      string
		ops       []oracle.Op
		committed bool
		unindexed int64 // vec_idx unindexed rows after our commit
	}{
		{name: "append", ops: []oracle.Op{{"op": "add", "rows": 90, "seed": 31}}, committed: true, unindexed: 90},
		{name: "delete", ops: []oracle.Op{{"op": "delete", "where": "id >= 4100 AND id < 4150"}}, committed: true},
		{name: "optimize", ops: []oracle.Op{{"op": "optimize"}}},
		{name: "replace", ops: []oracle.Op{{"op": "create_index", "column": "vec", "type": "ivf_pq", "replace": true,
			"options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-1x4000-v32-t0-d0", filepath.Join(t.TempDir(), "t"))
			oracle.RunOps(t, path, []oracle.Op{
				{"op": "create_index", "column": "vec", "type": "ivf_pq", "options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
				{"op": "add", "rows": 300, "seed": 11},
			})
			raceCatchUp(t, path, c.ops, c.committed)
			rep := oracle.Inspect(t, path, 0)
			ix := indexByName(t, rep, "vec_idx")
			if ix.UnindexedRows != c.unindexed || ix.IndexedRows+ix.UnindexedRows != rep.Rows {
				t.Fatalf("after %s: %+v, %d rows", c.name, ix, rep.Rows)
			}
			res := oracle.RunOps(t, path, []oracle.Op{
				{"op": "vector_search", "column": "vec", "vector": catchUpQueries(1, 32)[0], "k": 10, "columns": []string{"id"}},
				{"op": "optimize"},
			})
			if len(res) != 2 {
				t.Fatalf("real Lance after %s: %s", c.name, res)
			}
		})
	}
}

// raceCatchUp plans (scope "index": one catch-up task), executes the
// catch-up, lets real Lance commit ops, then commits: it must commit when
// committed, else be dropped as retryable with every file it wrote deleted.
func raceCatchUp(t *testing.T, path string, ops []oracle.Op, committed bool) {
	t.Helper()
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex })
	if len(p.CatchUps) != 1 {
		t.Fatalf("plan: %+v", p.CatchUps)
	}
	ctx := context.Background()
	r := &engine.Runner{Table: tbl}
	pend, err := r.Execute(ctx, m.PB, job.Task{CatchUp: &p.CatchUps[0]})
	if err != nil {
		t.Fatal(err)
	}
	oracle.RunOps(t, path, ops)
	reps, err := r.Commit(ctx, []engine.Pending{pend})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(reps) == 1 && len(reps[0].Committed) == 1; got != committed {
		t.Fatalf("committed %v, want %v: %+v", got, committed, reps)
	}
	if committed {
		return
	}
	if len(reps[0].Dropped) != 1 || reps[0].Dropped[0].Verdict != job.Retryable {
		t.Fatalf("want one retryable drop: %+v", reps[0])
	}
	for _, k := range pend.Job.Written() {
		if dataFileExists(t, path, k) {
			t.Fatalf("dropped catch-up left %s behind", k)
		}
	}
}
