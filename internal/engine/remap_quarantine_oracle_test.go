package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestUnremappableIndexKeepsOnlyItsFragments: a real-Lance table whose
// BTree segment (covering the first 4 fragments) has damaged files, plus 6
// small fragments appended after the index. The first compaction's remap
// of that segment fails: the rewrite is dropped (nothing committed but the
// fragment-id reservation) and the segment is quarantined with a reason
// naming the index, the file and what to do. Planned again, only the
// fragments the segment covers are kept (with that reason, in the plan's
// decisions and its index decision); the appended fragments are compacted,
// real Lance reads the same rows, and the table is not held.
func TestUnremappableIndexKeepsOnlyItsFragments(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
	ops := []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		createIDIdx,
	}
	for i := range 6 {
		ops = append(ops, oracle.Op{"op": "add", "rows": 50, "seed": 100 + i, "id_start": 10000 + 50*i})
	}
	oracle.RunOps(t, path, ops)
	want, wantRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	// Damage every file of the segment: keep its first half only.
	damaged := 0
	dirs, _ := filepath.Glob(filepath.Join(path, "_indices", "*"))
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*"))
		for _, f := range files {
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, st.Size()/2); err != nil {
				t.Fatal(err)
			}
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no index files found")
	}
	ctx := context.Background()
	uri := "file://" + path
	planWith := func() *plan.Plan {
		tbl, m := tabletest.Open(t, uri)
		marks, err := quarantine.LoadIndices(ctx, tbl.Bucket(), m.Indices.GetIndices())
		if err != nil {
			t.Fatal(err)
		}
		in := plan.Input{Table: uri, Manifest: m.PB, Policy: policy.LanceDefaults(uri), Indices: m.Indices.GetIndices(),
			Unremappable: quarantine.IndexReasons(marks)}
		return plan.Compute(in)
	}
	tbl, m := tabletest.Open(t, uri)
	frags0 := len(m.PB.GetFragments())
	p := planWith()
	if len(p.Rewrites) == 0 {
		t.Fatalf("nothing planned: %+v", p.Decisions)
	}
	sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	covered := []uint64{0, 1, 2, 3}
	droppedCovered := false
	for _, d := range sum.Dropped {
		droppedCovered = droppedCovered || strings.Contains(d.Key, ":0-3:")
	}
	if !droppedCovered || len(sum.QuarantinedIndices) != 1 {
		t.Fatalf("the rewrite of the covered fragments was not dropped with the segment quarantined: %+v", sum)
	}
	mk := sum.QuarantinedIndices[0]
	if mk.Index != "id_idx" || !strings.HasPrefix(mk.File, "_indices/") || !strings.Contains(mk.String(), "createIndex") {
		t.Fatalf("quarantine record does not name the index, file and what to do: %+v", mk)
	}
	if h, err := hold.Get(ctx, tbl.Bucket()); err != nil || h != nil {
		t.Fatalf("table held (%v): %+v", err, h)
	}
	// Planned again (as the daemon does after the drop): the covered
	// fragments are kept with the reason; whatever of the rest the first
	// run did not compact is rewritten now.
	p = planWith()
	_, m = tabletest.Open(t, uri)
	var kept []uint64
	for _, d := range p.Decisions {
		if d.Action != plan.ActionRewrite && strings.Contains(d.Reason, `index "id_idx"`) && strings.Contains(d.Reason, mk.File) {
			kept = append(kept, d.Fragment)
		}
	}
	if !slices.Equal(kept, covered) {
		t.Fatalf("want fragments %v kept naming the index and file, got %v: %+v", covered, kept, p.Decisions)
	}
	if len(p.Indices) != 1 || p.Indices[0].Action != plan.IndexKeep || !strings.Contains(p.Indices[0].Reason, "could not be remapped") {
		t.Fatalf("index decision: %+v", p.Indices)
	}
	sum2, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{})
	if err != nil || sum2.TasksCommitted != len(p.Rewrites) || len(sum2.QuarantinedIndices) != 0 {
		t.Fatalf("second run (%v): %+v", err, sum2)
	}
	if sum.TasksCommitted+sum2.TasksCommitted == 0 {
		t.Fatal("the fragments the index does not cover were not compacted")
	}
	got, gotRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	if got != want || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (digest %s), want %d (%s)", gotRows, got, wantRows, want)
	}
	// (real Lance's indexStats would read the damaged files: the
	// manifest is checked here, the rows by real Lance above.)
	_, latest := tabletest.Open(t, uri)
	if n := len(latest.PB.GetFragments()); n != 5 || frags0 != 10 {
		t.Fatalf("fragments %d -> %d, want 10 -> 5 (4 kept + 1 new)", frags0, n)
	}
	if ix := latest.Indices.GetIndices(); len(ix) != 1 || ix[0].GetName() != "id_idx" {
		t.Fatalf("index section: %v", ix)
	}
	t.Logf("quarantined: %s", mk)
}
