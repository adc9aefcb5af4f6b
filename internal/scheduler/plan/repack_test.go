package plan

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// Lineage field ids of a spilled row lineage (row ids).
const rowIDField = -3

var (
	abcde = fields(top(0, "a"), top(1, "b"), top(2, "c"), top(3, "d"), top(4, "e"))
	// structCols builds a=0, s=1 {x=2, y=3[, z=4]}, then extra top-level
	// columns; drop removes field ids from the schema.
)

// backfilled is a fragment of four rows written as [a, b, c] then two add_columns
// backfills, [d] and [e]; the base file is the largest.
func backfilled(id uint64) *tablepb.DataFragment {
	return frag(id, 4, 0, v20("base.lance", 300, 0, 1, 2), v20("d.lance", 100, 3), v20("e.lance", 100, 4))
}

func project(fs []*filepb.Field, drop ...int32) []*filepb.Field {
	var out []*filepb.Field
	for _, f := range fs {
		keep := true
		for _, d := range drop {
			if f.Id == d {
				keep = false
			}
		}
		if keep {
			out = append(out, f)
		}
	}
	return out
}

type repackCase struct {
	name   string
	schema []*filepb.Field
	frag   *tablepb.DataFragment
	groups [][]int32 // nil: no groups
	max    uint64
	want   [][]int32 // nil: nothing planned
	// rounds is how many repacks the layout needs before a plan is empty
	// (0 means 1). The planner prefers leaving the largest file in place over
	// reaching the limit in one step, so one layout takes two.
	rounds int
}

func (c repackCase) run(t *testing.T) {
	t.Helper()
	s := newSchema(c.schema)
	got, why := planFragmentRepack(s, c.frag, c.groups, c.max)
	if !reflect.DeepEqual(got, c.want) {
		t.Fatalf("planned %v (%s), want %v", got, why, c.want)
	}
	if got == nil {
		if why == "" {
			t.Fatal("nothing planned without a reason")
		}
		return
	}
	// Never add a file: the commit leaves fewer live files, or (for a group
	// move) no more than before.
	task := repackTask("t", 1, s, c.frag, got)
	after := applyRepack(s, c.frag, task)
	if before, now := liveFileCount(s, c.frag), liveFileCount(s, after); now > before || (c.groups == nil && now >= before) {
		t.Fatalf("repack goes from %d to %d live files", before, now)
	}
	// Convergence: the layout the repack leaves plans nothing (after
	// c.rounds repacks when keeping the largest file in place takes two).
	for round := 1; round < max(c.rounds, 1); round++ {
		again, why := planFragmentRepack(s, after, c.groups, c.max)
		if again == nil {
			t.Fatalf("round %d planned nothing (%s); the case says %d rounds", round+1, why, c.rounds)
		}
		after = applyRepack(s, after, repackTask("t", 1, s, after, again))
	}
	if again, _ := planFragmentRepack(s, after, c.groups, c.max); again != nil {
		t.Fatalf("plan on the result is not empty: %v (layout %v)", again, layoutOf(after))
	}
}

func layoutOf(f *tablepb.DataFragment) [][]int32 {
	var out [][]int32
	for _, df := range f.Files {
		out = append(out, df.Fields)
	}
	return out
}

func TestRepackCases(t *testing.T) {
	blob4 := fields(top(0, "id"), blobCol(1, "img"), top(2, "d"), top(3, "e"))
	lineageABC := fields(top(0, "a"), top(1, "b"), top(2, "c"))
	lineageFrag := frag(0, 4, 0, v20("lineage.lance", 10, 0, rowIDField), v20("b.lance", 10, 1), v20("c.lance", 10, 2))
	// a=0, s=1 {x=2 (dropped), y=3}.
	aSxy := fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1))
	// a=0, s=1 {x=2, y=3, z=4}, b=5.
	aSxyzB := fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), child(4, "z", 1), top(5, "b"))
	cases := []repackCase{
		{name: "repack_collapses_backfilled_files", schema: abcde, frag: backfilled(0), max: 1, want: [][]int32{{0, 1, 2, 3, 4}}},
		{name: "repack_keeps_the_biggest_file", schema: abcde, frag: backfilled(0), max: 2, want: [][]int32{{3, 4}}},
		{name: "repack_follows_column_groups", schema: abcde, frag: backfilled(0), groups: [][]int32{{2, 4}}, want: [][]int32{{2, 4}}},
		{name: "repack_follows_column_groups/matching_layout", schema: abcde, frag: backfilled(0), groups: [][]int32{{3}, {4}}, want: nil},
		{name: "repack_is_not_planned_at_the_limit", schema: abcde, frag: backfilled(0), max: 3, want: nil},
		{name: "repack_merges_unclaimed_columns_over_the_limit", schema: abcde, frag: backfilled(0), groups: [][]int32{{4}}, max: 2, want: [][]int32{{0, 1, 2, 3}}},
		{name: "repack_drops_file_left_with_only_dropped_columns", schema: project(abcde, 2), frag: backfilled(0), max: 1, want: [][]int32{{0, 1, 3, 4}}},
		{name: "repack_skips_legacy_files", schema: abcde, frag: frag(0, 4, 0, legacy("a.lance", 0, 1, 2)), groups: [][]int32{{2}}, want: nil},
		{name: "repack_skips_a_fragment_holding_a_legacy_file", schema: lineageABC,
			frag: frag(0, 4, 0, legacy("legacy.lance", 0), v20("b.lance", 1, 1), v20("c.lance", 1, 2)), max: 1, want: nil},
		{name: "repack_skips_a_fragment_holding_a_legacy_file/all_v2", schema: lineageABC,
			frag: frag(0, 4, 0, v20("a.lance", 1, 0), v20("b.lance", 1, 1), v20("c.lance", 1, 2)), max: 1, want: [][]int32{{0, 1, 2}}},
		{name: "repack_keeps_the_spilled_lineage_file/max2", schema: lineageABC, frag: lineageFrag, max: 2, want: [][]int32{{1, 2}}},
		{name: "repack_keeps_the_spilled_lineage_file/max1", schema: lineageABC, frag: lineageFrag, max: 1, want: [][]int32{{1, 2}}},
		{name: "repack_keeps_the_spilled_lineage_file/group_with_lineage_column", schema: lineageABC, frag: lineageFrag, groups: [][]int32{{0, 1}}, want: nil},
		{name: "repack_keeps_the_spilled_lineage_file/group_of_others", schema: lineageABC, frag: lineageFrag, groups: [][]int32{{1, 2}}, want: [][]int32{{1, 2}}},
		{name: "repack_ignores_struct_header_without_children/groups", schema: project(aSxy, 2),
			frag: frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("s.lance", 1, 1, 3)), groups: [][]int32{{1}}, want: nil},
		{name: "repack_ignores_struct_header_without_children/max1", schema: project(aSxy, 2),
			frag: frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("s.lance", 1, 1, 3)), max: 1, want: [][]int32{{0, 1}}},
		{name: "repack_merges_around_a_blob_column", schema: blob4,
			frag: frag(0, 4, 0, v20("base.lance", 1, 0, 1), v20("d.lance", 1, 2), v20("e.lance", 1, 3)), max: 1, want: [][]int32{{2, 3}}},
		{name: "repack_merges_every_movable_file_next_to_one_that_stays", schema: fields(top(0, "id"), blobCol(1, "img"), top(2, "d"), top(3, "e"), top(4, "f")),
			frag: frag(0, 4, 0, v20("base.lance", 1, 0, 1), v20("d.lance", 1, 2), v20("e.lance", 1, 3), v20("f.lance", 1, 4)), max: 2, want: [][]int32{{2, 3, 4}}},
		{name: "repack_leaves_a_group_holding_a_blob_column", schema: fields(top(0, "id"), blobCol(1, "img"), top(2, "d")),
			frag: frag(0, 4, 0, v20("base.lance", 1, 0, 1), v20("d.lance", 1, 2)), groups: [][]int32{{1, 2}}, want: nil},
		{name: "repack_leaves_a_group_holding_a_blob_column/movable_group", schema: fields(top(0, "id"), blobCol(1, "img"), top(2, "d")),
			frag: frag(0, 4, 0, v20("base.lance", 1, 0, 1), v20("d.lance", 1, 2)), groups: [][]int32{{0, 2}}, want: [][]int32{{0, 2}}},
		{name: "repack_merges_around_a_blob_outside_the_kept_file/max1", schema: fields(top(0, "a"), blobCol(1, "img"), top(2, "d"), top(3, "e")),
			frag: frag(0, 4, 0, v20("lineage.lance", 1, 0, rowIDField), v20("img.lance", 1, 1), v20("d.lance", 1, 2), v20("e.lance", 1, 3)), max: 1, want: [][]int32{{2, 3}}},
		{name: "repack_merges_around_a_blob_outside_the_kept_file/max2", schema: fields(top(0, "a"), blobCol(1, "img"), top(2, "d"), top(3, "e")),
			frag: frag(0, 4, 0, v20("lineage.lance", 1, 0, rowIDField), v20("img.lance", 1, 1), v20("d.lance", 1, 2), v20("e.lance", 1, 3)), max: 2, want: [][]int32{{2, 3}}},
		{name: "repack_never_adds_a_file/lineage_and_mixed_blob", schema: fields(top(0, "a"), blobCol(1, "img"), top(2, "d")),
			frag: frag(0, 4, 0, v20("lineage.lance", 1, 0, rowIDField), v20("mixed.lance", 1, 1, 2)), max: 1, want: nil},
		{name: "repack_never_adds_a_file/two_mixed_blob_files", schema: fields(top(0, "id"), blobCol(1, "img1"), blobCol(2, "img2"), top(3, "cap")),
			frag: frag(0, 4, 0, v20("base.lance", 1, 0, 1), v20("extra.lance", 1, 2, 3)), max: 1, want: nil},
		{name: "repack_never_adds_a_file/mixed_and_two_movable", schema: fields(blobCol(0, "img"), top(1, "d"), top(2, "e"), top(3, "f")),
			frag: frag(0, 4, 0, v20("mixed.lance", 1, 0, 1), v20("e.lance", 1, 2), v20("f.lance", 1, 3)), max: 2, want: [][]int32{{2, 3}}},
		{name: "repack_moves_a_struct_with_its_header/one_header",
			schema: project(fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), top(4, "b"), top(5, "c")), 2),
			frag:   frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("s.lance", 1, 1, 3, 5), v20("b.lance", 1, 4)), max: 2, want: [][]int32{{1, 4, 5}}},
		{name: "repack_moves_a_struct_with_its_header/two_headers",
			schema: project(fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), child(4, "z", 1), top(5, "b"), top(6, "c")), 2, 4),
			frag:   frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("b.lance", 1, 5, 1, 4), v20("s.lance", 1, 1, 3, 6)), max: 2, want: [][]int32{{1, 5, 6}}},
		{name: "repack_merges_only_files_it_empties/headers_under_groups", schema: project(aSxyzB, 2, 4),
			frag: frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("b.lance", 1, 5, 1, 4), v20("s.lance", 1, 1, 3)), groups: [][]int32{{1}}, max: 2, want: nil},
		{name: "repack_merges_only_files_it_empties/struct_split_with_lineage",
			schema: fields(top(0, "s"), child(1, "y", 0), child(2, "z", 0), top(3, "b"), top(4, "c")),
			frag:   frag(0, 4, 0, v20("lineage.lance", 1, 0, 1, rowIDField), v20("c1.lance", 1, 0, 2), v20("b.lance", 1, 3), v20("c.lance", 1, 4)), max: 2, want: [][]int32{{3, 4}}},
		{name: "repack_merges_only_files_it_empties/largest_shares_struct",
			schema: fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), top(4, "b"), top(5, "c")),
			frag:   frag(0, 4, 0, v20("k.lance", 100, 1, 2), v20("m1.lance", 10, 0, 1, 3), v20("m2.lance", 10, 4), v20("m3.lance", 10, 5)), max: 2, want: [][]int32{{4, 5}},
			// Keeping k leaves three files; the next run merges k's s with b, c.
			rounds: 2},
		{name: "repack_keeps_the_largest_file_that_shares_a_struct/every_file_holds_it", schema: aSxyzB,
			frag: frag(0, 4, 0, v20("k.lance", 100, 0, 1, 2), v20("m1.lance", 10, 1, 3), v20("m2.lance", 10, 1, 4)), max: 2, want: [][]int32{{1}}},
		{name: "repack_keeps_the_largest_file_that_shares_a_struct/fallback", schema: aSxyzB,
			frag: frag(0, 4, 0, v20("k.lance", 100, 0, 1, 2), v20("m1.lance", 10, 1, 3, 4), v20("m2.lance", 10, 5)), max: 2, want: [][]int32{{1, 5}}},
		{name: "repack_keeps_the_largest_file_next_to_a_header_only_file", schema: project(fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), top(4, "b")), 2),
			frag: frag(0, 4, 0, v20("h.lance", 10, 1, 2), v20("base.lance", 100, 0), v20("sy.lance", 10, 1, 3), v20("bf.lance", 10, 4)), max: 2, want: [][]int32{{1, 4}}},
		{name: "repack_prefers_leaving_the_largest_file_in_place",
			schema: fields(top(0, "s"), child(1, "x", 0), child(2, "y", 0), child(3, "z", 0), top(4, "t"), child(5, "p", 4), child(6, "q", 4), top(7, "c")),
			frag:   frag(0, 4, 0, v20("k.lance", 100, 0, 1, 4, 5), v20("m1.lance", 10, 0, 2, 7), v20("m2.lance", 10, 0, 3), v20("m3.lance", 10, 4, 6)), max: 3, want: [][]int32{{0, 7}}},
		{name: "repack_plans_nothing_for_header_only_files",
			schema: project(fields(top(0, "s"), child(1, "a", 0), child(2, "b", 0), child(3, "c", 0), child(4, "d", 0)), 1, 2, 3),
			frag:   frag(0, 4, 0, v20("a.lance", 1, 0, 1), v20("b.lance", 1, 0, 2), v20("c.lance", 1, 0, 3)), max: 2, want: nil},
		{name: "repack_with_a_dropped_struct_child_converges", schema: project(fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1), top(4, "b")), 2),
			frag: frag(0, 4, 0, v20("base.lance", 10, 0, 1, 2, 3), v20("b.lance", 5, 4)), max: 1, want: [][]int32{{0, 1, 4}}},
	}
	// repack_merges_all_files_when_none_can_stay: the same plan at limits 2 and 1.
	sxyz := fields(top(0, "s"), child(1, "x", 0), child(2, "y", 0), child(3, "z", 0))
	st := fields(top(0, "s"), child(1, "x", 0), child(2, "y", 0), top(3, "t"), child(4, "p", 3), child(5, "q", 3))
	for _, max := range []uint64{2, 1} {
		cases = append(cases,
			repackCase{name: fmt.Sprintf("repack_merges_all_files_when_none_can_stay/one_child_per_file/max%d", max), schema: sxyz,
				frag: frag(0, 4, 0, v20("x.lance", 1, 0, 1), v20("y.lance", 1, 0, 2), v20("z.lance", 1, 0, 3)), max: max, want: [][]int32{{0}}},
			repackCase{name: fmt.Sprintf("repack_merges_all_files_when_none_can_stay/chained_structs/max%d", max), schema: st,
				frag: frag(0, 4, 0, v20("xp.lance", 1, 0, 1, 3, 4), v20("y.lance", 1, 0, 2), v20("q.lance", 1, 3, 5)), max: max, want: [][]int32{{0, 3}}},
			repackCase{name: fmt.Sprintf("repack_merges_all_files_when_none_can_stay/header_file/max%d", max), schema: project(aSxy, 2),
				frag: frag(0, 4, 0, v20("h.lance", 1, 1, 2), v20("a.lance", 1, 0), v20("sy.lance", 1, 1, 3)), max: max, want: [][]int32{{0, 1}}},
		)
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
}

// TestRepackNonTopLevelGroupColumn: a column group naming a nested or
// unknown column is skipped with a warning, not an error.
func TestRepackNonTopLevelGroupColumn(t *testing.T) {
	schema := fields(top(0, "a"), top(1, "s"), child(2, "x", 1), top(3, "d"))
	m := manifest(3, schema, frag(0, 4, 0, v20("a.lance", 1, 0, 1, 2), v20("d.lance", 1, 3)))
	p := Compute(Input{Table: "t", Manifest: m, Policy: pol(func(e *policy.Effective) {
		set(&e.Repack.ColumnGroups, [][]string{{"x", "a", "d"}, {"gone"}})
	})})
	if len(p.Warnings) != 2 {
		t.Fatalf("warnings %q", p.Warnings)
	}
	if len(p.Repacks) != 1 || !reflect.DeepEqual(p.Repacks[0].Files[0].Columns, []int32{0, 3}) {
		t.Fatalf("repacks %+v", p.Repacks)
	}
}

// TestLiveFileCountMatchesLayoutStats: the planner's live file count is
// format.ComputeLayoutStats' DataFiles for every layout listed here, and a plan
// given the stats decides the same as one without.
func TestLiveFileCountMatchesLayoutStats(t *testing.T) {
	for _, c := range []struct {
		schema []*filepb.Field
		frag   *tablepb.DataFragment
	}{
		{abcde, backfilled(0)},
		{project(abcde, 2), backfilled(0)},
		{project(abcde, 3, 4), backfilled(0)},
		{project(fields(top(0, "a"), top(1, "s"), child(2, "x", 1), child(3, "y", 1)), 2), frag(0, 4, 0, v20("h.lance", 1, 1, 2), v20("a.lance", 1, 0), v20("sy.lance", 1, 1, 3))},
	} {
		m := manifest(2, c.schema, c.frag)
		st := format.ComputeLayoutStats(m)
		if got, want := liveFileCount(newSchema(c.schema), c.frag), st.Fragments[0].DataFiles; got != want {
			t.Errorf("layout %v: planner counts %d live files, layout stats %d", layoutOf(c.frag), got, want)
		}
		e := pol(func(e *policy.Effective) { set(&e.Repack.MaxDataFilesPerFragment, uint64(1)) })
		a := Compute(Input{Table: "t", Manifest: m, Policy: e})
		b := Compute(Input{Table: "t", Manifest: m, Policy: e, Stats: &st})
		if !reflect.DeepEqual(a, b) {
			t.Errorf("plan with stats differs:\n%+v\n%+v", a, b)
		}
	}
}
