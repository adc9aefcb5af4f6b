package plan

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// catchUpTable: fragments 0-1 indexed (1000 + 1000 rows), 2-4 appended
// afterwards (300 rows, 200 live of 250, 50 rows): 550 live rows unindexed
// of 2550.
func catchUpTable(t *testing.T) (*tablepb.Manifest, []*tablepb.IndexMetadata) {
	m := manifest(9, ab, small(0, 1000), small(1, 1000), small(2, 300), frag(3, 250, 50, v20("d3.lance", 10, 0, 1)), small(4, 50))
	return m, []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0, 1), vectorIndex(t, "vec_idx", 0), vectorIndex(t, "vec_idx", 1), detailsIndex(t, "body_idx", "/lance.table.InvertedIndexDetails", 0, 1)}
}

func TestCatchUpBacklogAndDefaultPolicy(t *testing.T) {
	m, idx := catchUpTable(t)
	p := Compute(Input{Table: "t", Manifest: m, Policy: pol(nil), Indices: idx})
	for _, name := range []string{"id_idx", "vec_idx", "body_idx"} {
		cu := indexDecision(t, p, name).CatchUp
		if cu == nil {
			t.Fatalf("%s: no catch-up decision", name)
		}
		if !reflect.DeepEqual(cu.Fragments, []uint64{2, 3, 4}) || cu.Rows != 550 || cu.LiveRows != 2550 {
			t.Fatalf("%s backlog: %+v", name, cu.Backlog)
		}
	}
	// No bound set: any unindexed row is due, as Lance's optimize()
	// catches up every index; lanced cannot do it for an fts index whose
	// details it cannot read (no language), and says why.
	if cu := indexDecision(t, p, "body_idx").CatchUp; cu.Action != CatchUpDue || !strings.Contains(cu.Reason, "no bound set") || !strings.Contains(cu.Reason, "cannot tokenize new rows exactly") {
		t.Fatalf("body_idx: %+v", cu)
	}
	// ivfPq and btree are caught up, but their unindexed fragments are
	// small ones the plan rewrites first: no catch-up task until they are
	// settled.
	for _, name := range []string{"vec_idx", "id_idx"} {
		if cu := indexDecision(t, p, name).CatchUp; cu.Action != CatchUpPlanned || !strings.Contains(cu.Reason, "fragment 2 is rewritten first") || len(p.CatchUps) != 0 {
			t.Fatalf("%s: %+v, tasks %+v", name, cu, p.CatchUps)
		}
	}
	if d := indexDecision(t, p, "vec_idx"); d.Segments != 2 {
		t.Fatalf("vec_idx segments %d", d.Segments)
	}
}

func TestCatchUpBounds(t *testing.T) {
	m, idx := catchUpTable(t)
	for _, tc := range []struct {
		name   string
		edit   func(e *policy.Effective)
		action string
		reason string
	}{
		{"rows within", func(e *policy.Effective) { set(&e.Index.MaxUnindexedRows, uint64(550)) }, CatchUpWithin, "within the index policy"},
		{"rows over", func(e *policy.Effective) { set(&e.Index.MaxUnindexedRows, uint64(549)) }, CatchUpDue, "> max_unindexed_rows 549"},
		{"fraction within", func(e *policy.Effective) { set(&e.Index.MaxUnindexedFraction, 0.25) }, CatchUpWithin, "21.57% of live rows"},
		{"fraction over", func(e *policy.Effective) { set(&e.Index.MaxUnindexedFraction, 0.2) }, CatchUpDue, "> max_unindexed_fraction 0.2"},
		{"either bound", func(e *policy.Effective) {
			set(&e.Index.MaxUnindexedRows, uint64(10000))
			set(&e.Index.MaxUnindexedFraction, 0.2)
		}, CatchUpDue, "max_unindexed_fraction"},
		{"scope repack", func(e *policy.Effective) { set(&e.Scope, policy.ScopeRepack) }, CatchUpSkipped, "not in scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(Input{Table: "t", Manifest: m, Policy: pol(tc.edit), Indices: idx})
			cu := indexDecision(t, p, "body_idx").CatchUp
			if cu.Action != tc.action || !strings.Contains(cu.Reason, tc.reason) {
				t.Fatalf("got %s: %s", cu.Action, cu.Reason)
			}
		})
	}
}

// Segment merge: a vector index gets one more delta segment per catch-up
// (Lance's default, unless a partition is to be split or joined), a scalar
// index is replaced by one segment. Past max_segments the vector catch-up
// merges every segment into one.
func TestCatchUpMaxSegments(t *testing.T) {
	m, idx := catchUpTable(t)
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Index.MaxSegments, uint64(2))
	})})
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpPlanned || !cu.Merge || !strings.Contains(cu.Reason, "3 segment(s) > max_segments 2") || !strings.Contains(cu.Reason, "every segment merged into one") {
		t.Fatalf("vec_idx: %+v", cu)
	}
	if cu := indexDecision(t, p, "id_idx").CatchUp; strings.Contains(cu.Reason, "max_segments") || cu.Merge {
		t.Fatalf("id_idx: %+v", cu)
	}
	// Within max_segments: a delta.
	p = Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Index.MaxSegments, uint64(3))
	})})
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpPlanned || cu.Merge || strings.Contains(cu.Reason, "max_segments") {
		t.Fatalf("vec_idx within max_segments: %+v", cu)
	}
}

// Past max_segments with nothing unindexed beyond the policy's bounds: one
// task merges the segments (it takes the unindexed fragments the plan does
// not rewrite along); with every row indexed, a merge-only task.
func TestCatchUpMergeTask(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100), small(2, 100))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0), vectorIndex(t, "vec_idx", 1), vectorIndex(t, "vec_idx", 2)}
	scope := func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
		set(&e.Index.MaxSegments, uint64(2))
	}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(scope)})
	want := []job.CatchUpTask{{Table: "t", ReadVersion: 3, Index: "vec_idx", Merge: true}}
	if !reflect.DeepEqual(p.CatchUps, want) {
		t.Fatalf("tasks %+v, want %+v", p.CatchUps, want)
	}
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpPlanned || !strings.Contains(cu.Reason, "3 segment(s) > max_segments 2") || !strings.Contains(cu.Reason, "merges the index's 3 segment(s)") {
		t.Fatalf("vec_idx: %+v", cu)
	}
	if err := (job.Task{CatchUp: &p.CatchUps[0]}).Validate(); err != nil {
		t.Fatalf("merge-only task: %v", err)
	}
	// The segment count fits: nothing to do.
	p = Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{idx[0], vectorIndex(t, "vec_idx", 1, 2)}, Policy: pol(scope)})
	if len(p.CatchUps) != 0 {
		t.Fatalf("tasks %+v for 2 segments", p.CatchUps)
	}
}

// A backlog past catchup_part_rows is one task of delta parts (whole
// fragments, at most the bound each) merged by one task, which merges the
// segments too when max_segments asks.
func TestCatchUpBacklogInParts(t *testing.T) {
	big := func(id uint64) *tablepb.DataFragment { return small(id, CatchUpMaxRows/2+1) }
	m := manifest(5, ab, small(0, 100), big(1), big(2), big(3), small(4, 10))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0)}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
		set(&e.Index.MaxSegments, uint64(1))
	})})
	want := []job.RowRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: 4}}
	if len(p.CatchUps) != 1 || !p.CatchUps[0].Merge || !slices.Equal(p.CatchUps[0].Fragments, []uint64{1, 2, 3, 4}) || !slices.Equal(p.CatchUps[0].Slices, want) {
		t.Fatalf("tasks %+v", p.CatchUps)
	}
	if cu := indexDecision(t, p, "vec_idx").CatchUp; !strings.Contains(cu.Reason, "run as 3 delta tasks of at most 262144 row(s)") {
		t.Fatalf("vec_idx: %+v", cu)
	}
	tasks := p.Tasks()
	if len(tasks) != 3 || tasks[0].Slice == nil || tasks[2].Slice.Index != 2 {
		t.Fatalf("plan tasks %+v", tasks)
	}
	for _, tk := range tasks {
		if err := tk.Validate(); err != nil {
			t.Fatalf("%s: %v", tk.Key(), err)
		}
	}
	if got := tasks[2].Slice.CatchUp.Part(2).Fragments; !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("delta 3 fragments %v", got)
	}
}

// Without parts (a kind that does not split, here catchup_part_rows 0) a
// backlog past one task's bound is caught up by delta tasks, one per
// plan; only the task that takes its last fragments merges.
func TestCatchUpBacklogMergesLast(t *testing.T) {
	big := func(id uint64) *tablepb.DataFragment { return small(id, CatchUpMaxRows/2+1) }
	m := manifest(5, ab, small(0, 100), big(1), big(2), big(3))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0)}
	policyOf := pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
		set(&e.Index.MaxSegments, uint64(1))
		set(&e.Index.CatchUpPartRows, uint64(0))
	})
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: policyOf})
	if len(p.CatchUps) != 1 || p.CatchUps[0].Merge || !slices.Equal(p.CatchUps[0].Fragments, []uint64{1}) {
		t.Fatalf("first task %+v", p.CatchUps)
	}
	if cu := indexDecision(t, p, "vec_idx").CatchUp; !strings.Contains(cu.Reason, "merged by the task that takes the backlog's last fragments") {
		t.Fatalf("vec_idx: %+v", cu)
	}
	// Two delta segments later, the last fragment's task merges them.
	idx = append(idx, vectorIndex(t, "vec_idx", 1), vectorIndex(t, "vec_idx", 2))
	p = Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: policyOf})
	if len(p.CatchUps) != 1 || !p.CatchUps[0].Merge || !slices.Equal(p.CatchUps[0].Fragments, []uint64{3}) {
		t.Fatalf("last task %+v", p.CatchUps)
	}
}

// The index scope plans no rewrite or repack, only catch-up; a current
// index says so; a supported kind is planned.
func TestCatchUpScopeIndexAndPlanned(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100))
	idx := []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0, 1), vectorIndex(t, "vec_idx", 0)}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	if len(p.Rewrites)+len(p.Repacks) > 0 {
		t.Fatalf("scope index planned rewrites or repacks: %+v", p)
	}
	want := []job.CatchUpTask{{Table: "t", ReadVersion: 3, Index: "vec_idx", Fragments: []uint64{1}, Rows: 100}}
	if !reflect.DeepEqual(p.CatchUps, want) {
		t.Fatalf("catch-up tasks %+v, want %+v", p.CatchUps, want)
	}
	if cu := indexDecision(t, p, "id_idx").CatchUp; cu.Action != CatchUpCurrent || cu.Rows != 0 || len(cu.Fragments) != 0 {
		t.Fatalf("id_idx: %+v", cu)
	}
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpPlanned || cu.Rows != 100 {
		t.Fatalf("vec_idx: %+v", cu)
	}
}

// reuseIndex is a fragment reuse index with one version, read at version
// 2, in which old fragments 5 and 6 became fragment 1.
func reuseIndex(t *testing.T) *tablepb.IndexMetadata {
	t.Helper()
	ra := index.NewRetainedAddrs()
	ra.AddFragment(5, 50, nil)
	ra.AddFragment(6, 50, nil)
	b, err := ra.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	fr := &index.FragReuse{Versions: []index.ReuseVersion{{DatasetVersion: 2, Groups: []index.ReuseGroup{{
		Retained: b, Old: []index.FragDigest{{ID: 5, PhysicalRows: 50}, {ID: 6, PhysicalRows: 50}}, New: []index.FragDigest{{ID: 1, PhysicalRows: 100}}}}}}}
	m, err := fr.Build([16]byte{9}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// On a table with a fragment reuse index (a deferred remap), coverage is
// read through it as Lance reads it: an index built before the deferred
// compaction covers its new fragment. lanced does not catch up (or merge)
// such an index, which still relies on the reuse index for those rows; an
// index built after it is caught up as usual; a reuse index that cannot be
// read blocks catch-up with the reason.
func TestCatchUpUnderFragmentReuse(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100), small(2, 100))
	scope := pol(func(e *policy.Effective) { set(&e.Scope, policy.ScopeIndex) })
	old := vectorIndex(t, "vec_idx", 0, 5, 6)
	p := Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{old, reuseIndex(t)}, Policy: scope})
	d := indexDecision(t, p, "vec_idx")
	if cu := d.CatchUp; cu.Action != CatchUpDue || cu.Rows != 100 || !slices.Equal(cu.Fragments, []uint64{2}) || !strings.Contains(cu.Reason, "fragment reuse index") || len(p.CatchUps) != 0 {
		t.Fatalf("vec_idx built before the deferred compaction: %+v, tasks %+v", cu, p.CatchUps)
	}
	if !slices.Equal(d.Covered, []uint64{0, 1}) {
		t.Fatalf("covered %v, want 0 and 1 (5 and 6 through the reuse index)", d.Covered)
	}
	for _, x := range p.Indices {
		if x.Name == index.FragReuseName {
			t.Fatalf("the reuse index is planned like an index: %+v", x)
		}
	}
	fresh := vectorIndex(t, "vec_idx", 0, 1)
	fresh.DatasetVersion = 3
	p = Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{fresh, reuseIndex(t)}, Policy: scope})
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpPlanned || len(p.CatchUps) != 1 || !slices.Equal(p.CatchUps[0].Fragments, []uint64{2}) {
		t.Fatalf("vec_idx built after it: %+v, tasks %+v", cu, p.CatchUps)
	}
	bad := indexMeta(t, index.FragReuseName, 1)
	bad.Fields = nil
	p = Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{fresh, bad}, Policy: scope})
	if cu := indexDecision(t, p, "vec_idx").CatchUp; cu.Action != CatchUpDue || !strings.Contains(cu.Reason, "cannot be read") || len(p.Warnings) == 0 {
		t.Fatalf("unreadable reuse index: %+v, warnings %v", cu, p.Warnings)
	}
}

// index_coverage = defer rewrites indexed fragments (coverage read through
// the reuse index) and reports every covering index as deferred; remap
// keeps the fragments of an index that still relies on the reuse index.
func TestDeferPlansThroughFragmentReuse(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100), small(2, 100))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0, 5, 6), detailsIndex(t, "cat_idx", "/lance.table.BitmapIndexDetails", 0, 5, 6), reuseIndex(t)}
	deferred := pol(func(e *policy.Effective) { set(&e.Compaction.IndexCoverage, policy.CoverageDefer) })
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: deferred})
	if got := rewriteGroups(p); len(got) != 1 || !slices.Equal(got[0], []uint64{0, 1}) {
		t.Fatalf("groups %v, want the indexed 0,1 (the unindexed 2 is binned apart); %+v %v", got, p.Decisions, p.Warnings)
	}
	for _, n := range []string{"vec_idx", "cat_idx"} {
		if d := indexDecision(t, p, n); d.Action != IndexDeferred || !slices.Equal(d.Rewritten, []uint64{0, 1}) {
			t.Fatalf("%s: %+v", n, d)
		}
	}
	if p.Rewrites[0].IndexCoverage != job.DeferIndexRemap {
		t.Fatalf("task coverage %q", p.Rewrites[0].IndexCoverage)
	}
	p = Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(nil)})
	if d := indexDecision(t, p, "vec_idx"); d.Action != IndexKeep || !strings.Contains(d.Reason, "deferred compaction") {
		t.Fatalf("remap of an index behind the reuse index: %+v", d)
	}
	// A BTree is remapped, not deferred: one still relying on the reuse
	// index keeps its fragments under defer too; a current one is remapped.
	old := append(slices.Clone(idx), btreeIndex(t, "id_idx", 0, 5, 6))
	p = Compute(Input{Table: "t", Manifest: m, Indices: old, Policy: deferred})
	if d := indexDecision(t, p, "id_idx"); d.Action != IndexKeep || !strings.Contains(d.Reason, "deferred compaction") || len(p.Rewrites) != 0 {
		t.Fatalf("btree behind the reuse index under defer: %+v", d)
	}
	cur := btreeIndex(t, "id_idx", 0, 1)
	cur.DatasetVersion = 3
	p = Compute(Input{Table: "t", Manifest: m, Indices: append(slices.Clone(idx), cur), Policy: deferred})
	if d := indexDecision(t, p, "id_idx"); d.Action != IndexRemap || !strings.Contains(d.Reason, "btree") {
		t.Fatalf("current btree under defer: %+v", d)
	}
}

func detailsIndex(t *testing.T, name, typeURL string, ids ...uint32) *tablepb.IndexMetadata {
	ix := indexMeta(t, name, ids...)
	ix.IndexDetails = &anypb.Any{TypeUrl: typeURL}
	return ix
}

// Scalar kinds are caught up, an index of two segments too (its segments
// and the new rows merged into one: Lance keeps one per scalar index), fm
// too (rebuilt from the column, bounded by index.fm_max_bytes); an FTS
// index (of two segments) whose details do not name the params lanced
// must tokenize with is due with its reason.
func TestCatchUpScalarKinds(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100))
	idx := []*tablepb.IndexMetadata{
		btreeIndex(t, "id_idx", 0),
		detailsIndex(t, "cat_idx", "/lance.table.BitmapIndexDetails", 0),
		detailsIndex(t, "tags_idx", "/lance.table.LabelListIndexDetails", 0),
		btreeIndex(t, "two_idx", 0), btreeIndex(t, "two_idx", 0),
		detailsIndex(t, "fm_idx", "/lance.index.pb.FMIndexDetails", 0),
		detailsIndex(t, "text_idx", "/lance.table.InvertedIndexDetails", 0), detailsIndex(t, "text_idx", "/lance.table.InvertedIndexDetails", 0),
	}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	var planned []string
	for _, c := range p.CatchUps {
		if !reflect.DeepEqual(c.Fragments, []uint64{1}) || (c.Index == "fm_idx") != (c.FMMaxBytes == policy.DefaultFMMaxBytes) {
			t.Fatalf("task %+v", c)
		}
		planned = append(planned, c.Index)
	}
	if want := []string{"cat_idx", "fm_idx", "id_idx", "tags_idx", "two_idx"}; !reflect.DeepEqual(slices.Sorted(slices.Values(planned)), want) {
		t.Fatalf("catch-ups of %v, want %v", planned, want)
	}
	if cu := indexDecision(t, p, "two_idx").CatchUp; !strings.Contains(cu.Reason, "its 2 segments merged into one") {
		t.Fatalf("two_idx: %+v", cu)
	}
	if cu := indexDecision(t, p, "fm_idx").CatchUp; !strings.Contains(cu.Reason, "rebuilt from the column") {
		t.Fatalf("fm_idx: %+v", cu)
	}
	// A partition file whose text passes index.fm_max_bytes: due, with
	// the numbers.
	fmBig := detailsIndex(t, "fm_idx", "/lance.index.pb.FMIndexDetails", 0)
	fmBig.Files = []*tablepb.IndexFile{{Path: "part_0_fm.lance", SizeBytes: 1 << 20}, {Path: "part_1_fm.lance", SizeBytes: 8 << 20}}
	big := Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{fmBig}, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
		set(&e.Index.FMMaxBytes, 4<<20)
	})})
	if cu := indexDecision(t, big, "fm_idx").CatchUp; cu.Action != CatchUpDue || len(big.CatchUps) != 0 ||
		!strings.Contains(cu.Reason, "about 10485760 bytes of text (estimated from part_1_fm.lance's size), over index.fm_max_bytes 4194304") {
		t.Fatalf("fm_idx over fm_max_bytes: %+v", cu)
	}
	for name, why := range map[string]string{
		"text_idx": "InvertedIndexDetails without a language",
	} {
		if cu := indexDecision(t, p, name).CatchUp; cu.Action != CatchUpDue || !strings.Contains(cu.Reason, why) {
			t.Fatalf("%s: %+v", name, cu)
		}
	}
}

// On a table with stable row ids the kinds lanced catches up under row ids
// are planned; the others stay due, saying why.
func TestCatchUpStableRowIDs(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100))
	m.ReaderFeatureFlags |= format.FlagStableRowIDs
	m.WriterFeatureFlags |= format.FlagStableRowIDs
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0), btreeIndex(t, "id_idx", 0), detailsIndex(t, "body_idx", "/lance.table.InvertedIndexDetails", 0)}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	var planned []string
	for _, c := range p.CatchUps {
		planned = append(planned, c.Index)
	}
	slices.Sort(planned)
	if !slices.Equal(planned, []string{"id_idx", "vec_idx"}) {
		t.Fatalf("planned %v", planned)
	}
	if cu := indexDecision(t, p, "body_idx").CatchUp; cu.Action != CatchUpDue {
		t.Fatalf("body_idx: %+v", cu)
	}
}

// With no bound set, the rewrite comes first (as Lance's optimize() orders
// it) until an index has more than DefaultCatchUpFirstRows unindexed rows
// that are also more than DefaultCatchUpFirstFraction of its live rows;
// past both, its unindexed fragments are caught up before they are
// compacted, so a live writer cannot keep them unindexed by having them
// rewritten with the newest appends on every plan.
func TestCatchUpFirstByDefaultPastBothBounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		indexed   uint64 // rows of each of the two indexed fragments
		unindexed []uint64
		first     bool
	}{
		{"under the rows", 10_000, []uint64{5000, 4000, 1000}, false},   // 10,000 rows: not > 10,000
		{"under the share", 60_000, []uint64{6000, 5000, 1000}, false},  // 12,000 of 132,000: 9.1%
		{"past both", 40_000, []uint64{6000, 5000, 1000}, true},         // 12,000 of 92,000: 13%
		{"past both, one fragment", 20_000, []uint64{11_000, 10}, true}, // the last rewrite's output and a new append
	} {
		t.Run(tc.name, func(t *testing.T) {
			frags := []*tablepb.DataFragment{small(0, tc.indexed), small(1, tc.indexed)}
			var want []uint64
			for i, n := range tc.unindexed {
				frags = append(frags, small(uint64(2+i), n))
				want = append(want, uint64(2+i))
			}
			m := manifest(9, ab, frags...)
			p := Compute(Input{Table: "t", Manifest: m, Policy: pol(nil), Indices: []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0, 1)}})
			var rewritten []uint64 // unindexed fragments in a rewrite (the indexed ones are small too: rewritten with a remap)
			for _, r := range p.Rewrites {
				for _, id := range r.Fragments {
					if id >= 2 {
						rewritten = append(rewritten, id)
					}
				}
			}
			var caught []uint64
			for _, c := range p.CatchUps {
				caught = append(caught, c.Fragments...)
			}
			if !tc.first {
				if !slices.Equal(rewritten, want) || len(caught) != 0 {
					t.Fatalf("rewrites %v, catch-ups %v: want the unindexed fragments %v rewritten first", rewritten, caught, want)
				}
				return
			}
			if len(rewritten) != 0 || !slices.Equal(caught, want) {
				t.Fatalf("rewrites %v, catch-ups %v: want %v caught up first", rewritten, caught, want)
			}
			for _, d := range p.Decisions {
				if d.Fragment >= 2 && !strings.Contains(d.Reason, "caught up into vec_idx before it is compacted (no bound set") {
					t.Fatalf("fragment %d: %q", d.Fragment, d.Reason)
				}
			}
		})
	}
}

// ftsIndex is an FTS index entry whose details (lance's
// InvertedIndexDetails) record the given tokenizer params.
func ftsIndex(t *testing.T, name, base, language string, stem bool, ids ...uint32) *tablepb.IndexMetadata {
	ix := indexMeta(t, name, ids...)
	maxLen := uint32(40)
	v, err := proto.Marshal(&tablepb.InvertedIndexDetails{
		BaseTokenizer: &base, Language: `"` + language + `"`, MaxTokenLength: &maxLen,
		LowerCase: true, Stem: stem, RemoveStopWords: true, AsciiFolding: true, MinNgramLength: 3, MaxNgramLength: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	ix.IndexDetails = &anypb.Any{TypeUrl: "/lance.table.InvertedIndexDetails", Value: v}
	return ix
}

// FTS indices are caught up when lanced tokenizes exactly as Lance does
// with their params (simple tokenizer, English), an index of two segments
// too (merged into one); others are due with the reason.
func TestCatchUpFTSParams(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100))
	idx := []*tablepb.IndexMetadata{
		ftsIndex(t, "body_idx", "simple", "English", true, 0),
		ftsIndex(t, "ngram_idx", "ngram", "English", false, 0),
		ftsIndex(t, "french_idx", "simple", "French", true, 0),
		ftsIndex(t, "two_idx", "simple", "English", true, 0), ftsIndex(t, "two_idx", "simple", "English", true, 0),
	}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	want := []job.CatchUpTask{{Table: "t", ReadVersion: 3, Index: "body_idx", Fragments: []uint64{1}, Rows: 100}, {Table: "t", ReadVersion: 3, Index: "two_idx", Fragments: []uint64{1}, Rows: 100}}
	if !reflect.DeepEqual(p.CatchUps, want) {
		t.Fatalf("catch-ups %+v, want %+v", p.CatchUps, want)
	}
	if cu := indexDecision(t, p, "two_idx").CatchUp; cu.Action != CatchUpPlanned || !strings.Contains(cu.Reason, "its 2 segments merged into one") {
		t.Fatalf("two_idx: %+v", cu)
	}
	for name, why := range map[string]string{
		"ngram_idx":  `base_tokenizer "ngram"`,
		"french_idx": "stemming for language French",
	} {
		if cu := indexDecision(t, p, name).CatchUp; cu.Action != CatchUpDue || !strings.Contains(cu.Reason, why) {
			t.Fatalf("%s: %+v", name, cu)
		}
	}
}

// IVF_RQ is caught up with 1 to 9 bits per dimension (VectorIndexDetails
// rq field 1, as lance 8.0.0 writes it); with a width lance does not build
// (or details that do not say) it is due, saying why.
func TestCatchUpRQBits(t *testing.T) {
	m := manifest(3, ab, small(0, 100), small(1, 100))
	rq := func(name string, bits byte) *tablepb.IndexMetadata {
		ix := indexMeta(t, name, 0)
		ix.IndexDetails = &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails", Value: []byte{0x32, 0x02, 0x08, bits}}
		return ix
	}
	p := Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{rq("one_idx", 1), rq("ten_idx", 10)}, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	if cu := indexDecision(t, p, "one_idx").CatchUp; cu.Action != CatchUpPlanned {
		t.Fatalf("one_idx: %+v", cu)
	}
	if cu := indexDecision(t, p, "ten_idx").CatchUp; cu.Action != CatchUpDue || !strings.Contains(cu.Reason, "1 to 9 bits per dimension, as lance 8.0.0 builds it (this index: 10") {
		t.Fatalf("ten_idx: %+v", cu)
	}
	q := Compute(Input{Table: "t", Manifest: m, Indices: []*tablepb.IndexMetadata{rq("nine_idx", 9)}, Policy: pol(func(e *policy.Effective) {
		set(&e.Scope, policy.ScopeIndex)
	})})
	if cu := indexDecision(t, q, "nine_idx").CatchUp; cu.Action != CatchUpPlanned {
		t.Fatalf("nine_idx: %+v", cu)
	}
	if len(p.CatchUps) != 1 || p.CatchUps[0].Index != "one_idx" {
		t.Fatalf("catch-ups %+v", p.CatchUps)
	}
}

// A btree of two segments is not split into delta tasks (its catch-up
// merges the segments, which a merge of deltas does not): the reason says
// so and what bounds its one task; the task takes at most CatchUpMaxRows.
func TestCatchUpNoPartsReason(t *testing.T) {
	big := func(id uint64) *tablepb.DataFragment { return small(id, CatchUpMaxRows/2+1) }
	m := manifest(5, ab, small(0, 100), big(1), big(2), big(3))
	idx := []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0), btreeIndex(t, "id_idx", 0)}
	p := Compute(Input{Table: "t", Manifest: m, Indices: idx, Policy: pol(func(e *policy.Effective) { set(&e.Scope, policy.ScopeIndex) })})
	if len(p.CatchUps) != 1 || len(p.CatchUps[0].Slices) != 0 || p.CatchUps[0].Rows > CatchUpMaxRows {
		t.Fatalf("tasks %+v", p.CatchUps)
	}
	cu := indexDecision(t, p, "id_idx").CatchUp
	if !strings.Contains(cu.Reason, "not split into delta tasks (catchup_part_rows): the catch-up merges the index's 2 segments into one") {
		t.Fatalf("id_idx: %+v", cu)
	}
	t.Log(cu.Reason)
}
