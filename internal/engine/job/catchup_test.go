package job

import (
	"encoding/json"
	"reflect"
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

// A catch-up result survives the trip from worker to coordinator whole:
// every field of CatchUpOutput is set here (the check below fails when a
// new field is added and not set) and must come back equal (the wire
// form once dropped a field the commit's coverage check read).
func TestCatchUpResultRoundTripsEveryField(t *testing.T) {
	seg := &tablepb.IndexMetadata{Name: "body_idx", Uuid: &tablepb.UUID{Uuid: []byte("fedcba9876543210")}, Fields: []int32{2}, FragmentBitmap: bitmapBytes(t, 1, 2)}
	old := &tablepb.IndexMetadata{Name: "body_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, Fields: []int32{2}, FragmentBitmap: bitmapBytes(t, 0)}
	in := &CatchUpOutput{
		CatchUp: &CatchUpTask{Table: "t", ReadVersion: 5, Index: "body_idx", Fragments: []uint64{1, 2}, Rows: 10, Merge: true,
			Slices: []RowRange{{Lo: 0, Hi: 2}}, FMMaxBytes: 1 << 20},
		Segment: seg, Removed: []*tablepb.IndexMetadata{old}, Merged: "segments", Base: []*tablepb.DataFragment{frag(1, "c", "d"), frag(2, "e", "f")},
		Outputs: []string{"_indices/x/part_0_fm.lance"}, Rows: 9, Dropped: 1, BytesRead: 100, BytesWritten: 50,
		Drift: &DriftSample{Model: "m", Rows: 9, Far: 1, Bound: 0.5, Reference: 3},
	}
	// Join results take their task from the join; that path is the
	// joins' own tests'.
	v := reflect.ValueOf(in).Elem()
	for i := 0; i < v.NumField(); i++ {
		if name := v.Type().Field(i).Name; name != "Join" && v.Field(i).IsZero() {
			t.Fatalf("the example leaves CatchUpOutput.%s unset: set it so its trip is checked", name)
		}
	}
	b, err := json.Marshal(Result{CatchUp: in})
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	out := r.CatchUp
	if out == nil {
		t.Fatalf("decoded %+v", r)
	}
	w := reflect.ValueOf(out).Elem()
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		a, b := v.Field(i).Interface(), w.Field(i).Interface()
		same := reflect.DeepEqual(a, b)
		switch x := a.(type) {
		case *tablepb.IndexMetadata:
			same = proto.Equal(x, b.(*tablepb.IndexMetadata))
		case []*tablepb.IndexMetadata:
			y := b.([]*tablepb.IndexMetadata)
			same = len(x) == len(y)
			for k := 0; same && k < len(x); k++ {
				same = proto.Equal(x[k], y[k])
			}
		case []*tablepb.DataFragment:
			y := b.([]*tablepb.DataFragment)
			same = len(x) == len(y)
			for k := 0; same && k < len(x); k++ {
				same = proto.Equal(x[k], y[k])
			}
		}
		if !same {
			t.Errorf("CatchUpOutput.%s: sent %+v, received %+v", name, a, b)
		}
	}
}
