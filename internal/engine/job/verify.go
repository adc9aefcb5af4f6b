package job

import (
	"errors"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

// Verification after every commit :
// the manifest that was committed must hold exactly what the tasks promised.
// A mismatch is an ErrInvariant: the table is held and nothing more is done
// to it (no further commits, no cleanup) until an operator looks.

// liveFields returns the field ids that the fragment's files hold and the
// schema still has.
func liveFields(f *tablepb.DataFragment, schema map[int32]bool) map[int32]bool {
	out := map[int32]bool{}
	for _, df := range f.GetFiles() {
		for _, id := range df.GetFields() {
			if schema[id] {
				out[id] = true
			}
		}
	}
	return out
}

func schemaIDs(m *tablepb.Manifest) map[int32]bool {
	out := make(map[int32]bool, len(m.GetFields()))
	for _, f := range m.GetFields() {
		out[f.GetId()] = true
	}
	return out
}

// VerifyRewrite checks a committed Rewrite: before is the manifest it was
// built on, after the committed one, groups the transaction's groups.
func VerifyRewrite(before, after *tablepb.Manifest, groups []*tablepb.Transaction_Rewrite_RewriteGroup) error {
	if !sameSchema(before, after) {
		return fmt.Errorf("%w: rewrite changed the schema", ErrInvariant)
	}
	removed, added := map[uint64]bool{}, map[uint64]*tablepb.DataFragment{}
	beforeByID := format.FragmentsByID(before)
	for gi, g := range groups {
		var oldLive, newRows uint64
		for _, f := range g.GetOldFragments() {
			if v, why := RewriteRebase(f, beforeByID[f.GetId()]); v != Compatible {
				return fmt.Errorf("%w: group %d: %s", ErrInvariant, gi, why)
			}
			removed[f.GetId()] = true
			oldLive += format.LiveRows(f)
		}
		for _, f := range g.GetNewFragments() {
			added[f.GetId()] = f
			newRows += f.GetPhysicalRows()
			if f.GetDeletionFile() != nil {
				return fmt.Errorf("%w: group %d: new fragment %d has a deletion file", ErrInvariant, gi, f.GetId())
			}
		}
		if oldLive != newRows {
			return fmt.Errorf("%w: group %d: %d live rows read, %d rows written", ErrInvariant, gi, oldLive, newRows)
		}
	}
	afterByID := format.FragmentsByID(after)
	for id := range removed {
		if afterByID[id] != nil {
			return fmt.Errorf("%w: rewritten fragment %d is still in the table", ErrInvariant, id)
		}
	}
	for id, f := range added {
		if got := afterByID[id]; got == nil || !proto.Equal(got, f) {
			return fmt.Errorf("%w: new fragment %d is not in the table as written", ErrInvariant, id)
		}
	}
	for _, f := range before.GetFragments() {
		if removed[f.GetId()] {
			continue
		}
		if got := afterByID[f.GetId()]; got == nil || !proto.Equal(got, f) {
			return fmt.Errorf("%w: untouched fragment %d changed", ErrInvariant, f.GetId())
		}
	}
	if len(after.GetFragments()) != len(before.GetFragments())-len(removed)+len(added) {
		return fmt.Errorf("%w: %d fragments after the rewrite, want %d", ErrInvariant,
			len(after.GetFragments()), len(before.GetFragments())-len(removed)+len(added))
	}
	return nil
}

// VerifyRepack checks a committed repack carrier: every repacked fragment
// keeps its rows, deletions and lineage and still holds every live field;
// every other fragment is untouched.
func VerifyRepack(before, after *tablepb.Manifest, updated []*tablepb.DataFragment) error {
	if !sameSchema(before, after) {
		return fmt.Errorf("%w: repack changed the schema", ErrInvariant)
	}
	schema := schemaIDs(after)
	beforeByID, afterByID := format.FragmentsByID(before), format.FragmentsByID(after)
	touched := map[uint64]bool{}
	for _, u := range updated {
		id := u.GetId()
		touched[id] = true
		b, a := beforeByID[id], afterByID[id]
		if b == nil || a == nil {
			return fmt.Errorf("%w: repacked fragment %d missing", ErrInvariant, id)
		}
		if a.GetPhysicalRows() != b.GetPhysicalRows() ||
			!proto.Equal(a.GetDeletionFile(), b.GetDeletionFile()) ||
			string(a.GetInlineRowIds()) != string(b.GetInlineRowIds()) ||
			string(a.GetInlineCreatedAtVersions()) != string(b.GetInlineCreatedAtVersions()) ||
			string(a.GetInlineLastUpdatedAtVersions()) != string(b.GetInlineLastUpdatedAtVersions()) {
			return fmt.Errorf("%w: repacked fragment %d changed rows, deletions or lineage", ErrInvariant, id)
		}
		want, got := liveFields(b, schema), liveFields(a, schema)
		for fid := range want {
			if !got[fid] {
				return fmt.Errorf("%w: repacked fragment %d lost field %d", ErrInvariant, id, fid)
			}
		}
		seen := map[int32]string{}
		for _, df := range a.GetFiles() {
			for _, fid := range df.GetFields() {
				if fid < 0 || !schema[fid] {
					continue
				}
				if p, dup := seen[fid]; dup {
					return fmt.Errorf("%w: fragment %d holds field %d in %s and %s", ErrInvariant, id, fid, p, df.GetPath())
				}
				seen[fid] = df.GetPath()
			}
		}
	}
	if len(after.GetFragments()) != len(before.GetFragments()) {
		return fmt.Errorf("%w: repack changed the fragment count", ErrInvariant)
	}
	for _, f := range before.GetFragments() {
		if touched[f.GetId()] {
			continue
		}
		if !proto.Equal(afterByID[f.GetId()], f) {
			return fmt.Errorf("%w: untouched fragment %d changed", ErrInvariant, f.GetId())
		}
	}
	return nil
}

func sameSchema(a, b *tablepb.Manifest) bool {
	if len(a.GetFields()) != len(b.GetFields()) {
		return false
	}
	for i := range a.GetFields() {
		if !proto.Equal(a.GetFields()[i], b.GetFields()[i]) {
			return false
		}
	}
	return true
}

// CheckIndexCoverage compares the indices of a rewrite's base version with
// those of the version it builds (or built) and reports what real Lance
// would lose: an index name that is gone; an index that real Lance's next
// Delete/Update/Merge/Project commit would drop (a vector index left
// covering no existing fragment) when it would not have dropped it before;
// and, on a table without stable row ids, a segment whose files were not
// rewritten (same uuid) but whose fragment bitmap gained fragment ids, which
// would make queries through it miss the rows of those fragments.
func CheckIndexCoverage(before *tablepb.Manifest, beforeIdx []*tablepb.IndexMetadata, after *tablepb.Manifest, afterIdx []*tablepb.IndexMetadata) error {
	// Lance applies its retention rule to bitmaps read through the
	// fragment reuse index; a segment's claim is checked as recorded.
	// A reuse index that cannot be read (details in an external file)
	// leaves the bitmaps as recorded; the planner keeps the fragments its
	// indices cover.
	bt, _, err := index.ThroughReuse(beforeIdx)
	if err != nil {
		bt = beforeIdx
	}
	at, _, err := index.ThroughReuse(afterIdx)
	if err != nil {
		if !errors.Is(err, index.ErrReuseExternal) {
			return err
		}
		at = afterIdx
	}
	groups := make([][]*index.Index, 4)
	for i, in := range [][]*tablepb.IndexMetadata{bt, at, beforeIdx, afterIdx} {
		if groups[i], err = index.Group(in); err != nil {
			return err
		}
	}
	bti, ati, bi, ai := groups[0], groups[1], groups[2], groups[3]
	lost := func(ixs []*index.Index, m *tablepb.Manifest) map[string]bool {
		out := map[string]bool{}
		for _, d := range index.Retention(ixs, index.Fragments(m.GetFragments())) {
			if d.Lost {
				out[d.Name] = true
			}
		}
		return out
	}
	lostBefore, lostAfter := lost(bti, before), lost(ati, after)
	names := map[string]*index.Index{}
	for _, ix := range ai {
		names[ix.Name] = ix
	}
	for _, ix := range bi {
		if names[ix.Name] == nil {
			return fmt.Errorf("index %s (%s) is gone", ix.Name, ix.Kind)
		}
		if lostAfter[ix.Name] && !lostBefore[ix.Name] {
			return fmt.Errorf("index %s (%s) would cover no existing fragment; real Lance drops it at its next delete/update/merge_insert/add_columns commit", ix.Name, ix.Kind)
		}
	}
	if after.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0 {
		return nil
	}
	seg := map[string]*index.Segment{}
	for _, ix := range bi {
		for _, s := range ix.Segments {
			seg[s.UUID()] = s
		}
	}
	for _, ix := range ai {
		for _, s := range ix.Segments {
			old := seg[s.UUID()]
			if old == nil || s.Bitmap == nil {
				continue
			}
			if old.Bitmap == nil {
				return fmt.Errorf("index %s segment %s gained a fragment bitmap without being rewritten", ix.Name, s.UUID())
			}
			if extra := roaring.AndNot(s.Bitmap, old.Bitmap); !extra.IsEmpty() {
				return fmt.Errorf("index %s segment %s claims fragments %v its files do not index", ix.Name, s.UUID(), extra.ToArray())
			}
		}
	}
	return nil
}

// verifyStableCoverage checks a committed Rewrite on a table with stable
// row ids, where indices keep their files and follow the rows by their
// fragment bitmaps: for each index segment of the version it was built on
// and each group, a segment that covered the group's old fragments covers
// its new ones and none of the old, and a segment that covered none of
// them covers none of the new ones (a partly covered group is refused
// before commit, as Lance refuses it).
func verifyStableCoverage(beforeIdx, afterIdx []*tablepb.IndexMetadata, groups []*tablepb.Transaction_Rewrite_RewriteGroup) error {
	got := map[string]*tablepb.IndexMetadata{}
	for _, m := range afterIdx {
		got[segmentKey(m)] = m
	}
	for _, b := range beforeIdx {
		if index.Detect(b).IsSystem() || len(b.GetFragmentBitmap()) == 0 {
			continue
		}
		a := got[segmentKey(b)]
		if a == nil {
			return fmt.Errorf("index %q segment is gone", b.GetName())
		}
		bb, err := decodeBitmap(b.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("index %q: %v", b.GetName(), err)
		}
		ab, err := decodeBitmap(a.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("index %q: %v", b.GetName(), err)
		}
		for _, g := range groups {
			covered := false
			for _, f := range g.GetOldFragments() {
				covered = covered || bb.Contains(uint32(f.GetId()))
				if ab.Contains(uint32(f.GetId())) {
					return fmt.Errorf("index %q still claims rewritten fragment %d", b.GetName(), f.GetId())
				}
			}
			for _, f := range g.GetNewFragments() {
				if ab.Contains(uint32(f.GetId())) != covered {
					return fmt.Errorf("index %q: new fragment %d covered %v, its rows were covered %v", b.GetName(), f.GetId(), !covered, covered)
				}
			}
		}
	}
	return nil
}
