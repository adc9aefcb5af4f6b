package job

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// TestSliceAndJoinWire: slice and join tasks, and their results, survive
// the trip through JSON with their keys, kinds, fragments and parents; a
// join's output decodes as its parent's kind with the join as its task;
// malformed slicings are refused.
func TestSliceAndJoinWire(t *testing.T) {
	rw := &RewriteTask{Table: "file:///t", ReadVersion: 4, Fragments: []uint64{7}, TargetRowsPerFragment: 100,
		Slices: []RowRange{{0, 10}, {10, 20}, {20, 25}}}
	parent := Task{Rewrite: rw}
	ss := parent.Slices()
	if len(ss) != 3 {
		t.Fatalf("%d slices", len(ss))
	}
	keys := map[string]bool{}
	for i, s := range ss {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Task
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Key() != s.Key() || back.Kind() != KindSlice || back.Slice.Range() != rw.Slices[i] || back.Op() != RewriteTxn {
			t.Fatalf("slice %d round trip: %s vs %s", i, back.Key(), s.Key())
		}
		k, err := ParseTaskKey(s.Key())
		if err != nil || len(k.Fragments) != 1 || k.Fragments[0] != 7 {
			t.Fatalf("key %s: %+v %v", s.Key(), k, err)
		}
		keys[s.Key()] = true
	}
	if len(keys) != 3 || keys[parent.Key()] {
		t.Fatalf("slice keys %v (parent %s)", keys, parent.Key())
	}
	df := &tablepb.DataFile{Path: "p.lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}
	var outs []*SliceOutput
	for i, s := range ss {
		p, err := NewPiece(i, 0, 5, df)
		if err != nil {
			t.Fatal(err)
		}
		o := &SliceOutput{Slice: s.Slice, Pieces: []Piece{p}, Outputs: []string{"data/p.lance"}, Kept: 1}
		b, err := EncodeResult(o, "jid")
		if err != nil {
			t.Fatal(err)
		}
		j, jid, err := DecodeResult(b)
		if err != nil {
			t.Fatal(err)
		}
		so, ok := j.(*SliceOutput)
		if !ok || jid != "jid" || so.Task().Key() != s.Key() || len(so.Pieces) != 1 || so.Kept != 1 {
			t.Fatalf("slice result round trip: %#v", j)
		}
		outs = append(outs, so)
	}
	if _, err := NewJoin(parent, outs[:2]); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("join of 2 of 3 slices: %v", err)
	}
	jt, err := NewJoin(parent, []*SliceOutput{outs[2], outs[0], outs[1]})
	if err != nil {
		t.Fatal(err)
	}
	if len(jt.Join.Pieces) != 3 || jt.Join.Pieces[0].Slice != 0 || jt.Kind() != KindJoin || jt.Fragments()[0] != 7 {
		t.Fatalf("join: %+v", jt.Join)
	}
	o := &RewriteOutput{Rewrite: rw, Join: jt.Join, Group: &RewriteGroup{Old: []*tablepb.DataFragment{{Id: 7}}, New: []*tablepb.DataFragment{{PhysicalRows: 15}}}}
	b, err := EncodeResult(o, "")
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	ro, ok := j.(*RewriteOutput)
	if !ok || ro.Join == nil || ro.Rewrite == nil || ro.Task().Key() != jt.Key() || ro.Op() != RewriteTxn {
		t.Fatalf("join result round trip: %#v", j)
	}
	for _, bad := range [][]RowRange{{{0, 10}}, {{0, 10}, {11, 20}}, {{5, 10}, {10, 20}}, {{0, 10}, {10, 10}}} {
		b := *rw
		b.Slices = bad
		if err := (Task{Slice: &SliceTask{Rewrite: &b}}).Validate(); !errors.Is(err, ErrInvalidTask) {
			t.Fatalf("slices %v accepted: %v", bad, err)
		}
	}
	two := *rw
	two.Fragments = []uint64{7, 8}
	if err := (Task{Slice: &SliceTask{Rewrite: &two}}).Validate(); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("slice of two fragments accepted: %v", err)
	}
}
