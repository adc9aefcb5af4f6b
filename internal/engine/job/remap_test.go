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

func remapFixture(t *testing.T) (*format.Manifest, *tablepb.IndexMetadata, *RewriteOutput, *RemapOutput) {
	t.Helper()
	mx := uint32(5) // 4 and 5 reserved
	seg := &tablepb.IndexMetadata{Name: "vec_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, FragmentBitmap: bitmapBytes(t, 0, 1),
		IndexDetails: &anypb.Any{TypeUrl: "/lance.table.VectorIndexDetails", Value: []byte{0x22, 0x00}}, IndexVersion: proto.Int32(1),
		Files: []*tablepb.IndexFile{{Path: "index.idx", SizeBytes: 10}}}
	latest := &format.Manifest{PB: &tablepb.Manifest{Version: 7, Fragments: []*tablepb.DataFragment{frag(0, "a"), frag(1, "b"), frag(2, "c"), frag(3, "d")}, MaxFragmentId: &mx},
		Indices: &tablepb.IndexSection{Indices: []*tablepb.IndexMetadata{seg}}}
	nf := frag(4, "n")
	nf.PhysicalRows = 200
	rw := &RewriteOutput{Rewrite: &RewriteTask{Table: "t", ReadVersion: 6, Fragments: []uint64{0, 1}, TargetRowsPerFragment: 1000, IndexCoverage: "remap"},
		Group: &RewriteGroup{Old: []*tablepb.DataFragment{frag(0, "a"), frag(1, "b")}, New: []*tablepb.DataFragment{nf}, Reserved: true}}
	b, err := proto.Marshal(seg)
	if err != nil {
		t.Fatal(err)
	}
	rm := &RemapOutput{Remap: &RemapTask{Table: "t", ReadVersion: 6, Segment: b, Groups: []RemapGroup{{Old: []uint64{0, 1}, New: []RemapNewRow{{ID: 4, Rows: 200}}}}},
		NewUUID: []byte("fedcba9876543210"), Files: []index.SegmentFile{{Name: "auxiliary.idx", Size: 77}, {Name: "index.idx", Size: 33}}, Outputs: []string{"_indices/x/index.idx"}}
	return latest, seg, rw, rm
}

// A rewrite and the remap of its index join one Rewrite transaction as
// Lance's commit_compaction writes it.
func TestRewriteTxnJoinsRemap(t *testing.T) {
	latest, seg, rw, rm := remapFixture(t)
	txn := &tablepb.Transaction{}
	b, err := RewriteTxn.Build(latest, []Job{rw, rm}, txn)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Refused) != 0 || b.Manifest == nil || b.Indices == nil {
		t.Fatalf("built %+v", b)
	}
	if got := ids(b.Manifest.GetFragments()); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("fragments %v (reserved id 4 must be kept)", got)
	}
	ri := txn.GetRewrite().GetRewrittenIndices()
	if len(ri) != 1 || string(ri[0].GetOldId().GetUuid()) != "0123456789abcdef" || string(ri[0].GetNewId().GetUuid()) != "fedcba9876543210" ||
		!proto.Equal(ri[0].GetNewIndexDetails(), seg.GetIndexDetails()) || ri[0].GetNewIndexVersion() != 1 || len(ri[0].GetNewIndexFiles()) != 2 {
		t.Fatalf("rewritten_indices %v", ri)
	}
	n := b.Indices.GetIndices()[0]
	bm, _ := decodeBitmap(n.GetFragmentBitmap())
	if !slices.Equal(bm.ToArray(), []uint32{4}) || n.GetName() != "vec_idx" || n.GetFiles()[0].GetSizeBytes() != 77 || !proto.Equal(n.GetIndexDetails(), seg.GetIndexDetails()) {
		t.Fatalf("new segment %v", n)
	}
	if err := verifyRemapped(b.Indices.GetIndices(), b.Indices.GetIndices(), ri); err != nil {
		t.Fatal(err)
	}
	if err := verifyRemapped(b.Indices.GetIndices(), latest.Indices.GetIndices(), ri); err == nil {
		t.Fatal("verify accepted a version still holding the old segment")
	}
}

// A remap-mode rewrite without the remap of a covering index, and a remap
// of a segment that is gone, are refused together; nothing is committed.
func TestRewriteTxnRefusesUnpairedRemaps(t *testing.T) {
	latest, _, rw, rm := remapFixture(t)
	b, err := RewriteTxn.Build(latest, []Job{rw}, &tablepb.Transaction{})
	if err != nil || b.Manifest != nil || len(b.Refused) != 1 || !strings.Contains(b.Refused[0].Reason, "no remap") {
		t.Fatalf("rewrite without remap: %+v %v", b, err)
	}
	latest.Indices.Indices[0] = proto.Clone(latest.Indices.Indices[0]).(*tablepb.IndexMetadata)
	latest.Indices.Indices[0].Uuid = &tablepb.UUID{Uuid: []byte("another-segment!")}
	b, err = RewriteTxn.Build(latest, []Job{rw, rm}, &tablepb.Transaction{})
	if err != nil || b.Manifest != nil || len(b.Refused) != 2 {
		t.Fatalf("remap of a replaced segment: %+v %v", b, err)
	}
	// A concurrent CreateIndex that removed the segment makes the remap retryable.
	ci := &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{
		RemovedIndices: []*tablepb.IndexMetadata{{Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}}}}}}
	if v, _ := rm.Classify(ci); v != Retryable {
		t.Fatalf("remap vs CreateIndex removing its segment: %v", v)
	}
}

func TestRemapTaskAndResultRoundTrip(t *testing.T) {
	_, _, _, rm := remapFixture(t)
	task := Task{Remap: rm.Remap}
	if !strings.HasPrefix(task.Key(), "remap/30313233-3435-3637-3839-616263646566:6:0-1:") {
		t.Fatalf("key %s", task.Key())
	}
	k, err := ParseTaskKey(task.Key())
	if err != nil || k.Table != "t" || !slices.Equal(k.Fragments, []uint64{0, 1}) {
		t.Fatalf("parsed %+v %v", k, err)
	}
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil || back.Key() != task.Key() || back.Op() != RewriteTxn {
		t.Fatalf("task round trip: %v", err)
	}
	rb, err := json.Marshal(ResultOf(rm))
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal(rb, &res); err != nil || res.Remap == nil || string(res.Remap.NewUUID) != "fedcba9876543210" || len(res.Remap.Files) != 2 || res.Task().Key() != task.Key() {
		t.Fatalf("result round trip: %+v %v", res, err)
	}
	bad := *rm.Remap
	bad.Groups = []RemapGroup{{Old: []uint64{0}, New: []RemapNewRow{{ID: 0, Rows: 1}}}}
	if err := (Task{Remap: &bad}).Validate(); err == nil {
		t.Fatal("a remap without reserved ids validated")
	}
}

// A rewrite whose old fragment gained deletions after it read it is
// refused as retryable (Lance retries a Rewrite over such a Delete), and
// the remap of its group with it: nothing is committed that would bring
// the deleted rows back or leave the remapped index pointing at them.
func TestRewriteTxnRefusesStaleRewrite(t *testing.T) {
	latest, _, rw, rm := remapFixture(t)
	latest.PB.Fragments[1] = proto.Clone(latest.PB.Fragments[1]).(*tablepb.DataFragment)
	latest.PB.Fragments[1].DeletionFile = &tablepb.DeletionFile{Id: 9, ReadVersion: 7, NumDeletedRows: 3}
	b, err := RewriteTxn.Build(latest, []Job{rw, rm}, &tablepb.Transaction{})
	if err != nil || b.Manifest != nil || len(b.Refused) != 2 {
		t.Fatalf("built %+v %v", b, err)
	}
	for _, r := range b.Refused {
		if r.Verdict != Retryable {
			t.Fatalf("refusal %+v", r)
		}
	}
	if !strings.Contains(b.Refused[0].Reason, "fragment 1") || !strings.Contains(b.Refused[0].Reason, "new deletions") {
		t.Fatalf("reason %q", b.Refused[0].Reason)
	}
}

// The verification of a committed remapping Rewrite checks each remapped
// segment's coverage against the committed fragments.
func TestVerifyRemapCoverage(t *testing.T) {
	latest, _, rw, rm := remapFixture(t)
	txn := &tablepb.Transaction{}
	b, err := RewriteTxn.Build(latest, []Job{rw, rm}, txn)
	if err != nil || b.Manifest == nil {
		t.Fatalf("built %+v %v", b, err)
	}
	committed := func() *format.Manifest {
		return &format.Manifest{PB: proto.Clone(b.Manifest).(*tablepb.Manifest), Indices: proto.Clone(b.Indices).(*tablepb.IndexSection)}
	}
	if err := b.Verify(committed()); err != nil {
		t.Fatalf("a correct commit failed verification: %v", err)
	}
	tg := txn.GetRewrite().GetGroups()
	// The new segment claims a fragment it does not index.
	after := committed()
	after.Indices.Indices[0].FragmentBitmap = bitmapBytes(t, 3, 4)
	if err := verifyRemapCoverage(latest.Indices.GetIndices(), after, tg, []*RemapOutput{rm}); err == nil || !strings.Contains(err.Error(), "claims fragments [3 4]") {
		t.Fatalf("extra fragment not detected: %v", err)
	}
	// The new fragment is committed with other rows than the remap mapped.
	after = committed()
	after.PB.Fragments[2].PhysicalRows = 199
	if err := verifyRemapCoverage(latest.Indices.GetIndices(), after, tg, []*RemapOutput{rm}); err == nil || !strings.Contains(err.Error(), "new fragment 4") {
		t.Fatalf("row mismatch not detected: %v", err)
	}
	// A group the old segment covers but the remap did not map.
	other := *rm.Remap
	other.Groups = nil
	if err := verifyRemapCoverage(latest.Indices.GetIndices(), committed(), tg, []*RemapOutput{{Remap: &other, NewUUID: rm.NewUUID}}); err == nil || !strings.Contains(err.Error(), "not remapped for its group") {
		t.Fatalf("unmapped group not detected: %v", err)
	}
}

// An FM segment is rebuilt from its column in every fragment it covers:
// a commit that rewrote or replaced that column in any of them, or moved
// their rows, makes the remap retryable; other commits on those fragments
// (a row-moving Update, other columns) and any commit on fragments it does
// not cover do not, and a vector segment is judged by its rewritten
// fragments alone.
func TestFMRemapConflictsOnColumnChanges(t *testing.T) {
	const body, other = 1, 5
	remapOf := func(url string) *RemapOutput {
		seg := &tablepb.IndexMetadata{Name: "body_idx", Uuid: &tablepb.UUID{Uuid: []byte("0123456789abcdef")}, Fields: []int32{body}, FragmentBitmap: bitmapBytes(t, 0, 1, 2, 3),
			IndexDetails: &anypb.Any{TypeUrl: url}, IndexVersion: proto.Int32(10)}
		b, err := proto.Marshal(seg)
		if err != nil {
			t.Fatal(err)
		}
		return &RemapOutput{Remap: &RemapTask{Table: "t", ReadVersion: 6, Segment: b, Groups: []RemapGroup{{Old: []uint64{0, 1}, New: []RemapNewRow{{ID: 4, Rows: 200}}}}}}
	}
	update := func(id uint64, mode tablepb.Transaction_UpdateMode, fields ...uint32) *tablepb.Transaction {
		return &tablepb.Transaction{Operation: &tablepb.Transaction_Update_{Update: &tablepb.Transaction_Update{
			UpdatedFragments: []*tablepb.DataFragment{frag(id, "x")}, FieldsModified: fields, UpdateMode: mode}}}
	}
	replace := func(id uint64, fields ...int32) *tablepb.Transaction {
		return &tablepb.Transaction{Operation: &tablepb.Transaction_DataReplacement_{DataReplacement: &tablepb.Transaction_DataReplacement{
			Replacements: []*tablepb.Transaction_DataReplacementGroup{{FragmentId: id, NewFile: &tablepb.DataFile{Path: "r.lance", Fields: fields}}}}}}
	}
	rewrite := &tablepb.Transaction{Operation: &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{
		Groups: []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(3, "d")}, NewFragments: []*tablepb.DataFragment{frag(9, "n")}}}}}}
	fm, vec := remapOf("/lance.index.pb.FMIndexDetails"), remapOf("/lance.table.VectorIndexDetails")
	for _, c := range []struct {
		name   string
		rm     *RemapOutput
		theirs *tablepb.Transaction
		want   Verdict
	}{
		{"column rewritten in an untouched covered fragment", fm, update(2, tablepb.Transaction_REWRITE_COLUMNS, body), Retryable},
		{"rows moved out of a covered fragment", fm, update(2, tablepb.Transaction_REWRITE_ROWS), Compatible},
		{"another column rewritten", fm, update(2, tablepb.Transaction_REWRITE_COLUMNS, other), Compatible},
		{"column rewritten in an uncovered fragment", fm, update(7, tablepb.Transaction_REWRITE_COLUMNS, body), Compatible},
		{"column's file replaced", fm, replace(3, body), Retryable},
		{"another column's file replaced", fm, replace(3, other), Compatible},
		{"covered fragment compacted by another writer", fm, rewrite, Retryable},
		{"vector index: column rewritten in an untouched fragment", vec, update(2, tablepb.Transaction_REWRITE_COLUMNS, body), Compatible},
	} {
		if v, why := c.rm.Classify(c.theirs); v != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, v, why, c.want)
		}
	}
}
