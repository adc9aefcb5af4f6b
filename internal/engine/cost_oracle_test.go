package engine_test

import (
	"math"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRewriteCostEstimates: on a table real Lance wrote (30 tiny fragments,
// 20 fragments of 2,000 rows and one of 40,000 rows with 10.5% of its rows
// deleted, target 20,000 rows), min_reclaim_ratio = 0.2 skips the big
// fragment with its numbers in the reason, and for both plans (with and
// without the ratio) the tasks' estimated bytes read and written are within
// 20% of the bytes the executed tasks report.
func TestRewriteCostEstimates(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "appends", t.TempDir())
	var ops []oracle.Op
	for i := 0; i < 20; i++ {
		ops = append(ops, oracle.Op{"op": "add", "rows": 2000, "seed": 10 + i})
	}
	// ids 41200..81199 form the big fragment; delete 4,200 of them.
	ops = append(ops, oracle.Op{"op": "add", "rows": 40000, "seed": 99},
		oracle.Op{"op": "delete", "where": "id >= 50000 AND id < 54200"})
	oracle.RunOps(t, path, ops)
	tbl, m := openTable(t, path)
	frags := m.PB.GetFragments()
	big := len(frags) - 1
	if frags[big].GetPhysicalRows() != 40000 || frags[big].GetDeletionFile().GetNumDeletedRows() != 4200 {
		t.Fatalf("big fragment: %v", frags[big])
	}
	target := func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 20000 }
	for _, ratio := range []float64{0, 0.2} {
		p := planFor(t, path, m, func(e *policy.Effective) {
			target(e)
			e.Compaction.MinReclaimRatio.Value = ratio
		})
		d := p.Decisions[big]
		if ratio == 0 && d.Action != plan.ActionRewrite {
			t.Fatalf("no ratio: big fragment %+v", d)
		}
		if ratio > 0 && (d.Action != plan.ActionSkip || d.Cost == nil || !strings.Contains(d.Reason, "under min_reclaim_ratio 0.2")) {
			t.Fatalf("ratio %g: big fragment %+v", ratio, d)
		}
		if len(p.Rewrites) == 0 {
			t.Fatalf("ratio %g: no rewrite planned", ratio)
		}
		for i := range p.Rewrites {
			task := &p.Rewrites[i]
			out, err := engine.ExecuteRewrite(ctx, tbl, m.PB, task)
			if err != nil {
				t.Fatal(err)
			}
			rd := float64(out.BytesRead) / float64(task.EstBytesRead)
			wr := float64(out.BytesWritten) / float64(task.EstBytesWritten)
			t.Logf("ratio %g, task %d (%d fragments, %d rows): read %d est %d (%.3f), written %d est %d (%.3f)",
				ratio, i, len(task.Fragments), task.Rows, out.BytesRead, task.EstBytesRead, rd, out.BytesWritten, task.EstBytesWritten, wr)
			if math.Abs(rd-1) > 0.2 || math.Abs(wr-1) > 0.2 {
				t.Errorf("ratio %g, task %d: actual/estimated read %.3f, written %.3f (more than 20%% off)", ratio, i, rd, wr)
			}
		}
		if ratio > 0 {
			t.Logf("big fragment skipped: %s", d.Reason)
		}
	}
}
