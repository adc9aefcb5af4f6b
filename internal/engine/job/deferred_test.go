package job

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// deferFixture: fragments 0..3, an IVF_PQ (deferrable) over 0 and 1 built
// at version 2, and a deferred rewrite of 0 and 1 planned at version 6.
func deferFixture(t *testing.T) (*format.Manifest, *RewriteOutput) {
	t.Helper()
	mx := uint32(3)
	vec := &tablepb.IndexMetadata{Name: "vec_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, FragmentBitmap: bitmapBytes(t, 0, 1), DatasetVersion: 2,
		IndexDetails: &anypb.Any{TypeUrl: "/lance.table.VectorIndexDetails", Value: []byte{0x22, 0x00}}}
	latest := &format.Manifest{PB: &tablepb.Manifest{Version: 7, Fragments: []*tablepb.DataFragment{frag(0, "a"), frag(1, "b"), frag(2, "c"), frag(3, "d")}, MaxFragmentId: &mx},
		Indices: &tablepb.IndexSection{Indices: []*tablepb.IndexMetadata{vec}}}
	ra := index.NewRetainedAddrs()
	ra.AddFragment(0, 100, nil)
	ra.AddFragment(1, 100, nil)
	kept, err := ra.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	nf := frag(0, "n")
	nf.PhysicalRows = 200
	rw := &RewriteOutput{Rewrite: &RewriteTask{Table: "t", ReadVersion: 6, Fragments: []uint64{0, 1}, TargetRowsPerFragment: 1000, IndexCoverage: DeferIndexRemap},
		Group: &RewriteGroup{Old: []*tablepb.DataFragment{frag(0, "a"), frag(1, "b")}, New: []*tablepb.DataFragment{nf}}, Retained: kept}
	return latest, rw
}

// A deferred rewrite commits no index file: the index keeps its segment
// and recorded bitmap, and the reuse index gains a version (read version 6,
// the group with its new fragment) appended to the versions of the latest
// manifest's reuse index, whatever the read version held; the committed
// version verifies, and real Lance's view of the bitmap covers the new
// fragment. The kept addresses survive the trip to the coordinator.
func TestRewriteTxnDefersToFragmentReuse(t *testing.T) {
	latest, rw := deferFixture(t)
	// An earlier deferred compaction committed since the plan: 2 and 3
	// became 3 (ids here only matter for the bitmaps).
	earlier := &index.FragReuse{Versions: []index.ReuseVersion{{DatasetVersion: 5, Groups: []index.ReuseGroup{{Retained: rw.Retained,
		Old: []index.FragDigest{{ID: 8, PhysicalRows: 100}, {ID: 9, PhysicalRows: 100}}, New: []index.FragDigest{{ID: 3, PhysicalRows: 200}}}}}}}
	fri, err := earlier.Build([16]byte{7}, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	latest.Indices.Indices = append(latest.Indices.Indices, fri)
	txn := &tablepb.Transaction{}
	b, err := RewriteTxn.Build(latest, []Job{rw}, txn)
	if err != nil || len(b.Refused) != 0 || b.Indices == nil {
		t.Fatalf("built %+v, %v", b, err)
	}
	if len(txn.GetRewrite().GetRewrittenIndices()) != 0 {
		t.Fatalf("rewritten_indices %v", txn.GetRewrite().GetRewrittenIndices())
	}
	got := b.Indices.GetIndices()
	if !proto.Equal(got[0], latest.Indices.Indices[0]) {
		t.Fatalf("vec_idx changed: %v", got[0])
	}
	fr, err := index.DecodeFragReuse(index.FindFragReuse(got))
	if err != nil || len(fr.Versions) != 2 || fr.Versions[0].DatasetVersion != 5 || fr.Versions[1].DatasetVersion != 6 {
		t.Fatalf("reuse index %+v, %v", fr, err)
	}
	g := fr.Versions[1].Groups[0]
	if len(g.Old) != 2 || g.Old[1].ID != 1 || len(g.New) != 1 || g.New[0].ID != 4 || g.New[0].PhysicalRows != 200 {
		t.Fatalf("group %+v", g)
	}
	through, _, err := index.ThroughReuse(got)
	if err != nil {
		t.Fatal(err)
	}
	if bm, _ := decodeBitmap(through[0].GetFragmentBitmap()); !slices.Equal(bm.ToArray(), []uint32{4}) {
		t.Fatalf("vec_idx through the reuse index: %v", bm.ToArray())
	}
	committed := &format.Manifest{PB: b.Manifest, Indices: b.Indices}
	if err := b.Verify(committed); err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(&format.Manifest{PB: b.Manifest, Indices: latest.Indices}); err == nil {
		t.Fatal("verify accepted a version without the new reuse version")
	}
	j, err := json.Marshal(ResultOf(rw))
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(j, &back); err != nil || !slices.Equal(back.Rewrite.Retained, rw.Retained) {
		t.Fatalf("round trip: %v", err)
	}
}

// A reuse index lanced cannot read (details in a file) refuses the deferred
// rewrite with the reason; nothing is committed.
func TestRewriteTxnRefusesUnreadableFragmentReuse(t *testing.T) {
	latest, rw := deferFixture(t)
	ext, err := proto.Marshal(&tablepb.FragmentReuseIndexDetails{Content: &tablepb.FragmentReuseIndexDetails_External{External: &tablepb.ExternalFile{Path: "details.binpb", Size: 300000}}})
	if err != nil {
		t.Fatal(err)
	}
	latest.Indices.Indices = append(latest.Indices.Indices, &tablepb.IndexMetadata{Name: index.FragReuseName, Uuid: &tablepb.UUID{Uuid: []byte("fedcba9876543210")},
		IndexDetails: &anypb.Any{TypeUrl: "/lance.table.FragmentReuseIndexDetails", Value: ext}})
	b, err := RewriteTxn.Build(latest, []Job{rw}, &tablepb.Transaction{})
	if err != nil || b.Manifest != nil || len(b.Refused) != 1 || !strings.Contains(b.Refused[0].Reason, "external file") {
		t.Fatalf("built %+v, %v", b, err)
	}
}
