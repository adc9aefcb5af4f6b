package engine_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRecommitOfCommittedResultsKeepsFiles: a daemon coordinator that dies
// (or loses its lease) after its commit landed but before it removed the
// results leaves them for the next holder, which commits them again. The
// second commit meets its own earlier transaction as a conflict: it must
// recognise its outputs in the committed version and leave them, not drop
// the tasks and delete the files the table now references. Checked on a
// real-Lance table with an IVF_PQ and a BTree (rewrite + remaps): real
// Lance reads the same rows after the second commit, both indices intact.
func TestRecommitOfCommittedResultsKeepsFiles(t *testing.T) {
	oracle.Require(t)
	path := lanceTable(t, "sized-4x1000-v32-t0-d0",
		oracle.Op{"op": "delete", "where": "id % 10 = 0"},
		createVecIdx,
		createIDIdx,
		oracle.Op{"op": "delete", "where": "id % 7 = 3"},
	)
	want := oracle.Digest(oracle.Scan(t, path, 0, nil))
	ctx := context.Background()
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, nil)
	r := &engine.Runner{Table: tbl}
	ps := executeAll(t, r, m, p.Tasks())
	if _, err := r.Commit(ctx, ps); err != nil {
		t.Fatal(err)
	}
	first := oracle.Inspect(t, path, 0)
	reps, err := r.Commit(ctx, ps) // the same results, delivered again
	if err != nil {
		t.Fatalf("second commit: %v", err)
	}
	for _, rep := range reps {
		if rep.Version != 0 {
			t.Fatalf("the same results committed twice: version %d", rep.Version)
		}
		for _, d := range rep.Dropped {
			t.Logf("dropped %s: %s %s", d.Key, d.Verdict, d.Reason)
		}
	}
	after := oracle.Inspect(t, path, 0)
	if after.Version != first.Version || after.Fragments >= 4 {
		t.Fatalf("version %d -> %d, fragments %d", first.Version, after.Version, after.Fragments)
	}
	if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
		t.Fatal("rows differ after the second commit")
	}
	if got := after.IndexNames(); !slices.Equal(got, []string{"id_idx", "vec_idx"}) {
		t.Fatalf("indices %v", got)
	}
	_, plans := recallAt10(t, path, remapQueries(2), remapEngineCase{typ: "ivf_pq"})
	if len(plans) == 0 {
		t.Fatal("no search")
	}
}

// executeAll executes tasks on m, failing the test on any error.
func executeAll(t *testing.T, r *engine.Runner, m *format.Manifest, tasks []job.Task) []engine.Pending {
	t.Helper()
	var ps []engine.Pending
	for _, task := range tasks {
		pe, err := r.Execute(context.Background(), m.PB, task)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, pe)
	}
	return ps
}
