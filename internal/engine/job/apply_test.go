package job

import (
	"errors"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

func ids(fs []*tablepb.DataFragment) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.GetId())
	}
	return out
}

func TestApplyRewriteAssignsFreshIDsAndSorts(t *testing.T) {
	mx := uint32(9) // a high-water mark above the live ids: never reuse
	latest := &tablepb.Manifest{Fragments: []*tablepb.DataFragment{frag(0, "a"), frag(1, "b"), frag(2, "c"), frag(5, "d")}, MaxFragmentId: &mx}
	g := &RewriteGroup{Old: []*tablepb.DataFragment{frag(1, "b"), frag(2, "c")}, New: []*tablepb.DataFragment{frag(0, "n1"), frag(0, "n2")}}
	out, tg, err := ApplyRewrite(latest, []*RewriteGroup{g})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(out.GetFragments()); !slices.Equal(got, []uint64{0, 5, 10, 11}) {
		t.Fatalf("fragments %v", got)
	}
	if out.GetMaxFragmentId() != 11 {
		t.Fatalf("max_fragment_id %d", out.GetMaxFragmentId())
	}
	if got := ids(tg[0].GetNewFragments()); !slices.Equal(got, []uint64{10, 11}) {
		t.Fatalf("txn new ids %v", got)
	}
	if len(latest.GetFragments()) != 4 || latest.GetMaxFragmentId() != 9 {
		t.Fatal("latest was modified")
	}
	// A group whose fragment vanished must fail, not silently drop rows.
	gone := &RewriteGroup{Old: []*tablepb.DataFragment{frag(3)}, New: []*tablepb.DataFragment{frag(0, "x")}}
	if _, _, err := ApplyRewrite(latest, []*RewriteGroup{gone}); err == nil {
		t.Fatal("expected an error for a missing fragment")
	}
}

func TestApplyRewriteIndicesStableOnly(t *testing.T) {
	idx := []*tablepb.IndexMetadata{{Name: "id_idx", FragmentBitmap: bitmapBytes(t, 0, 1, 2)}, {Name: "other", FragmentBitmap: bitmapBytes(t, 5)}}
	groups := []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(1), frag(2)}, NewFragments: []*tablepb.DataFragment{frag(7)}}}
	same, err := ApplyRewriteIndices(idx, groups, false)
	if err != nil || !proto.Equal(same[0], idx[0]) {
		t.Fatalf("address mode must not touch bitmaps: %v", err)
	}
	out, err := ApplyRewriteIndices(idx, groups, true)
	if err != nil {
		t.Fatal(err)
	}
	bm, _ := decodeBitmap(out[0].GetFragmentBitmap())
	if !slices.Equal(bm.ToArray(), []uint32{0, 7}) {
		t.Fatalf("stable bitmap %v", bm.ToArray())
	}
	if out[1] != idx[1] {
		t.Fatal("an index the group does not touch must be kept as it is")
	}
	// A group only partly covered by an index is refused, as Lance's
	// recalculate_fragment_bitmap refuses it (the planner never makes one).
	partial := []*tablepb.IndexMetadata{{Name: "partial", FragmentBitmap: bitmapBytes(t, 1)}}
	if _, err := ApplyRewriteIndices(partial, groups, true); err == nil {
		t.Fatal("partly covered group accepted")
	}
	_ = roaring.New()
}

func TestApplyRepacksTakesLatestFragment(t *testing.T) {
	base := frag(0, "a", "b", "c")
	latestFrag := frag(0, "a", "b", "c")
	latestFrag.DeletionFile = &tablepb.DeletionFile{Id: 42, NumDeletedRows: 5, ReadVersion: 11}
	latest := &tablepb.Manifest{Fragments: []*tablepb.DataFragment{latestFrag, frag(1, "z")}}
	merged := &tablepb.DataFile{Path: "m.lance", Fields: []int32{0, 1, 2}, ColumnIndices: []int32{0, 1, 2}, FileMajorVersion: 2, FileMinorVersion: 1}
	out, up, err := ApplyRepacks(latest, []*RepackResult{{Base: base, Files: []*tablepb.DataFile{merged}}})
	if err != nil {
		t.Fatal(err)
	}
	got := out.GetFragments()[0]
	if got.GetDeletionFile().GetId() != 42 {
		t.Fatal("the concurrent deletion file was lost: deleted rows would come back")
	}
	if len(got.GetFiles()) != 1 || got.GetFiles()[0].GetPath() != "m.lance" {
		t.Fatalf("files %v", got.GetFiles())
	}
	if up.GetUpdateMode() != tablepb.Transaction_REWRITE_COLUMNS || len(up.GetFieldsModified()) != 0 || len(up.GetUpdatedFragments()) != 1 {
		t.Fatalf("carrier %v", up)
	}
	// Files changed concurrently: the task conflicts, nothing is applied.
	latest2 := &tablepb.Manifest{Fragments: []*tablepb.DataFragment{frag(0, "a", "b", "c", "d")}}
	_, _, err = ApplyRepacks(latest2, []*RepackResult{{Base: base, Files: []*tablepb.DataFile{merged}}})
	var tc *TaskConflict
	if !errors.As(err, &tc) || tc.Verdict != Retryable {
		t.Fatalf("want a retryable task conflict, got %v", err)
	}
}
