package job

import (
	"fmt"

	"github.com/lanced-dev/lanced/internal/format"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

// Verdict is the outcome of checking one of our pending commits against a
// transaction that another writer committed after our read version. The rules
// are Lance 8.0.0's transaction conflict rules
// (https://github.com/lancedb/lance/blob/main/docs/src/format/table/transaction.md),
// with a stricter rebase rule for repacks. See internal/engine/COMMIT.md.
type Verdict int

const (
	// Compatible: rebuild our manifest on the new latest version and retry.
	Compatible Verdict = iota
	// Retryable: our inputs changed underneath us; the task must be planned
	// again from the new version (its outputs are discarded).
	Retryable
	// Incompatible: the table was replaced (overwrite, restore) or changed in
	// a way we do not understand; abandon and discard our outputs.
	Incompatible
)

func (v Verdict) String() string {
	switch v {
	case Compatible:
		return "compatible"
	case Retryable:
		return "retryable"
	case Incompatible:
		return "incompatible"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// touchedFragments returns the ids of existing fragments that a committed
// transaction modified or removed (Lance's modified_fragment_ids), and whether
// the operation is one whose fragment effects we understand.
func touchedFragments(t *tablepb.Transaction) (ids []uint64) {
	switch op := t.GetOperation().(type) {
	case *tablepb.Transaction_Delete_:
		for _, f := range op.Delete.GetUpdatedFragments() {
			ids = append(ids, f.GetId())
		}
		ids = append(ids, op.Delete.GetDeletedFragmentIds()...)
	case *tablepb.Transaction_Update_:
		for _, f := range op.Update.GetUpdatedFragments() {
			ids = append(ids, f.GetId())
		}
		ids = append(ids, op.Update.GetRemovedFragmentIds()...)
	case *tablepb.Transaction_Rewrite_:
		for _, f := range op.Rewrite.GetOldFragments() {
			ids = append(ids, f.GetId())
		}
		for _, g := range op.Rewrite.GetGroups() {
			for _, f := range g.GetOldFragments() {
				ids = append(ids, f.GetId())
			}
		}
	case *tablepb.Transaction_DataReplacement_:
		for _, r := range op.DataReplacement.GetReplacements() {
			ids = append(ids, r.GetFragmentId())
		}
	}
	return ids
}

func intersects(ids []uint64, set map[uint64]bool) (uint64, bool) {
	for _, id := range ids {
		if set[id] {
			return id, true
		}
	}
	return 0, false
}

// opClass groups the operations of a committed transaction by what they
// do to the fragments of the table; both job kinds' conflict rules are
// written against these groups.
type opClass int

const (
	opUnknown opClass = iota
	// opKeepsFragments adds or reserves fragments, or changes the schema
	// projection, configuration or base paths: existing fragments keep
	// their files.
	opKeepsFragments
	// opTouchesFragments modifies or removes existing fragments (the ids
	// touchedFragments lists).
	opTouchesFragments
	opCreateIndex
	opMerge
	opReplacesTable
	opMemWalState
)

func classOf(t *tablepb.Transaction) opClass {
	switch t.GetOperation().(type) {
	case *tablepb.Transaction_Append_, *tablepb.Transaction_ReserveFragments_,
		*tablepb.Transaction_Project_, *tablepb.Transaction_Clone_,
		*tablepb.Transaction_UpdateConfig_, *tablepb.Transaction_UpdateBases_:
		return opKeepsFragments
	case *tablepb.Transaction_Delete_, *tablepb.Transaction_Update_,
		*tablepb.Transaction_Rewrite_, *tablepb.Transaction_DataReplacement_:
		return opTouchesFragments
	case *tablepb.Transaction_CreateIndex_:
		return opCreateIndex
	case *tablepb.Transaction_Merge_:
		return opMerge
	case *tablepb.Transaction_Overwrite_, *tablepb.Transaction_Restore_:
		return opReplacesTable
	case *tablepb.Transaction_UpdateMemWalState_:
		return opMemWalState
	}
	return opUnknown
}

// ClassifyForRewrite checks a committed transaction against our Rewrite whose
// old fragments are oldIDs (Lance's check_rewrite_txn, table A, for a Rewrite
// that carries no fragment-reuse index).
func ClassifyForRewrite(oldIDs map[uint64]bool, theirs *tablepb.Transaction) (Verdict, string) {
	name := format.OperationName(theirs)
	switch classOf(theirs) {
	case opKeepsFragments, opMemWalState:
		return Compatible, name + " does not touch rewritten fragments"
	case opTouchesFragments:
		if id, ok := intersects(touchedFragments(theirs), oldIDs); ok {
			return Retryable, fmt.Sprintf("%s modified fragment %d that the rewrite replaces", name, id)
		}
		return Compatible, name + " touched other fragments"
	case opMerge:
		return Retryable, "Merge replaced the fragment list and schema"
	case opCreateIndex:
		return classifyIndexForRewrite(oldIDs, theirs.GetCreateIndex())
	case opReplacesTable:
		return Incompatible, name + " replaced the table"
	}
	return Incompatible, "unknown operation " + name
}

// classifyIndexForRewrite checks a committed CreateIndex against our
// Rewrite of oldIDs: an index built over a rewritten fragment would point
// at rows the rewrite moves.
func classifyIndexForRewrite(oldIDs map[uint64]bool, ci *tablepb.Transaction_CreateIndex) (Verdict, string) {
	for _, idx := range ci.GetNewIndices() {
		if idx.GetName() == fragReuseIndexName {
			if len(ci.GetNewIndices()) == 1 && len(ci.GetRemovedIndices()) == 1 {
				return Compatible, "CreateIndex swapped the fragment-reuse index one for one"
			}
			return Incompatible, "CreateIndex changed the fragment-reuse index"
		}
	}
	for _, idx := range ci.GetNewIndices() {
		if len(idx.GetFragmentBitmap()) == 0 {
			return Retryable, fmt.Sprintf("CreateIndex %q has no fragment bitmap", idx.GetName())
		}
		bm, err := decodeBitmap(idx.GetFragmentBitmap())
		if err != nil {
			return Retryable, fmt.Sprintf("CreateIndex %q has an unreadable fragment bitmap: %v", idx.GetName(), err)
		}
		for id := range oldIDs {
			if id <= 0xffffffff && bm.Contains(uint32(id)) {
				return Retryable, fmt.Sprintf("CreateIndex %q covers rewritten fragment %d", idx.GetName(), id)
			}
		}
	}
	return Compatible, "CreateIndex covers other fragments"
}

// RewriteRebase decides whether a rewrite group that read fragment read
// (as it was at the rewrite's read version) can still replace it in
// latest, the same fragment in the newest manifest (nil if it is gone).
// The rewritten rows, and the row addresses an index remap wrote for them,
// are those of read: a fragment that lost rows since (a Delete or Update
// committed a deletion file), or whose rows or row ids changed, would bring
// deleted rows back and leave the remapped index pointing at them. Lance
// 8.0.0 retries a Rewrite over a Delete or Update of its fragments
// (check_rewrite_txn in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/io/commit/conflict_resolver.rs;
// a rebase that carries the deletions over is still open upstream:
// https://github.com/lance-format/lance/issues/6150), so this is retryable
// too. It guards the commit whatever the classification of the committed
// transactions said.
func RewriteRebase(read, latest *tablepb.DataFragment) (Verdict, string) {
	id := read.GetId()
	switch {
	case latest == nil:
		return Retryable, fmt.Sprintf("fragment %d that the rewrite replaces was removed", id)
	case latest.GetPhysicalRows() != read.GetPhysicalRows():
		return Retryable, fmt.Sprintf("fragment %d that the rewrite replaces changed its rows", id)
	case !proto.Equal(latest.GetDeletionFile(), read.GetDeletionFile()):
		return Retryable, fmt.Sprintf("fragment %d that the rewrite replaces has new deletions since the rewrite read it", id)
	case string(latest.GetInlineRowIds()) != string(read.GetInlineRowIds()) || !proto.Equal(latest.GetExternalRowIds(), read.GetExternalRowIds()):
		return Retryable, fmt.Sprintf("fragment %d that the rewrite replaces has other row ids", id)
	}
	return Compatible, ""
}

// ClassifyForRepack checks a committed transaction against our repack of the
// fragments in frags (committed with the Update REWRITE_COLUMNS carrier).
//
// A transaction that may have changed one of our fragments is not judged
// here by its kind alone: the caller compares the fragment in the latest
// manifest with the one the repack read (RepackRebase). Only operations that
// replace the table, or that we do not know, are final here.
func ClassifyForRepack(frags map[uint64]bool, theirs *tablepb.Transaction) (Verdict, string) {
	name := format.OperationName(theirs)
	switch classOf(theirs) {
	case opKeepsFragments, opCreateIndex:
		return Compatible, name + " keeps fragment files"
	case opTouchesFragments:
		if id, ok := intersects(touchedFragments(theirs), frags); ok {
			// Decided by the fragment's state in the latest manifest.
			return Compatible, fmt.Sprintf("%s touched fragment %d: rebase checks its files", name, id)
		}
		return Compatible, name + " touched other fragments"
	case opMerge:
		return Retryable, "Merge replaced the fragment list and schema"
	case opReplacesTable, opMemWalState:
		return Incompatible, name + " replaced the table or its write state"
	}
	return Incompatible, "unknown operation " + name
}

// RepackRebase decides whether a repack planned against base can be applied
// to latest, the same fragment in the newest manifest (nil if it is gone).
// Only a fragment whose data files are byte-identical to the ones the repack
// read may take the new files: its deletions, row ids and version sequences
// come from latest. Committing the fragment as planned would bring back rows
// deleted concurrently (observed on lance 8.0.0).
func RepackRebase(base, latest *tablepb.DataFragment) (Verdict, string) {
	if latest == nil {
		return Retryable, fmt.Sprintf("fragment %d was removed", base.GetId())
	}
	if len(base.GetFiles()) != len(latest.GetFiles()) {
		return Retryable, fmt.Sprintf("fragment %d data files changed", base.GetId())
	}
	for i := range base.GetFiles() {
		if !proto.Equal(base.GetFiles()[i], latest.GetFiles()[i]) {
			return Retryable, fmt.Sprintf("fragment %d data file %s changed", base.GetId(), base.GetFiles()[i].GetPath())
		}
	}
	if base.GetPhysicalRows() != latest.GetPhysicalRows() {
		return Retryable, fmt.Sprintf("fragment %d physical rows changed", base.GetId())
	}
	return Compatible, ""
}
