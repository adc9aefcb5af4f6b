package plan

import (
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/policy"
)

// TestPlanSlices: a rewrite of one fragment whose files exceed slice_bytes
// is planned in row slices of about slice_bytes (the tasks are its slices,
// the fragment's decision says so); a smaller fragment and a rewrite of
// several fragments are not sliced; a repack over the limit is.
func TestPlanSlices(t *testing.T) {
	s := fields(top(0, "id"), top(1, "v"))
	m := manifest(5, s,
		frag(1, 4_000_000, 800_000, v20("big.lance", 10_000, 0, 1)),
		frag(4, 4_000_000, 0, v20("c.lance", 6_000, 0), v20("d.lance", 2_000, 1)),
		frag(2, 100, 0, v20("a.lance", 1_000, 0, 1)),
		frag(3, 100, 0, v20("b.lance", 1_000, 0, 1)),
	)
	p := Compute(Input{Table: "t", Manifest: m, Policy: pol(func(e *policy.Effective) {
		set(&e.Compaction.SliceBytes, 3_000)
		set(&e.Compaction.TargetRowsPerFragment, 1_000_000)
		set(&e.Repack.MaxDataFilesPerFragment, 1)
	})})
	if len(p.Rewrites) != 2 || len(p.Repacks) != 1 {
		t.Fatalf("want 2 rewrites and 1 repack: %+v", p.Decisions)
	}
	big := p.Rewrites[0]
	if len(big.Fragments) != 1 || big.Fragments[0] != 1 || len(big.Slices) != 4 {
		t.Fatalf("rewrite of fragment 1: %+v", big)
	}
	if p.Rewrites[1].Slices != nil {
		t.Fatalf("the small fragments' rewrite is sliced: %+v", p.Rewrites[1])
	}
	want := []job.RowRange{{Lo: 0, Hi: 1_000_000}, {Lo: 1_000_000, Hi: 2_000_000}, {Lo: 2_000_000, Hi: 3_000_000}, {Lo: 3_000_000, Hi: 4_000_000}}
	for i, r := range big.Slices {
		if r != want[i] {
			t.Fatalf("slices %v, want %v", big.Slices, want)
		}
	}
	if rp := p.Repacks[0]; rp.Fragment != 4 || len(rp.Slices) != 3 {
		t.Fatalf("repack: %+v", rp)
	}
	if !strings.Contains(p.Decisions[0].Reason, "in 4 row slices") || !strings.Contains(p.Decisions[1].Reason, "in 3 row slices") {
		t.Fatalf("decisions: %+v", p.Decisions)
	}
	var slices, joins int
	keys := map[string]bool{}
	for _, task := range p.Tasks() {
		if task.Slice != nil {
			slices++
			keys[task.Key()] = true
			if task.Fragments()[0] != task.Slice.Parent().Fragments()[0] {
				t.Fatalf("slice %s names fragments %v", task.Key(), task.Fragments())
			}
		}
		if task.Join != nil {
			joins++
		}
	}
	if slices != 7 || len(keys) != 7 || joins != 0 {
		t.Fatalf("tasks: %d slices (%d keys), %d joins", slices, len(keys), joins)
	}
	if err := job.CheckDisjoint(p.Tasks()); err != nil {
		t.Fatal(err)
	}
}
