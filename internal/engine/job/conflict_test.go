package job

import (
	"bytes"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func frag(id uint64, paths ...string) *tablepb.DataFragment {
	f := &tablepb.DataFragment{Id: id, PhysicalRows: 100}
	for i, p := range paths {
		f.Files = append(f.Files, &tablepb.DataFile{Path: p, Fields: []int32{int32(i)}, FileMajorVersion: 2, FileMinorVersion: 1})
	}
	return f
}

func bitmapBytes(t *testing.T, ids ...uint32) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := roaring.BitmapOf(ids...).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestClassifyForRewrite(t *testing.T) {
	m := map[uint64]bool{1: true, 2: true}
	cases := []struct {
		name string
		txn  *tablepb.Transaction
		want Verdict
	}{
		{"append is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Append_{Append: &tablepb.Transaction_Append{}}}, Compatible},
		{"reserve is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_ReserveFragments_{ReserveFragments: &tablepb.Transaction_ReserveFragments{NumFragments: 2}}}, Compatible},
		{"project is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Project_{Project: &tablepb.Transaction_Project{}}}, Compatible},
		{"update config is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_UpdateConfig_{UpdateConfig: &tablepb.Transaction_UpdateConfig{}}}, Compatible},
		{"delete in a rewritten fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Delete_{Delete: &tablepb.Transaction_Delete{UpdatedFragments: []*tablepb.DataFragment{frag(2, "a")}}}}, Retryable},
		{"delete removing a rewritten fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Delete_{Delete: &tablepb.Transaction_Delete{DeletedFragmentIds: []uint64{1}}}}, Retryable},
		{"delete elsewhere is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Delete_{Delete: &tablepb.Transaction_Delete{UpdatedFragments: []*tablepb.DataFragment{frag(5, "a")}}}}, Compatible},
		{"update in a rewritten fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Update_{Update: &tablepb.Transaction_Update{RemovedFragmentIds: []uint64{2}}}}, Retryable},
		{"update elsewhere is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Update_{Update: &tablepb.Transaction_Update{UpdatedFragments: []*tablepb.DataFragment{frag(7)}}}}, Compatible},
		{"overlapping rewrite is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{Groups: []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(1)}}}}}}, Retryable},
		{"disjoint rewrite is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{Groups: []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(3)}}}}}}, Compatible},
		{"data replacement of a rewritten fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_DataReplacement_{DataReplacement: &tablepb.Transaction_DataReplacement{Replacements: []*tablepb.Transaction_DataReplacementGroup{{FragmentId: 1}}}}}, Retryable},
		{"merge is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Merge_{Merge: &tablepb.Transaction_Merge{}}}, Retryable},
		{"index covering a rewritten fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: "i", FragmentBitmap: bitmapBytes(t, 0, 2)}}}}}, Retryable},
		{"index without bitmap is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: "i"}}}}}, Retryable},
		{"index elsewhere is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: "i", FragmentBitmap: bitmapBytes(t, 0, 3)}}}}}, Compatible},
		{"fri change not one for one is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: fragReuseIndexName}}}}}, Incompatible},
		{"overwrite is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Overwrite_{Overwrite: &tablepb.Transaction_Overwrite{}}}, Incompatible},
		{"restore is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Restore_{Restore: &tablepb.Transaction_Restore{}}}, Incompatible},
		{"unknown operation is incompatible", &tablepb.Transaction{}, Incompatible},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := ClassifyForRewrite(m, c.txn)
			if got != c.want {
				t.Fatalf("got %v (%s), want %v", got, why, c.want)
			}
		})
	}
}

func TestClassifyForRepack(t *testing.T) {
	f := map[uint64]bool{0: true}
	cases := []struct {
		name string
		txn  *tablepb.Transaction
		want Verdict
	}{
		{"create index is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{}}}, Compatible},
		{"delete defers to the fragment check", &tablepb.Transaction{Operation: &tablepb.Transaction_Delete_{Delete: &tablepb.Transaction_Delete{UpdatedFragments: []*tablepb.DataFragment{frag(0)}}}}, Compatible},
		{"merge is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Merge_{Merge: &tablepb.Transaction_Merge{}}}, Retryable},
		{"overwrite is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Overwrite_{Overwrite: &tablepb.Transaction_Overwrite{}}}, Incompatible},
		{"mem wal is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_UpdateMemWalState_{UpdateMemWalState: &tablepb.Transaction_UpdateMemWalState{}}}, Incompatible},
		{"unknown is incompatible", &tablepb.Transaction{}, Incompatible},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, why := ClassifyForRepack(f, c.txn); got != c.want {
				t.Fatalf("got %v (%s), want %v", got, why, c.want)
			}
		})
	}
}

func TestRepackRebase(t *testing.T) {
	base := frag(0, "a", "b")
	withDel := frag(0, "a", "b")
	withDel.DeletionFile = &tablepb.DeletionFile{Id: 9, NumDeletedRows: 3}
	if v, why := RepackRebase(base, withDel); v != Compatible {
		t.Fatalf("deletion-only change must rebase: %v %s", v, why)
	}
	if v, _ := RepackRebase(base, frag(0, "a", "c")); v != Retryable {
		t.Fatalf("changed files must be retryable, got %v", v)
	}
	if v, _ := RepackRebase(base, frag(0, "a")); v != Retryable {
		t.Fatalf("dropped file must be retryable, got %v", v)
	}
	if v, _ := RepackRebase(base, nil); v != Retryable {
		t.Fatalf("removed fragment must be retryable, got %v", v)
	}
}

func TestCatchUpClassify(t *testing.T) {
	o := &CatchUpOutput{CatchUp: &CatchUpTask{Index: "vec_idx", Fragments: []uint64{4, 5}}}
	cases := []struct {
		name string
		txn  *tablepb.Transaction
		want Verdict
	}{
		{"append is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Append_{Append: &tablepb.Transaction_Append{}}}, Compatible},
		{"mem wal is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_UpdateMemWalState_{UpdateMemWalState: &tablepb.Transaction_UpdateMemWalState{}}}, Compatible},
		{"delete in a read fragment defers to rebase", &tablepb.Transaction{Operation: &tablepb.Transaction_Delete_{Delete: &tablepb.Transaction_Delete{DeletedFragmentIds: []uint64{4}}}}, Compatible},
		{"data replacement defers to rebase", &tablepb.Transaction{Operation: &tablepb.Transaction_DataReplacement_{DataReplacement: &tablepb.Transaction_DataReplacement{Replacements: []*tablepb.Transaction_DataReplacementGroup{{FragmentId: 5}}}}}, Compatible},
		{"rewrite of a read fragment is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{Groups: []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(5)}}}}}}, Retryable},
		{"rewrite elsewhere is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{Groups: []*tablepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*tablepb.DataFragment{frag(1)}}}}}}, Compatible},
		{"merge is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_Merge_{Merge: &tablepb.Transaction_Merge{}}}, Retryable},
		{"the same index changed is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: "vec_idx"}}}}}, Retryable},
		{"a segment of the index removed is retryable", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{RemovedIndices: []*tablepb.IndexMetadata{{Name: "vec_idx"}}}}}, Retryable},
		{"another index is compatible", &tablepb.Transaction{Operation: &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: []*tablepb.IndexMetadata{{Name: "id_idx"}}}}}, Compatible},
		{"restore is incompatible", &tablepb.Transaction{Operation: &tablepb.Transaction_Restore_{Restore: &tablepb.Transaction_Restore{}}}, Incompatible},
		{"unknown is incompatible", &tablepb.Transaction{}, Incompatible},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, why := o.Classify(c.txn); got != c.want {
				t.Fatalf("got %v (%s), want %v", got, why, c.want)
			}
		})
	}
}

// Every operation the transaction protobuf defines has a class, so no
// job kind's rules fall through to "unknown operation" for a known one.
func TestEveryOperationHasAClass(t *testing.T) {
	oneof := (&tablepb.Transaction{}).ProtoReflect().Descriptor().Oneofs().ByName("operation")
	if oneof == nil {
		t.Fatal("no operation oneof in Transaction")
	}
	for i := 0; i < oneof.Fields().Len(); i++ {
		fd := oneof.Fields().Get(i)
		txn := &tablepb.Transaction{}
		m := txn.ProtoReflect()
		m.Set(fd, m.NewField(fd))
		if classOf(txn) == opUnknown {
			t.Errorf("operation %s has no class", fd.Name())
		}
	}
}
