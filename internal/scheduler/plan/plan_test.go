package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var ab = fields(top(0, "a"), top(1, "b"))

func small(id, rows uint64) *tablepb.DataFragment {
	return frag(id, rows, 0, v20(fmt.Sprintf("%d.lance", id), rows*10, 0, 1))
}

func deleted(id, rows, del uint64) *tablepb.DataFragment {
	return frag(id, rows, del, v20(fmt.Sprintf("%d.lance", id), rows*10, 0, 1))
}

func rewriteGroups(p *Plan) [][]uint64 {
	var out [][]uint64
	for _, r := range p.Rewrites {
		out = append(out, r.Fragments)
	}
	return out
}

func checkDecisions(t *testing.T, m *tablepb.Manifest, p *Plan) {
	t.Helper()
	if len(p.Decisions) != len(m.Fragments) {
		t.Fatalf("%d decisions for %d fragments", len(p.Decisions), len(m.Fragments))
	}
	seen := map[uint64]string{}
	for _, r := range p.Rewrites {
		for _, id := range r.Fragments {
			seen[id] = ActionRewrite
		}
	}
	for _, r := range p.Repacks {
		if seen[r.Fragment] != "" {
			t.Fatalf("fragment %d is in both kinds of task", r.Fragment)
		}
		seen[r.Fragment] = ActionRepack
	}
	for i, d := range p.Decisions {
		if d.Fragment != m.Fragments[i].Id || d.Reason == "" {
			t.Fatalf("decision %d: %+v", i, d)
		}
		want := seen[d.Fragment]
		if want == "" {
			want = ActionSkip
		}
		if d.Action != want {
			t.Fatalf("fragment %d: decision %s, tasks say %s", d.Fragment, d.Action, want)
		}
	}
}

// exA: fragment 0 (20000 rows, 35.6% deleted) and 1..4 (300 each) in both
// indices, 5 and 6 in none, as observed on lance 8.0.0.
func exA() []*tablepb.DataFragment {
	return []*tablepb.DataFragment{deleted(0, 20000, 7120), small(1, 300), small(2, 300), small(3, 300), small(4, 300), small(5, 300), small(6, 300)}
}

func exAIndices(t *testing.T) []*tablepb.IndexMetadata {
	return []*tablepb.IndexMetadata{indexMeta(t, "id_idx", 0, 1, 2, 3, 4), indexMeta(t, "vec_idx", 0, 1, 2, 3, 4)}
}

func exAUnindex(e *policy.Effective) {
	set(&e.Compaction.TargetRowsPerFragment, uint64(policy.DefaultTargetRowsPerFragment))
	set(&e.Compaction.IndexCoverage, policy.CoverageUnindex)
}

func TestRewriteBinning(t *testing.T) {
	const target = 1000
	withTarget := func(e *policy.Effective) { set(&e.Compaction.TargetRowsPerFragment, uint64(target)) }
	cases := []struct {
		name    string
		frags   []*tablepb.DataFragment
		indices func(t *testing.T) []*tablepb.IndexMetadata
		edit    func(e *policy.Effective)
		stable  bool
		want    [][]uint64
	}{
		{name: "adjacent small fragments form one task", frags: []*tablepb.DataFragment{small(0, 100), small(1, 100), small(2, 100)}, want: [][]uint64{{0, 1, 2}}},
		{name: "a lone small fragment is left alone", frags: []*tablepb.DataFragment{small(0, 100), small(1, 5000), small(2, 100)}},
		{name: "a lone deleted fragment is rewritten by itself", frags: []*tablepb.DataFragment{small(0, 5000), deleted(1, 5000, 1000), small(2, 5000)}, want: [][]uint64{{1}}},
		{name: "bins never jump a non-candidate", frags: []*tablepb.DataFragment{small(0, 100), small(1, 200), small(2, 5000), small(3, 100), small(4, 100)}, want: [][]uint64{{0, 1}, {3, 4}}},
		{name: "split for size", frags: []*tablepb.DataFragment{small(0, 600), small(1, 600), small(2, 600), small(3, 600)}, want: [][]uint64{{0, 1}, {2, 3}}},
		{name: "split for size keeps a short remainder in the last task", frags: []*tablepb.DataFragment{small(0, 600), small(1, 600), small(2, 600)}, want: [][]uint64{{0, 1, 2}}},
		{name: "split counts live rows", frags: []*tablepb.DataFragment{deleted(0, 900, 300), small(1, 500), small(2, 500), small(3, 600)}, want: [][]uint64{{0, 1}, {2, 3}}},
		{name: "ratio exactly at the threshold is not over it (float32, as Lance)", frags: []*tablepb.DataFragment{small(0, 5000), deleted(1, 10000, 1000), small(2, 5000)}},
		{name: "materialize_deletions off", frags: []*tablepb.DataFragment{deleted(0, 5000, 4000)},
			edit: func(e *policy.Effective) { set(&e.Compaction.MaterializeDeletions, false) }},
		{name: "index sets split bins (unindex)", frags: []*tablepb.DataFragment{small(0, 10), small(1, 10), small(2, 10), small(3, 10), small(4, 5000)},
			indices: func(t *testing.T) []*tablepb.IndexMetadata {
				return []*tablepb.IndexMetadata{indexMeta(t, "id_idx", 0, 1, 4)}
			},
			edit: func(e *policy.Effective) { set(&e.Compaction.IndexCoverage, policy.CoverageUnindex) },
			want: [][]uint64{{0, 1}, {2, 3}}},
		{name: "index_coverage keep leaves indexed fragments alone", frags: []*tablepb.DataFragment{small(0, 10), small(1, 10), small(2, 10), small(3, 10)},
			indices: func(t *testing.T) []*tablepb.IndexMetadata {
				return []*tablepb.IndexMetadata{indexMeta(t, "id_idx", 0, 1)}
			},
			want: [][]uint64{{2, 3}}},
		{name: "exA as observed on lance 8.0.0", frags: exA(), indices: exAIndices, edit: exAUnindex,
			stable: true,
			want:   [][]uint64{{0, 1, 2, 3, 4}, {5, 6}}},
		// The same table in address mode: the first task would leave both
		// indices covering no fragment, so unindex keeps it.
		{name: "exA, address mode: unindex keeps the last covered fragments", frags: exA(), indices: exAIndices, edit: exAUnindex,
			want: [][]uint64{{5, 6}}},
		{name: "stable row ids: index_coverage keep rewrites indexed fragments (bitmap-only)", frags: []*tablepb.DataFragment{small(0, 10), small(1, 10), small(2, 10), small(3, 10)},
			indices: func(t *testing.T) []*tablepb.IndexMetadata {
				return []*tablepb.IndexMetadata{indexMeta(t, "id_idx", 0, 1)}
			},
			stable: true,
			want:   [][]uint64{{0, 1}, {2, 3}}},
		{name: "remap of an index type lanced cannot remap plans as keep", frags: []*tablepb.DataFragment{small(0, 10), small(1, 10), small(2, 10), small(3, 10)},
			indices: func(t *testing.T) []*tablepb.IndexMetadata {
				return []*tablepb.IndexMetadata{indexMeta(t, "id_idx", 0, 1)}
			},
			edit: func(e *policy.Effective) { set(&e.Compaction.IndexCoverage, policy.CoverageRemap) },
			want: [][]uint64{{2, 3}}},
		// Tasks of 3, 4 and 5 fragments under max_source_fragments
		// 10 take the first two (7 fragments); the third waits.
		{name: "max_source_fragments takes whole tasks in order",
			frags: []*tablepb.DataFragment{small(0, 1), small(1, 1), small(2, 1), small(3, 5000), small(4, 1), small(5, 1), small(6, 1), small(7, 1), small(8, 5000),
				small(9, 1), small(10, 1), small(11, 1), small(12, 1), small(13, 1)},
			edit: func(e *policy.Effective) { set(&e.Compaction.MaxSourceFragments, uint64(10)) },
			want: [][]uint64{{0, 1, 2}, {4, 5, 6, 7}}},
		{name: "max_source_rows stops at the first task over it",
			frags: []*tablepb.DataFragment{small(0, 100), small(1, 100), small(2, 5000), small(3, 300), small(4, 300), small(5, 5000), small(6, 10), small(7, 10)},
			edit:  func(e *policy.Effective) { set(&e.Compaction.MaxSourceRows, uint64(500)) },
			want:  [][]uint64{{0, 1}}},
		{name: "max_source_bytes counts data file sizes",
			frags: []*tablepb.DataFragment{small(0, 100), small(1, 100), small(2, 5000), small(3, 100), small(4, 100)},
			edit:  func(e *policy.Effective) { set(&e.Compaction.MaxSourceBytes, uint64(3999)) },
			want:  [][]uint64{{0, 1}}},
		{name: "scope repack plans no rewrite", frags: []*tablepb.DataFragment{small(0, 100), small(1, 100)},
			edit: func(e *policy.Effective) { set(&e.Scope, policy.ScopeRepack) }},
		{name: "disabled plans nothing", frags: []*tablepb.DataFragment{small(0, 100), small(1, 100)},
			edit: func(e *policy.Effective) { set(&e.Enabled, false) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := pol(withTarget)
			if c.edit != nil {
				c.edit(&e)
			}
			m := manifest(9, ab, c.frags...)
			if c.stable {
				m.ReaderFeatureFlags |= format.FlagStableRowIDs
				m.WriterFeatureFlags |= format.FlagStableRowIDs
			}
			in := Input{Table: "t", Manifest: m, Policy: e}
			if c.indices != nil {
				in.Indices = c.indices(t)
			}
			p := Compute(in)
			if got := rewriteGroups(p); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("rewrites %v, want %v\n%s", got, c.want, decisionsText(p))
			}
			checkDecisions(t, m, p)
			for _, r := range p.Rewrites {
				if r.ReadVersion != 9 || r.Table != "t" {
					t.Fatalf("task %+v", r)
				}
			}
		})
	}
}

func decisionsText(p *Plan) string {
	var b strings.Builder
	for _, d := range p.Decisions {
		fmt.Fprintf(&b, "  %d %s %s\n", d.Fragment, d.Action, d.Reason)
	}
	return b.String()
}

func TestRewriteConverges(t *testing.T) {
	e := pol(func(e *policy.Effective) { set(&e.Compaction.TargetRowsPerFragment, uint64(1000)) })
	m := manifest(3, ab, small(0, 600), small(1, 600), small(2, 600), small(3, 600), deleted(4, 5000, 2000), small(5, 5000), small(6, 10), small(7, 20))
	p := Compute(Input{Table: "t", Manifest: m, Policy: e})
	if p.Empty() {
		t.Fatal("nothing planned")
	}
	again := Compute(Input{Table: "t", Manifest: applyRewrite(m, p), Policy: e})
	if !again.Empty() {
		t.Fatalf("second plan not empty: %v\n%s", rewriteGroups(again), decisionsText(again))
	}
}

func TestInFlightFragmentsAreLeftOut(t *testing.T) {
	e := pol(func(e *policy.Effective) { set(&e.Compaction.TargetRowsPerFragment, uint64(1000)) })
	m := manifest(5, ab, small(0, 10), small(1, 10), small(2, 10), small(3, 10))
	busy := job.Task{Rewrite: &job.RewriteTask{Table: "t", ReadVersion: 4, Fragments: []uint64{1}, TargetRowsPerFragment: 1000}}
	other := job.Task{Rewrite: &job.RewriteTask{Table: "u", ReadVersion: 4, Fragments: []uint64{2}, TargetRowsPerFragment: 1000}}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, InFlight: []string{busy.Key(), other.Key(), "garbage"}})
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{2, 3}}) {
		t.Fatalf("rewrites %v\n%s", got, decisionsText(p))
	}
	if !strings.HasPrefix(p.Decisions[1].Reason, "in flight") || len(p.Warnings) != 1 {
		t.Fatalf("decision %+v warnings %q", p.Decisions[1], p.Warnings)
	}
}

// Repack run-level cases: two fragments of four rows, each [a,b,c],[d],[e].
func TestMixedRunsAndScope(t *testing.T) {
	twoFrags := func(del0, del1 uint64) *tablepb.Manifest {
		f0, f1 := backfilled(0), backfilled(1)
		for _, x := range []struct {
			f *tablepb.DataFragment
			d uint64
		}{{f0, del0}, {f1, del1}} {
			if x.d > 0 {
				x.f.DeletionFile = &tablepb.DeletionFile{NumDeletedRows: x.d, ReadVersion: 1, Id: 2}
			}
		}
		return manifest(4, abcde, f0, f1)
	}
	type want struct {
		rewrites [][]uint64
		repacks  []uint64
	}
	cases := []struct {
		name string
		m    *tablepb.Manifest
		edit func(e *policy.Effective)
		want want
	}{
		{name: "compaction_rewrites_and_repacks_in_one_run", m: twoFrags(2, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(3))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
		}, want: want{rewrites: [][]uint64{{0}}, repacks: []uint64{1}}},
		{name: "compaction_scope_selects_task_kinds/rewrite", m: twoFrags(2, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(2))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
			set(&e.Scope, policy.ScopeRewrite)
		}, want: want{rewrites: [][]uint64{{0}}}},
		{name: "compaction_scope_selects_task_kinds/repack", m: twoFrags(2, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(2))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
			set(&e.Scope, policy.ScopeRepack)
		}, want: want{repacks: []uint64{0, 1}}},
		{name: "compaction_plans_no_repack_by_default", m: twoFrags(0, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(4))
		}},
		{name: "repack_keeps_deletions", m: twoFrags(1, 1), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(4))
			set(&e.Compaction.MaterializeDeletionsThreshold, 0.5)
			set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
		}, want: want{repacks: []uint64{0, 1}}},
		{name: "repack_is_not_planned_under_force_binary_copy", m: twoFrags(0, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(4))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
			set(&e.Compaction.ForceBinaryCopy, true)
		}},
		// Each repack leaves the base file alone and merges d and e, so a
		// budget for two of those fits both, though not one whole fragment.
		{name: "repack_counts_only_the_files_it_reads_against_the_byte_budget", m: twoFrags(0, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(4))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(2))
			set(&e.Compaction.MaxSourceBytes, uint64(2*(100+100)))
		}, want: want{repacks: []uint64{0, 1}}},
		{name: "repack byte budget stops at the first repack over it", m: twoFrags(0, 0), edit: func(e *policy.Effective) {
			set(&e.Compaction.TargetRowsPerFragment, uint64(4))
			set(&e.Repack.MaxDataFilesPerFragment, uint64(2))
			set(&e.Compaction.MaxSourceBytes, uint64(2*(100+100)-1))
		}, want: want{repacks: []uint64{0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := pol(c.edit)
			p := Compute(Input{Table: "t", Manifest: c.m, Policy: e})
			var repacks []uint64
			for _, r := range p.Repacks {
				repacks = append(repacks, r.Fragment)
			}
			if got := rewriteGroups(p); !reflect.DeepEqual(got, c.want.rewrites) || !reflect.DeepEqual(repacks, c.want.repacks) {
				t.Fatalf("rewrites %v repacks %v, want %+v\n%s", got, repacks, c.want, decisionsText(p))
			}
			checkDecisions(t, c.m, p)
			// Convergence: apply every task and plan again (without the byte
			// budget); no fragment the first plan handled is planned again.
			e.Compaction.MaxSourceBytes.Value = 0
			handled := map[uint64]bool{}
			for _, r := range p.Repacks {
				handled[r.Fragment] = true
			}
			m := c.m
			for round := 0; round < 3 && !p.Empty(); round++ {
				m = applyPlan(m, p)
				p = Compute(Input{Table: "t", Manifest: m, Policy: e})
				for _, r := range p.Repacks {
					if handled[r.Fragment] {
						t.Fatalf("round %d repacks fragment %d again: %+v", round+2, r.Fragment, r)
					}
					handled[r.Fragment] = true
				}
			}
			if len(p.Repacks) != 0 {
				t.Fatalf("no convergence after 3 rounds: %+v", p.Repacks)
			}
		})
	}
}

// applyPlan is the manifest after every task of p committed.
func applyPlan(m *tablepb.Manifest, p *Plan) *tablepb.Manifest {
	s := newSchema(m.Fields)
	after := applyRewrite(m, p)
	for i, f := range after.Fragments {
		for _, r := range p.Repacks {
			if r.Fragment == f.Id {
				after.Fragments[i] = applyRepack(s, f, r)
			}
		}
	}
	return after
}

func TestPlanJSON(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
	})
	m := manifest(7, abcde, backfilled(0), frag(1, 10, 0, v20("x.lance", 1, 0, 1, 2, 3, 4)), frag(2, 10, 0, v20("y.lance", 1, 0, 1, 2, 3, 4)), backfilled(3))
	m.Fragments[0].PhysicalRows = 5000
	m.Fragments[3].PhysicalRows = 5000
	p := Compute(Input{Table: "s3://b/t", Manifest: m, Policy: e})
	if len(p.Rewrites) != 1 || len(p.Repacks) != 2 {
		t.Fatalf("plan %+v", p)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, p) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back, p)
	}
	for _, task := range p.Tasks() {
		if _, err := json.Marshal(task); err != nil {
			t.Fatalf("task %s: %v", task.Key(), err)
		}
	}
	if _, err := Decode([]byte(`{"plan_version":2,"table":"t"}`)); !errors.Is(err, ErrPlanFormat) {
		t.Fatalf("newer plan: %v", err)
	}
	if _, err := Decode([]byte(`{"table":"t"}`)); !errors.Is(err, ErrPlanFormat) {
		t.Fatalf("unversioned plan: %v", err)
	}
}

func TestRepackTaskFilesAndRemoves(t *testing.T) {
	// drop_columns(c): the base file keeps c's id; moving a, b out empties it.
	s := newSchema(project(abcde, 2))
	f := backfilled(0)
	task := repackTask("t", 3, s, f, [][]int32{{0, 1, 3, 4}})
	want := job.RepackTask{Table: "t", ReadVersion: 3, Fragment: 0, Bytes: 500,
		Files:   []job.RepackFile{{Columns: []int32{0, 1, 3, 4}, Fields: []int32{0, 1, 3, 4}, Sources: []string{"base.lance", "d.lance", "e.lance"}}},
		Removes: []string{"base.lance", "d.lance", "e.lance"}}
	if !reflect.DeepEqual(task, want) {
		t.Fatalf("task %+v\nwant %+v", task, want)
	}
}

func benchManifest(n int) *tablepb.Manifest {
	frags := make([]*tablepb.DataFragment, n)
	for i := range frags {
		switch i % 7 {
		case 0:
			frags[i] = deleted(uint64(i), 100000, 20000)
		case 3:
			frags[i] = backfilled(uint64(i))
			frags[i].PhysicalRows = 2000000
		default:
			frags[i] = small(uint64(i), 1000)
		}
	}
	return manifest(42, abcde, frags...)
}

// BenchmarkPlan plans a synthetic 100,000-fragment manifest (small,
// deleted and backfilled fragments, one index) and, in the same run, decodes
// the same manifest from its bytes: plan/decode is the planner's cost
// relative to just reading the manifest it needs.
func BenchmarkPlan(b *testing.B) {
	const n = 100000
	m := benchManifest(n)
	idx := indexMeta(b, "id_idx")
	e := pol(func(e *policy.Effective) {
		set(&e.Repack.MaxDataFilesPerFragment, uint64(2))
		set(&e.Compaction.IndexCoverage, policy.CoverageUnindex)
	})
	raw, err := format.EncodeManifest(m, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var planNs, decodeNs float64
	b.Run(fmt.Sprintf("op=plan/fragments=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: []*tablepb.IndexMetadata{idx}})
			if p.Empty() {
				b.Fatal("empty plan")
			}
		}
		planNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run(fmt.Sprintf("op=decode/fragments=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := format.DecodeManifest(raw); err != nil {
				b.Fatal(err)
			}
		}
		decodeNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if decodeNs > 0 {
		b.Logf("plan/decode = %.2f (plan %.0f ms, decode %.0f ms, manifest %d bytes)", planNs/decodeNs, planNs/1e6, decodeNs/1e6, len(raw))
	}
}

func TestUnknownWriterFeaturesPlanNothing(t *testing.T) {
	m := manifest(3, ab, small(0, 10), small(1, 10))
	m.WriterFeatureFlags = 1 << 20
	p := Compute(Input{Table: "t", Manifest: m, Policy: pol(nil)})
	if !p.Empty() || len(p.Warnings) != 1 || !strings.Contains(p.Decisions[0].Reason, "not writable") {
		t.Fatalf("plan %+v", p)
	}
}

// A fragment lanced does not support (a data file on an external base
// path, fields this release does not know) is planned as a skip with its
// reason and never put in a task, by rewrites or repacks; the fragments
// around it are still planned.
func TestUnsupportedFragmentsAreSkippedNotPlanned(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Repack.MaxDataFilesPerFragment, uint64(1))
	})
	twoFiles := func(id uint64) *tablepb.DataFragment {
		return frag(id, 10, 0, v20(fmt.Sprintf("%d-a.lance", id), 100, 0), v20(fmt.Sprintf("%d-b.lance", id), 100, 1))
	}
	external := twoFiles(3)
	external.Files[1].BaseId = proto.Uint32(1)
	unknown := twoFiles(4)
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
	m := manifest(5, ab, small(0, 10), small(1, 10), small(2, 10), external, unknown, twoFiles(5))
	p := Compute(Input{Table: "t", Manifest: m, Policy: e})
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{0, 1, 2}}) {
		t.Fatalf("rewrites %v, want [[0 1 2]]\n%s", got, decisionsText(p))
	}
	var repacked []uint64
	for _, r := range p.Repacks {
		repacked = append(repacked, r.Fragment)
	}
	if !reflect.DeepEqual(repacked, []uint64{5}) {
		t.Fatalf("repacks %v, want [5] (the supported two-file fragment)\n%s", repacked, decisionsText(p))
	}
	for i, want := range map[int]string{3: "base path", 4: "unknown fields"} {
		d := p.Decisions[i]
		if d.Action != ActionSkip || d.Task != -1 || !strings.HasPrefix(d.Reason, "unsupported: ") || !strings.Contains(d.Reason, want) {
			t.Errorf("fragment %d: decision %+v, want a skip with an unsupported reason naming %q", d.Fragment, d, want)
		}
	}
	// Planning again (nothing committed) gives the same skips: the
	// fragments are never queued, however often the table is planned.
	again := Compute(Input{Table: "t", Manifest: m, Policy: e})
	if !reflect.DeepEqual(again.Decisions[3], p.Decisions[3]) || !reflect.DeepEqual(again.Decisions[4], p.Decisions[4]) {
		t.Errorf("second plan decided %+v %+v", again.Decisions[3], again.Decisions[4])
	}
}
