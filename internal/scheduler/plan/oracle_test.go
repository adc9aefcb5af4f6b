package plan_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func fragmentIDs(m *format.Manifest) []uint64 {
	var ids []uint64
	for _, f := range m.PB.GetFragments() {
		ids = append(ids, f.GetId())
	}
	return ids
}

// TestRewritePlanMatchesLanceOptimize: on tables real Lance made, the
// fragments lanced's default rewrite plan picks are exactly the ones real
// Lance's optimize() removes on the same table, and Lance writes one new
// fragment per planned task (all outputs are under the target).
func TestRewritePlanMatchesLanceOptimize(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the npm oracle")
	}
	cases := []struct {
		scenario string
		coverage string
		ops      []oracle.Op // applied with real Lance before planning
	}{
		{scenario: "appends"},
		{scenario: "deletes_arrow"},
		{scenario: "deletes_bitmap"},
		{scenario: "v2_0"},
		{scenario: "v1_paths"},
		{scenario: "stable_row_ids"},
		{scenario: "backfill"},
		// Indexed: fragments 0-1 are in both indices, 2-3 in none. Lance
		// never mixes them; lanced must rewrite indexed fragments to match.
		{scenario: "indexed", coverage: policy.CoverageUnindex},
		// A heavy delete inside the indexed set makes fragment 1 a
		// CompactItself candidate next to its indexed neighbour.
		{scenario: "indexed", coverage: policy.CoverageUnindex, ops: []oracle.Op{{"op": "delete", "where": "id >= 1000 AND id < 1400"}}},
		// Three index sets: 0-1 {id, vec, category}, 2-4 {category}, 5 {}:
		// fragment 5 is a lone small fragment that Lance leaves alone.
		{scenario: "indexed", coverage: policy.CoverageUnindex, ops: []oracle.Op{
			{"op": "add", "rows": 100, "seed": 5, "id_start": 2300},
			{"op": "create_index", "column": "category", "type": "btree"},
			{"op": "add", "rows": 100, "seed": 6, "id_start": 2400},
		}},
	}
	for i, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), string(rune('a'+i)))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			uri := oracle.Build(t, c.scenario, dir)
			if len(c.ops) > 0 {
				oracle.RunOps(t, uri, c.ops)
			}
			before := tabletest.Latest(t, uri)
			e := policy.LanceDefaults(uri)
			if c.coverage != "" {
				e.Compaction.IndexCoverage.Value = c.coverage
			}
			var indices = before.Indices.GetIndices()
			p := plan.Compute(plan.Input{Table: uri, Manifest: before.PB, Indices: indices, Policy: e})
			var planned []uint64
			for _, r := range p.Rewrites {
				planned = append(planned, r.Fragments...)
			}
			// index_coverage = unindex keeps the last task that holds an
			// index's covered fragments (real Lance remaps instead); the
			// binning is compared with those fragments counted as planned.
			protected, prev := 0, ""
			for _, d := range p.Decisions {
				if strings.HasPrefix(d.Reason, "kept: last fragments covered by index") {
					planned = append(planned, d.Fragment)
					if d.Reason != prev {
						protected++ // one held-back task per run of equal reasons
					}
				}
				prev = d.Reason
			}
			slices.Sort(planned)

			oracle.RunOps(t, uri, []oracle.Op{{"op": "optimize"}})
			after := tabletest.Latest(t, uri)
			kept := map[uint64]bool{}
			for _, id := range fragmentIDs(after) {
				kept[id] = true
			}
			var removed, added []uint64
			old := map[uint64]bool{}
			for _, id := range fragmentIDs(before) {
				old[id] = true
				if !kept[id] {
					removed = append(removed, id)
				}
			}
			for _, id := range fragmentIDs(after) {
				if !old[id] {
					added = append(added, id)
				}
			}
			slices.Sort(removed)
			if !slices.Equal(planned, removed) {
				t.Fatalf("lanced plans %v, real Lance's optimize removed %v (added %v)", planned, removed, added)
			}
			if len(added) != len(p.Rewrites)+protected {
				t.Fatalf("lanced plans %d tasks, real Lance wrote %d fragments %v", len(p.Rewrites), len(added), added)
			}
			t.Logf("%s: %d fragments, plan %v, Lance removed %v added %v", c.scenario, len(old), planned, removed, added)
		})
	}
}

// TestRepackPlansOnRealLanceLayouts plans repacks on tables real Lance
// backfilled (three files per fragment) and then dropped columns from
// (leaving a file with only a dropped column): limit 1 merges everything and
// drops every old file, the dead one included; limit 2 keeps the largest
// file in place and merges the backfills.
func TestRepackPlansOnRealLanceLayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the npm oracle")
	}
	for _, scenario := range []string{"backfill", "dropped_column"} {
		t.Run(scenario, func(t *testing.T) {
			uri := oracle.Build(t, scenario, t.TempDir())
			m := tabletest.Latest(t, uri)
			for _, max := range []uint64{1, 2} {
				e := policy.LanceDefaults(uri)
				e.Scope.Value = policy.ScopeRepack
				e.Repack.MaxDataFilesPerFragment.Value = max
				p := plan.Compute(plan.Input{Table: uri, Manifest: m.PB, Policy: e})
				frags := m.PB.GetFragments()
				for i, f := range frags {
					var largest string
					var size uint64
					for _, df := range f.GetFiles() {
						if df.GetFileSizeBytes() > size {
							largest, size = df.GetPath(), df.GetFileSizeBytes()
						}
					}
					d := p.Decisions[i]
					switch {
					case scenario == "dropped_column" && max == 2:
						// Two live files (base, label) and a dead one: within the limit.
						if d.Action != plan.ActionSkip {
							t.Fatalf("max 2, fragment %d: %+v", f.GetId(), d)
						}
						continue
					case d.Action != plan.ActionRepack:
						t.Fatalf("max %d, fragment %d: %+v", max, f.GetId(), d)
					}
					task := p.Repacks[d.Task]
					if len(task.Files) != 1 {
						t.Fatalf("max %d: %+v", max, task)
					}
					if max == 1 && len(task.Removes) != len(f.GetFiles()) {
						t.Fatalf("max 1, fragment %d: removes %v of %d files", f.GetId(), task.Removes, len(f.GetFiles()))
					}
					if max == 2 && (slices.Contains(task.Removes, largest) || len(task.Removes) != 2) {
						t.Fatalf("max 2, fragment %d: removes %v, largest %s", f.GetId(), task.Removes, largest)
					}
				}
			}
		})
	}
}
