package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDriftReferenceKeptOracle: the drift reference depends only on the
// trained model, so the first catch-up of an IVF_PQ index (8 fragments of
// 128-d vectors, real Lance) measures it and the drift record keeps it;
// a later catch-up against the same model reuses it instead of reading
// 8,192 indexed vectors back. On copies of the same table, with the kept
// reference and with the record removed (measured again), the catch-ups
// end with the same bound, reference size and far count, every row
// indexed; the catch-up times of both are logged (same run, alternating).
func TestDriftReferenceKeptOracle(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	path := oracle.Build(t, "sized-8x4000-v128-t0-d0", filepath.Join(dir, "base"))
	opts := map[string]any{"numPartitions": 4, "numSubVectors": 16, "distanceType": "l2"}
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": opts},
		{"op": "add", "rows": 400, "seed": 31},
	})
	indexOnly := func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex }
	catchUp := func(p string) time.Duration {
		tbl, m := tabletest.Open(t, "file://"+p)
		pl := planFor(t, p, m, indexOnly)
		if len(pl.CatchUps) != 1 {
			t.Fatalf("%s: %d catch-ups planned", p, len(pl.CatchUps))
		}
		start := time.Now()
		sum, err := engine.Compact(context.Background(), tbl, m, pl.Tasks(), engine.CompactOptions{})
		took := time.Since(start)
		if err != nil || sum.TasksFailed != 0 || sum.TasksCommitted == 0 {
			t.Fatalf("%s: compact: %v %+v", p, err, sum)
		}
		return took
	}
	catchUp(path)
	first := driftRecord(t, path)
	if first.Reference == 0 || first.Rows == 0 {
		t.Fatalf("first catch-up recorded no reference: %+v", first)
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 400, "seed": 32}})
	var kept, measured []time.Duration
	var recKept, recMeasured drift.Record
	for i := range 3 {
		k, m := filepath.Join(dir, fmt.Sprintf("kept%d.lance", i)), filepath.Join(dir, fmt.Sprintf("measured%d.lance", i))
		oracle.CopyTree(t, path, k)
		oracle.CopyTree(t, path, m)
		if err := os.Remove(filepath.Join(m, drift.Key)); err != nil {
			t.Fatal(err)
		}
		measured = append(measured, catchUp(m))
		kept = append(kept, catchUp(k))
		recKept, recMeasured = driftRecord(t, k), driftRecord(t, m)
		for _, p := range []string{k, m} {
			if ix := indexByName(t, oracle.Inspect(t, p, 0), "vec_idx"); ix.UnindexedRows != 0 {
				t.Fatalf("%s: %+v", p, ix)
			}
		}
	}
	if recKept.Bound != first.Bound || recKept.Reference != first.Reference || recMeasured.Bound != first.Bound || recMeasured.Reference != first.Reference {
		t.Fatalf("bound/reference: first %v/%d, kept %v/%d, measured again %v/%d", first.Bound, first.Reference, recKept.Bound, recKept.Reference, recMeasured.Bound, recMeasured.Reference)
	}
	if recKept.Rows != first.Rows+recMeasured.Rows || recKept.Far != first.Far+recMeasured.Far {
		t.Fatalf("counts: first %+v, kept %+v, measured again %+v", first, recKept, recMeasured)
	}
	slices.Sort(kept)
	slices.Sort(measured)
	t.Logf("catch-up of 400 rows (median of 3, same run): reference kept %v, measured again (%d rows) %v: ratio %.2f",
		kept[1], first.Reference, measured[1], float64(kept[1])/float64(measured[1]))
}

// driftRecord reads vec_idx's drift record of the table at path.
func driftRecord(t *testing.T, path string) drift.Record {
	t.Helper()
	b, err := store.Open(context.Background(), "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f, err := drift.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return f.Indices["vec_idx"]
}
