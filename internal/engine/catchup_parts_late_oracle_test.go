package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestLateCatchUpDeltaAfterMergeOracle: a catch-up run in parts, committed
// as the daemon commits it (Runner.QueueJoins, a journal): deltas, a queued
// merge, one CreateIndex. Then delta results arrive after that commit, as
// a redelivered result stream or a delta task run again hands them to the
// coordinator: the same result of one delta a second time, another
// execution of one delta (its own delta directory), and another execution
// of every delta of a catch-up (complete, so a merge is queued and runs
// at the old read version). None of them commits anything: the lone
// deltas wait once for their siblings and are given up, the merge of the
// re-executed ones is dropped by the conflict check (the index changed
// since its read version); every file they wrote is deleted, no journal
// entry is left, and real Lance reads the table with every row indexed.
func TestLateCatchUpDeltaAfterMergeOracle(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	path := partsTable(t, filepath.Join(t.TempDir(), "ours"), 4, 300)
	tune := partsPolicy(500)
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, tune)
	if len(p.CatchUps) != 3 {
		t.Fatalf("planned %d catch-ups: %+v", len(p.CatchUps), p.Indices)
	}
	r := &engine.Runner{Table: tbl, QueueJoins: true, Journal: journal.NewKeeper("lanced-test", "late-node", nil)}
	tasks := p.Tasks()
	ps := executeAll(t, r, m, tasks)
	var deltas []job.Task
	for _, task := range tasks {
		if task.Slice == nil || task.Slice.CatchUp == nil {
			t.Fatalf("task %s is no catch-up delta", task.Key())
		}
		deltas = append(deltas, task)
	}
	redelivered := ps[0]
	committed := commitUntilSettled(t, r, ps, settleHooks{})
	if len(committed) != 1 {
		t.Fatalf("committed versions %v, want one CreateIndex", committed)
	}
	settled := oracle.Inspect(t, path, 0)
	if settled.Version != committed[0] {
		t.Fatalf("latest version %d, committed %d", settled.Version, committed[0])
	}
	checkPartsCommit(t, path, m, settled.Version)

	// The same delta run again: its own directory.
	again, err := r.Execute(ctx, m.PB, deltas[1])
	if err != nil {
		t.Fatal(err)
	}
	againDir := pieceDir(t, again)
	if !dirHasFiles(t, filepath.Join(path, againDir)) {
		t.Fatalf("re-executed delta wrote nothing under %s", againDir)
	}
	// Every delta of the id_idx catch-up run again: a complete set.
	var full []engine.Pending
	for _, d := range deltas {
		if d.Slice.CatchUp.Index != "id_idx" {
			continue
		}
		pe, err := r.Execute(ctx, m.PB, d)
		if err != nil {
			t.Fatal(err)
		}
		full = append(full, pe)
	}
	for name, late := range map[string][]engine.Pending{"redelivered": {redelivered}, "re-executed": {again}, "all id_idx deltas re-executed": full} {
		if v := commitUntilSettled(t, r, late, settleHooks{}); len(v) != 0 {
			t.Fatalf("%s: late delta results committed versions %v", name, v)
		}
	}
	if v := oracle.Inspect(t, path, 0).Version; v != settled.Version {
		t.Fatalf("version %d after the late results, %d before", v, settled.Version)
	}
	if dirHasFiles(t, filepath.Join(path, againDir)) {
		t.Fatalf("re-executed delta's files are left under %s", againDir)
	}
	checkPartsCommit(t, path, m, settled.Version)
	left, err := journal.ListPending(ctx, tbl.Bucket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("journal entries left: %+v", left)
	}
	after := oracle.Inspect(t, path, 0)
	for _, name := range []string{"id_idx", "body_idx", "vec_idx"} {
		if ix := indexByName(t, after, name); ix.UnindexedRows != 0 || ix.IndexedRows != after.Rows {
			t.Fatalf("%s: %+v, rows %d", name, ix, after.Rows)
		}
	}
}

// settleHooks let a test of commitUntilSettled see each commit.
type settleHooks struct {
	// committed sees each commit's reports and returns jobs to add to
	// the next commit.
	committed func([]*engine.CommitReport) []engine.Pending
	// executed sees each queued task executed; false keeps its job out of
	// the next commit.
	executed func(job.Task, engine.Pending) bool
}

// commitUntilSettled commits ps as the daemon's coordinator does: queued
// tasks are executed and committed with the jobs that wait for them, a
// job kept waiting comes back in the next commit, until nothing is left.
// It returns the versions committed.
func commitUntilSettled(t *testing.T, r *engine.Runner, ps []engine.Pending, h settleHooks) []uint64 {
	t.Helper()
	ctx := context.Background()
	var versions []uint64
	for round := 0; len(ps) > 0; round++ {
		if round > 6 {
			t.Fatalf("still %d jobs waiting after %d commits", len(ps), round)
		}
		reps, err := r.Commit(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		ps = nil
		if h.committed != nil {
			ps = h.committed(reps)
		}
		for _, rep := range reps {
			if rep.Version != 0 {
				versions = append(versions, rep.Version)
			}
			for _, d := range rep.Dropped {
				t.Logf("round %d: dropped %s: %s", round, d.Key, d.Reason)
			}
			for _, w := range rep.Waiting {
				ps = append(ps, w.Pending)
			}
			for _, qt := range rep.Queued {
				rm, err := r.LoadReadVersion(ctx, qt)
				if err != nil {
					t.Fatal(err)
				}
				pe, err := r.Execute(ctx, rm.PB, qt)
				if err != nil {
					t.Fatal(err)
				}
				if h.executed == nil || h.executed(qt, pe) {
					ps = append(ps, pe)
				}
			}
		}
	}
	slices.Sort(versions)
	return versions
}

// pieceDir is the delta directory of an executed catch-up delta.
func pieceDir(t *testing.T, p engine.Pending) string {
	t.Helper()
	o, ok := p.Job.(*job.SliceOutput)
	if !ok || len(o.Pieces) != 1 || o.Pieces[0].Dir == "" {
		t.Fatalf("not a catch-up delta: %+v", p.Job)
	}
	if _, err := uuid.Parse(filepath.Base(o.Pieces[0].Dir)); err != nil || filepath.Dir(o.Pieces[0].Dir) != format.IndicesDir {
		t.Fatalf("delta directory %s", o.Pieces[0].Dir)
	}
	return o.Pieces[0].Dir
}

// dirHasFiles reports whether dir holds a file.
func dirHasFiles(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) > 0
}
