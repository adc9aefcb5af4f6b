package job

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A committed catch-up segment is verified against the fragments of the
// committed version: it claims exactly the fragments it read (plus the
// merged segments'), each still with the files and rows it read.
func TestVerifyCatchUpCoverage(t *testing.T) {
	old := &tablepb.IndexMetadata{Name: "vec_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, Fields: []int32{1}, FragmentBitmap: bitmapBytes(t, 0)}
	latest := &format.Manifest{PB: &tablepb.Manifest{Version: 5, Fragments: []*tablepb.DataFragment{frag(0, "a", "b"), frag(1, "c", "d")}},
		Indices: &tablepb.IndexSection{Indices: []*tablepb.IndexMetadata{old}}}
	seg := proto.Clone(old).(*tablepb.IndexMetadata)
	seg.Uuid = &tablepb.UUID{Uuid: []byte("fedcba9876543210")}
	seg.FragmentBitmap = bitmapBytes(t, 1)
	o := &CatchUpOutput{CatchUp: &CatchUpTask{Table: "t", ReadVersion: 5, Index: "vec_idx", Fragments: []uint64{1}}, Segment: seg,
		Base: []*tablepb.DataFragment{frag(1, "c", "d")}}
	b, err := CatchUpTxn.Build(latest, []Job{o}, &tablepb.Transaction{})
	if err != nil || b.Manifest == nil || len(b.Refused) != 0 {
		t.Fatalf("built %+v %v", b, err)
	}
	committed := func() *format.Manifest {
		return &format.Manifest{PB: proto.Clone(b.Manifest).(*tablepb.Manifest), Indices: proto.Clone(b.Indices).(*tablepb.IndexSection)}
	}
	if err := b.Verify(committed()); err != nil {
		t.Fatalf("a correct catch-up failed verification: %v", err)
	}
	// The segment claims a fragment it does not hold.
	wide := *o
	wide.Segment = proto.Clone(seg).(*tablepb.IndexMetadata)
	wide.Segment.FragmentBitmap = bitmapBytes(t, 1, 2)
	after := committed()
	after.Indices.Indices[1] = wide.Segment
	if err := verifyCatchUpCoverage(after, []*CatchUpOutput{&wide}); err == nil || !strings.Contains(err.Error(), "claims fragments [1 2]") {
		t.Fatalf("extra fragment not detected: %v", err)
	}
	// A fragment it read got other data files.
	after = committed()
	after.PB.Fragments[1].Files[1].Path = "e"
	if err := verifyCatchUpCoverage(after, []*CatchUpOutput{o}); err == nil || !strings.Contains(err.Error(), "fragment 1") {
		t.Fatalf("changed fragment not detected: %v", err)
	}
}
