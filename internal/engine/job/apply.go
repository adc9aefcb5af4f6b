package job

import (
	"errors"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

// fragReuseIndexName is Lance's system index that defers index remaps.
const fragReuseIndexName = index.FragReuseName

// ErrInvariant reports that a commit we were about to make, or just made,
// does not hold what its tasks promised. The table is held.
var ErrInvariant = errors.New("engine: invariant violated")

// decodeBitmap decodes a fragment bitmap a segment must have
// (index.DecodeBitmap, for which an empty one is none recorded).
func decodeBitmap(b []byte) (*roaring.Bitmap, error) {
	bm, err := index.DecodeBitmap(b)
	if err == nil && bm == nil {
		err = errors.New("no fragment bitmap recorded")
	}
	return bm, err
}

// RewriteGroup is one executed rewrite task ready to commit: the fragments it
// read (as they were at the read version) and the fragments it wrote (ids
// unassigned; they are given fresh ids on every commit attempt).
type RewriteGroup struct {
	Old []*tablepb.DataFragment
	New []*tablepb.DataFragment
	// Reserved: New carry ids reserved by a ReserveFragments commit (an
	// index remap wrote them into index files); they are kept as they are.
	Reserved bool
}

// OldIDs returns the ids of the fragments the group replaces.
func (g *RewriteGroup) OldIDs() map[uint64]bool {
	m := make(map[uint64]bool, len(g.Old))
	for _, f := range g.Old {
		m[f.GetId()] = true
	}
	return m
}

// ApplyRewrite returns a copy of latest with the groups applied, in the way
// Lance's build_manifest applies a Rewrite: the old fragments are removed,
// the new ones get ids above the high-water mark, fragments are sorted by id.
// It also returns the transaction's groups with the ids assigned. Indices are
// left to ApplyRewriteIndices. latest is not modified.
func ApplyRewrite(latest *tablepb.Manifest, groups []*RewriteGroup) (*tablepb.Manifest, []*tablepb.Transaction_Rewrite_RewriteGroup, error) {
	out := proto.Clone(latest).(*tablepb.Manifest)
	present := make(map[uint64]*tablepb.DataFragment, len(out.GetFragments()))
	for _, f := range out.GetFragments() {
		present[f.GetId()] = f
	}
	top, hasFrags := format.MaxFragmentID(latest)
	next := uint64(top)
	if hasFrags {
		next++
	}
	remove := map[uint64]bool{}
	taken := map[uint64]bool{}
	var added []*tablepb.DataFragment
	var txGroups []*tablepb.Transaction_Rewrite_RewriteGroup
	for gi, g := range groups {
		if len(g.Old) == 0 || len(g.New) == 0 {
			return nil, nil, fmt.Errorf("rewrite group %d: empty", gi)
		}
		for _, f := range g.Old {
			if present[f.GetId()] == nil {
				return nil, nil, fmt.Errorf("rewrite group %d: fragment %d is no longer in the table", gi, f.GetId())
			}
			if remove[f.GetId()] {
				return nil, nil, fmt.Errorf("rewrite group %d: fragment %d is in two groups", gi, f.GetId())
			}
			remove[f.GetId()] = true
		}
		tg := &tablepb.Transaction_Rewrite_RewriteGroup{}
		for _, f := range g.Old {
			tg.OldFragments = append(tg.OldFragments, proto.Clone(f).(*tablepb.DataFragment))
		}
		for _, f := range g.New {
			nf := proto.Clone(f).(*tablepb.DataFragment)
			if g.Reserved {
				// Ids reserved by a ReserveFragments commit (Lance keeps a
				// new fragment's non-zero id, fragments_with_ids in
				// transaction.rs): they must be within the reserved range
				// and unused.
				if nf.GetId() == 0 || nf.GetId() > uint64(top) || !hasFrags {
					return nil, nil, fmt.Errorf("rewrite group %d: new fragment id %d was not reserved (max_fragment_id %d)", gi, nf.GetId(), top)
				}
				if present[nf.GetId()] != nil || taken[nf.GetId()] {
					return nil, nil, fmt.Errorf("rewrite group %d: reserved fragment id %d is already used", gi, nf.GetId())
				}
				taken[nf.GetId()] = true
			} else {
				nf.Id = next
				next++
			}
			tg.NewFragments = append(tg.NewFragments, nf)
			added = append(added, proto.Clone(nf).(*tablepb.DataFragment))
		}
		txGroups = append(txGroups, tg)
	}
	frags := out.Fragments[:0]
	for _, f := range out.GetFragments() {
		if !remove[f.GetId()] {
			frags = append(frags, f)
		}
	}
	frags = append(frags, added...)
	sort.SliceStable(frags, func(i, j int) bool { return frags[i].GetId() < frags[j].GetId() })
	out.Fragments = frags
	if len(added) > 0 && next > 0 {
		mx := uint32(next - 1)
		if out.MaxFragmentId == nil || out.GetMaxFragmentId() < mx {
			out.MaxFragmentId = &mx
		}
	}
	return out, txGroups, nil
}

// ApplyRewriteIndices updates index fragment bitmaps for committed rewrite
// groups. In stable row-id mode indices hold row ids, which a rewrite keeps,
// so every bitmap is recalculated as Lance does (index.Recalculate: a
// group's old ids are replaced by its new ids; a group only partly covered
// by an index is refused, as Lance refuses it). In address mode indices hold
// row addresses, so a bitmap is left as it is unless the index files were
// remapped: readers intersect it with the live fragments and the new
// fragments are unindexed (effective_fragment_bitmap in
// https://github.com/lancedb/lance/blob/main/rust/lance-table/src/format/index.rs).
// Adding new ids there
// would silently lose rows, so it is never done. Unknown fields on index
// metadata survive.
func ApplyRewriteIndices(indices []*tablepb.IndexMetadata, groups []*tablepb.Transaction_Rewrite_RewriteGroup, stableRowIDs bool) ([]*tablepb.IndexMetadata, error) {
	if !stableRowIDs {
		return indices, nil
	}
	out := make([]*tablepb.IndexMetadata, len(indices))
	for i, idx := range indices {
		if idx.GetName() == fragReuseIndexName || len(idx.GetFragmentBitmap()) == 0 {
			out[i] = idx
			continue
		}
		bm, err := decodeBitmap(idx.GetFragmentBitmap())
		if err != nil {
			return nil, fmt.Errorf("index %q: fragment bitmap: %w", idx.GetName(), err)
		}
		changed := false
		for _, g := range groups {
			oldIDs := make([]uint64, 0, len(g.GetOldFragments()))
			for _, f := range g.GetOldFragments() {
				oldIDs = append(oldIDs, f.GetId())
			}
			newIDs := make([]uint64, 0, len(g.GetNewFragments()))
			for _, f := range g.GetNewFragments() {
				newIDs = append(newIDs, f.GetId())
			}
			ch, err := index.Recalculate(bm, oldIDs, newIDs)
			if err != nil {
				return nil, fmt.Errorf("index %q: %w", idx.GetName(), err)
			}
			changed = changed || ch
		}
		if !changed {
			out[i] = idx
			continue
		}
		b, err := index.EncodeBitmap(bm)
		if err != nil {
			return nil, err
		}
		c := proto.Clone(idx).(*tablepb.IndexMetadata)
		c.FragmentBitmap = b
		out[i] = c
	}
	return out, nil
}

// RepackResult is one executed repack: the fragment as the task read it and
// the data files it should have afterwards.
type RepackResult struct {
	Base  *tablepb.DataFragment
	Files []*tablepb.DataFile
}

// ApplyRepacks returns a copy of latest in which every repacked fragment has
// its files swapped, and the Update transaction payload that carries them
// (updated_fragments = the fragments as committed, update_mode =
// REWRITE_COLUMNS, fields_modified empty so no index loses coverage). Each
// fragment is taken from latest, so deletions, row ids and version sequences
// committed concurrently are kept; a fragment whose files changed since the
// repack read it is refused (see RepackRebase).
func ApplyRepacks(latest *tablepb.Manifest, repacks []*RepackResult) (*tablepb.Manifest, *tablepb.Transaction_Update, error) {
	out := proto.Clone(latest).(*tablepb.Manifest)
	byID := make(map[uint64]int, len(out.GetFragments()))
	for i, f := range out.GetFragments() {
		byID[f.GetId()] = i
	}
	up := &tablepb.Transaction_Update{UpdateMode: tablepb.Transaction_REWRITE_COLUMNS}
	seen := map[uint64]bool{}
	for _, r := range repacks {
		id := r.Base.GetId()
		if seen[id] {
			return nil, nil, fmt.Errorf("fragment %d repacked twice in one commit", id)
		}
		seen[id] = true
		var cur *tablepb.DataFragment
		if i, ok := byID[id]; ok {
			cur = out.Fragments[i]
		}
		if v, why := RepackRebase(r.Base, cur); v != Compatible {
			return nil, nil, &TaskConflict{Fragment: id, Verdict: v, Reason: why}
		}
		nf := proto.Clone(cur).(*tablepb.DataFragment)
		nf.Files = nil
		for _, f := range r.Files {
			nf.Files = append(nf.Files, proto.Clone(f).(*tablepb.DataFile))
		}
		out.Fragments[byID[id]] = nf
		up.UpdatedFragments = append(up.UpdatedFragments, proto.Clone(nf).(*tablepb.DataFragment))
	}
	return out, up, nil
}

// TaskConflict reports that one task cannot be committed on the latest
// version; the other tasks of the batch may still commit.
type TaskConflict struct {
	Fragment uint64
	Verdict  Verdict
	Reason   string
}

func (e *TaskConflict) Error() string {
	return fmt.Sprintf("fragment %d: %s: %s", e.Fragment, e.Verdict, e.Reason)
}
