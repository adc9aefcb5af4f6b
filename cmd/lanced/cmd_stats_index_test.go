package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestIndexBacklogMatchesRealLance: a table with a BTree and an IVF_PQ,
// then small appends and deletes by real Lance (some in indexed
// fragments, some in unindexed ones). lanced plan (and lanced stats) count
// per index the same unindexed rows as real Lance's indexStats
// (num_unindexed_rows), and the plan catches up the kinds lanced can
// (IVF_PQ) and says the others' catch-up (BTree) is due; after real
// Lance's optimize() both say every row is indexed.
func TestIndexBacklogMatchesRealLance(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "indexed", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "add", "rows": 40, "seed": 11},
		{"op": "add", "rows": 25, "seed": 12},
		{"op": "delete", "where": "id % 7 = 0"},
		{"op": "add", "rows": 30, "seed": 13},
	})
	check := func(wantUnindexed bool) {
		t.Helper()
		lance := oracle.Inspect(t, path, 0)
		rep := statsJSON(t, path)
		var p plan.Plan
		if err := json.Unmarshal([]byte(runCLI(t, "plan", path, "--json")), &p); err != nil {
			t.Fatal(err)
		}
		if len(lance.Indices) != 2 || len(rep.IndexCoverage) != 2 || len(p.Indices) != 2 {
			t.Fatalf("indices: Lance %+v, stats %+v, plan %+v", lance.Indices, rep.IndexCoverage, p.Indices)
		}
		for _, li := range lance.Indices {
			var found bool
			for _, si := range rep.IndexCoverage {
				if si.Name != li.Name {
					continue
				}
				found = true
				if int64(si.UnindexedRows) != li.UnindexedRows {
					t.Errorf("%s: lanced stats %d unindexed, Lance %d", li.Name, si.UnindexedRows, li.UnindexedRows)
				}
				if li.Segments >= 0 && int64(si.Segments) != li.Segments {
					t.Errorf("%s: %d segments, Lance %d", li.Name, si.Segments, li.Segments)
				}
			}
			for _, d := range p.Indices {
				if d.Name != li.Name {
					continue
				}
				if int64(d.CatchUp.Rows) != li.UnindexedRows || d.CatchUp.LiveRows != uint64(li.UnindexedRows+li.IndexedRows) && li.Type == "BTree" {
					t.Errorf("%s: plan %d unindexed, Lance %d", li.Name, d.CatchUp.Rows, li.UnindexedRows)
				}
				want := plan.CatchUpCurrent
				if wantUnindexed {
					// A kind lanced catches up is planned; the others are due.
					want = plan.CatchUpDue
					if plan.CatchUpSupported(index.Kind(d.Kind)) {
						want = plan.CatchUpPlanned
					}
				}
				if d.CatchUp.Action != want {
					t.Errorf("%s: catch-up %s (%s), want %s", li.Name, d.CatchUp.Action, d.CatchUp.Reason, want)
				}
			}
			if !found {
				t.Errorf("lanced stats has no index %s", li.Name)
			}
			if wantUnindexed != (li.UnindexedRows > 0) {
				t.Fatalf("fixture: Lance reports %d unindexed rows on %s", li.UnindexedRows, li.Name)
			}
		}
		human := runCLI(t, "plan", path)
		if !strings.Contains(human, "unindexed: ") || !strings.Contains(human, "catch-up") {
			t.Errorf("human output lacks the backlog:\n%s", human)
		}
	}
	check(true)
	oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
	check(false)
}
