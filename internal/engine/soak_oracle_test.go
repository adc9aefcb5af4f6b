package engine_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// writerOps is a deterministic stream of real-Lance writes: appends with
// explicit ids, deletes and updates by predicate. Run once on the table
// lanced maintains and once on a control copy, the two must end equal.
func writerOps(n int) []oracle.Op {
	var ops []oracle.Op
	for i := 0; i < n; i++ {
		ops = append(ops, oracle.Op{"op": "add", "rows": 20, "seed": i + 100, "id_start": 10000 + i*20})
		if i%3 == 1 {
			ops = append(ops, oracle.Op{"op": "delete", "where": "id % 17 = " + itoa(i%17)})
		}
		if i%4 == 2 {
			ops = append(ops, oracle.Op{"op": "update", "where": "id % 13 = " + itoa(i%13), "values_sql": map[string]string{"value": "value + 1"}})
		}
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
	go func() {
		_, err := oracle.TryOps(t, path, ops)
		done <- err
	}()
	var total engine.Summary
	cycles, writerDone := 0, false
	tune := func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 400 }
	for cycles < 30 || !writerDone {
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
			t.Fatalf("cycle %d: %v", cycles, err)
		}
		if sum.TasksFailed != 0 {
			t.Fatalf("cycle %d: failed tasks: %v", cycles, sum.Errors)
		}
		total.TasksCommitted += sum.TasksCommitted
		total.TasksStale += sum.TasksStale
		total.Conflicts.Rebased += sum.Conflicts.Rebased
		total.Conflicts.Retryable += sum.Conflicts.Retryable
		total.Conflicts.Incompatible += sum.Conflicts.Incompatible
		total.VersionsCommitted = append(total.VersionsCommitted, sum.VersionsCommitted...)
		cycles++
		time.Sleep(50 * time.Millisecond)
		if cycles > 2000 {
			t.Fatal("writer did not finish")
		}
	}
	oracle.RunOps(t, control, ops)
	wantDigest, wantRows := rowSetDigest(oracle.Scan(t, control, 0, nil))
	gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
	if gotRows != wantRows || gotDigest != wantDigest {
		t.Fatalf("after the soak: %d rows, control %d (digest equal: %v)", gotRows, wantRows, gotDigest == wantDigest)
	}
	if total.TasksCommitted == 0 {
		t.Fatal("lanced committed nothing during the soak")
	}
	t.Logf("%d cycles, %d versions committed by lanced, %d tasks committed, %d stale; conflicts: %d rebased, %d retryable (dropped), %d incompatible",
		cycles, len(total.VersionsCommitted), total.TasksCommitted, total.TasksStale, total.Conflicts.Rebased, total.Conflicts.Retryable, total.Conflicts.Incompatible)
}
