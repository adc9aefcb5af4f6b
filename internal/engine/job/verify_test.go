package job

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

func schemaManifest(frags ...*tablepb.DataFragment) *tablepb.Manifest {
	return &tablepb.Manifest{Fields: []*filepb.Field{{Id: 0, Name: "a", ParentId: -1}, {Id: 1, Name: "b", ParentId: -1}, {Id: 2, Name: "c", ParentId: -1}}, Fragments: frags}
}

func TestVerifyRewrite(t *testing.T) {
	f1, f2, f3 := frag(1, "x"), frag(2, "y"), frag(3, "z")
	f2.DeletionFile = &tablepb.DeletionFile{NumDeletedRows: 10}
	before := schemaManifest(f1, f2, f3)
	nf := frag(4, "n")
	nf.PhysicalRows = 190
	g := &RewriteGroup{Old: []*tablepb.DataFragment{f1, f2}, New: []*tablepb.DataFragment{nf}}
	after, tg, err := ApplyRewrite(before, []*RewriteGroup{g})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRewrite(before, after, tg); err != nil {
		t.Fatalf("a correct rewrite failed verification: %v", err)
	}
	// A row lost in the write.
	short := proto.Clone(tg[0]).(*tablepb.Transaction_Rewrite_RewriteGroup)
	short.NewFragments[0].PhysicalRows = 189
	if err := VerifyRewrite(before, after, []*tablepb.Transaction_Rewrite_RewriteGroup{short}); !errors.Is(err, ErrInvariant) {
		t.Fatalf("lost row not detected: %v", err)
	}
	// An untouched fragment changed underneath.
	bad := proto.Clone(after).(*tablepb.Manifest)
	bad.Fragments[0].DeletionFile = &tablepb.DeletionFile{NumDeletedRows: 1}
	if err := VerifyRewrite(before, bad, tg); !errors.Is(err, ErrInvariant) {
		t.Fatalf("changed untouched fragment not detected: %v", err)
	}
	// A rewritten fragment gained deletions after the rewrite read it.
	stale := proto.Clone(before).(*tablepb.Manifest)
	stale.Fragments[1].DeletionFile = &tablepb.DeletionFile{NumDeletedRows: 11}
	if err := VerifyRewrite(stale, after, tg); !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), "new deletions") {
		t.Fatalf("stale rewrite not detected: %v", err)
	}
}

func TestVerifyRepack(t *testing.T) {
	base := &tablepb.DataFragment{Id: 0, PhysicalRows: 100, Files: []*tablepb.DataFile{
		{Path: "a", Fields: []int32{0}}, {Path: "b", Fields: []int32{1}}, {Path: "c", Fields: []int32{2}}}}
	before := schemaManifest(base, frag(1, "q"))
	merged := &tablepb.DataFile{Path: "m", Fields: []int32{0, 1, 2}}
	after, up, err := ApplyRepacks(before, []*RepackResult{{Base: base, Files: []*tablepb.DataFile{merged}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRepack(before, after, up.GetUpdatedFragments()); err != nil {
		t.Fatalf("a correct repack failed verification: %v", err)
	}
	lost, _, err := ApplyRepacks(before, []*RepackResult{{Base: base, Files: []*tablepb.DataFile{{Path: "m", Fields: []int32{0, 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRepack(before, lost, up.GetUpdatedFragments()); !errors.Is(err, ErrInvariant) {
		t.Fatalf("lost column not detected: %v", err)
	}
	dup, _, err := ApplyRepacks(before, []*RepackResult{{Base: base, Files: []*tablepb.DataFile{merged, {Path: "c", Fields: []int32{2}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRepack(before, dup, up.GetUpdatedFragments()); !errors.Is(err, ErrInvariant) {
		t.Fatalf("field in two files not detected: %v", err)
	}
}

func TestCheckIndexCoverage(t *testing.T) {
	vec := func(uuid byte, ids ...uint32) *tablepb.IndexMetadata {
		return &tablepb.IndexMetadata{Name: "vec_idx", Uuid: &tablepb.UUID{Uuid: []byte{uuid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
			FragmentBitmap: bitmapBytes(t, ids...), IndexDetails: &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails"}}
	}
	before := schemaManifest(frag(0), frag(1), frag(2))
	rewritten := schemaManifest(frag(2), frag(3)) // 0 and 1 rewritten into 3
	stable := schemaManifest(frag(2), frag(3))
	stable.ReaderFeatureFlags = 2
	for _, c := range []struct {
		name       string
		after      *tablepb.Manifest
		bIdx, aIdx []*tablepb.IndexMetadata
		wantErr    string
	}{
		{"unindex leaving a vector index covering nothing", rewritten, []*tablepb.IndexMetadata{vec(1, 0, 1)}, []*tablepb.IndexMetadata{vec(1, 0, 1)}, "would cover no existing fragment"},
		{"unindex leaving one covered fragment", rewritten, []*tablepb.IndexMetadata{vec(1, 0, 1, 2)}, []*tablepb.IndexMetadata{vec(1, 0, 1, 2)}, ""},
		{"bitmap gains a fragment its files do not index", rewritten, []*tablepb.IndexMetadata{vec(1, 0, 1)}, []*tablepb.IndexMetadata{vec(1, 3)}, "claims fragments [3]"},
		{"remapped under a new uuid", rewritten, []*tablepb.IndexMetadata{vec(1, 0, 1)}, []*tablepb.IndexMetadata{vec(2, 3)}, ""},
		{"stable row ids: bitmap follows the rewrite", stable, []*tablepb.IndexMetadata{vec(1, 0, 1)}, []*tablepb.IndexMetadata{vec(1, 3)}, ""},
		{"index gone", rewritten, []*tablepb.IndexMetadata{vec(1, 0, 1, 2)}, nil, "is gone"},
		{"already lost before", schemaManifest(frag(3)), []*tablepb.IndexMetadata{vec(1, 9)}, []*tablepb.IndexMetadata{vec(1, 9)}, ""},
	} {
		err := CheckIndexCoverage(before, c.bIdx, c.after, c.aIdx)
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.wantErr)
		}
	}
}

// On a table with stable row ids a committed Rewrite is verified by the
// indices' fragment bitmaps: covered groups moved to their new fragments,
// uncovered ones not claimed.
func TestVerifyStableCoverage(t *testing.T) {
	f0, f1, f2 := frag(0, "a"), frag(1, "b"), frag(2, "c")
	nf := frag(0, "n")
	nf.PhysicalRows = 200
	before := schemaManifest(f0, f1, f2)
	g := &RewriteGroup{Old: []*tablepb.DataFragment{f0, f1}, New: []*tablepb.DataFragment{nf}}
	_, tg, err := ApplyRewrite(before, []*RewriteGroup{g})
	if err != nil {
		t.Fatal(err)
	}
	ix := &tablepb.IndexMetadata{Name: "id_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, FragmentBitmap: bitmapBytes(t, 0, 1, 2)}
	other := &tablepb.IndexMetadata{Name: "b_idx", Uuid: &tablepb.UUID{Uuid: []byte("fedcba9876543210")}, FragmentBitmap: bitmapBytes(t, 2)}
	beforeIdx := []*tablepb.IndexMetadata{ix, other}
	afterIdx, err := ApplyRewriteIndices(beforeIdx, tg, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyStableCoverage(beforeIdx, afterIdx, tg); err != nil {
		t.Fatalf("a correct rewrite failed verification: %v", err)
	}
	stale := []*tablepb.IndexMetadata{proto.Clone(afterIdx[0]).(*tablepb.IndexMetadata), afterIdx[1]}
	stale[0].FragmentBitmap = bitmapBytes(t, 0, 2, 3)
	if err := verifyStableCoverage(beforeIdx, stale, tg); err == nil || !strings.Contains(err.Error(), "rewritten fragment 0") {
		t.Fatalf("old fragment still claimed: %v", err)
	}
	wide := []*tablepb.IndexMetadata{afterIdx[0], proto.Clone(afterIdx[1]).(*tablepb.IndexMetadata)}
	wide[1].FragmentBitmap = bitmapBytes(t, 2, 3)
	if err := verifyStableCoverage(beforeIdx, wide, tg); err == nil || !strings.Contains(err.Error(), "new fragment 3") {
		t.Fatalf("uncovered rows claimed: %v", err)
	}
}
