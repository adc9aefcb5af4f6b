package job

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Deferred index remap (index_coverage = "defer"): a rewrite that leaves
// every index file alone and records its groups as a new version of the
// table's fragment reuse index, as Lance's compaction does with
// defer_index_remap (commit_compaction and build_new_frag_reuse_index in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/optimize.rs
// and .../rust/lance/src/index/frag_reuse.rs). Real Lance translates every
// index's fragment bitmap and row addresses through the reuse index when it
// loads it. The reuse index is rebuilt from the latest manifest on every
// commit attempt: a reuse index taken from the read version would drop the
// versions of compactions committed since, while the bitmaps they changed
// already rely on them.

// defersIndices reports whether a rewrite job records its groups in the
// fragment reuse index (the executor collected its retained addresses).
func defersIndices(o *RewriteOutput) bool { return o.Retained != nil }

// hasRowIndex reports whether the section holds an index over rows (not a
// system index): without one a deferred rewrite records nothing.
func hasRowIndex(indices []*tablepb.IndexMetadata) bool {
	return slices.ContainsFunc(indices, func(m *tablepb.IndexMetadata) bool { return !index.Detect(m).IsSystem() })
}

// digestOf is a fragment as a reuse group records it (Lance's FragDigest:
// id, physical rows, deleted rows of its deletion file).
func digestOf(f *tablepb.DataFragment) index.FragDigest {
	return index.FragDigest{ID: f.GetId(), PhysicalRows: f.GetPhysicalRows(), NumDeletedRows: f.GetDeletionFile().GetNumDeletedRows()}
}

// deferIndices returns the index section with the fragment reuse index
// replaced by one that holds latest's reuse versions that some index still
// needs (Lance's cleanup rule, index.FragReuse.Trim) plus one new version,
// read at readVersion, with the deferred jobs' committed groups. It
// refuses (an error) a reuse index it cannot read or that would outgrow
// what Lance keeps inline, and a section whose bitmaps real Lance could not
// translate (a group only partly covered by an index).
//
// Segments remapped in the same commit (rewritten, kinds Lance does not
// defer) take readVersion as their dataset_version: their files hold the
// current addresses, so they are caught up on every reuse version, and
// Lance's cleanup rule (which reads dataset_version) may trim versions
// they no longer need.
func deferIndices(indices []*tablepb.IndexMetadata, deferred []*RewriteOutput, tg []*tablepb.Transaction_Rewrite_RewriteGroup, rewritten []*tablepb.Transaction_Rewrite_RewrittenIndex, readVersion uint64) ([]*tablepb.IndexMetadata, error) {
	fresh := map[string]bool{}
	for _, ri := range rewritten {
		fresh[string(ri.GetNewId().GetUuid())] = true
	}
	bumped := make([]*tablepb.IndexMetadata, len(indices))
	for i, m := range indices {
		bumped[i] = m
		if fresh[segmentKey(m)] && m.GetDatasetVersion() < readVersion {
			c := proto.Clone(m).(*tablepb.IndexMetadata)
			c.DatasetVersion = readVersion
			bumped[i] = c
		}
	}
	indices = bumped
	fr := &index.FragReuse{}
	if m := index.FindFragReuse(indices); m != nil {
		var err error
		if fr, err = index.DecodeFragReuse(m); err != nil {
			return nil, err
		}
	}
	fr.Versions, _ = fr.Trim(indices)
	v := index.ReuseVersion{DatasetVersion: readVersion}
	for _, o := range deferred {
		g := committedGroup(o.Group, tg)
		if g == nil {
			return nil, fmt.Errorf("%w: deferred rewrite of %v is not in the transaction", ErrInvalidTask, o.Rewrite.Fragments)
		}
		rg := index.ReuseGroup{Retained: o.Retained}
		for _, f := range g.GetOldFragments() {
			rg.Old = append(rg.Old, digestOf(f))
		}
		for _, f := range g.GetNewFragments() {
			rg.New = append(rg.New, index.FragDigest{ID: f.GetId(), PhysicalRows: f.GetPhysicalRows()})
		}
		v.Groups = append(v.Groups, rg)
	}
	fr.Versions = append(fr.Versions, v)
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	meta, err := fr.Build(id, readVersion, uint64(time.Now().UnixMilli()))
	if err != nil {
		return nil, err
	}
	out := make([]*tablepb.IndexMetadata, 0, len(indices)+1)
	for _, m := range indices {
		if m.GetName() != index.FragReuseName {
			out = append(out, m)
		}
	}
	out = append(out, meta)
	if _, _, err := index.ThroughReuse(out); err != nil {
		return nil, err
	}
	return out, nil
}

// committedGroup finds the transaction group of a rewrite job: the same
// old fragments in the same order.
func committedGroup(g *RewriteGroup, tg []*tablepb.Transaction_Rewrite_RewriteGroup) *tablepb.Transaction_Rewrite_RewriteGroup {
	for _, t := range tg {
		if slices.EqualFunc(g.Old, t.GetOldFragments(), func(a, b *tablepb.DataFragment) bool { return a.GetId() == b.GetId() }) {
			return t
		}
	}
	return nil
}

// verifyDeferred checks that the committed index section holds a fragment
// reuse index whose newest version records every deferred group (old and
// new fragment ids in order) and that its bitmaps translate.
func verifyDeferred(got []*tablepb.IndexMetadata, tg []*tablepb.Transaction_Rewrite_RewriteGroup) error {
	m := index.FindFragReuse(got)
	if m == nil {
		return errors.New("deferred rewrite committed without a fragment reuse index")
	}
	fr, err := index.DecodeFragReuse(m)
	if err != nil {
		return err
	}
	if len(fr.Versions) == 0 {
		return errors.New("deferred rewrite committed a fragment reuse index without versions")
	}
	last := fr.Versions[len(fr.Versions)-1]
	for _, g := range tg {
		found := slices.ContainsFunc(last.Groups, func(rg index.ReuseGroup) bool {
			return slices.EqualFunc(rg.Old, g.GetOldFragments(), func(d index.FragDigest, f *tablepb.DataFragment) bool { return d.ID == f.GetId() }) &&
				slices.EqualFunc(rg.New, g.GetNewFragments(), func(d index.FragDigest, f *tablepb.DataFragment) bool {
					return d.ID == f.GetId() && d.PhysicalRows == f.GetPhysicalRows()
				})
		})
		if !found {
			return fmt.Errorf("fragment reuse index does not record the rewrite of fragments %v", fragIDs(g.GetOldFragments()))
		}
	}
	if _, _, err := index.ThroughReuse(got); err != nil {
		return err
	}
	return nil
}

func fragIDs(fs []*tablepb.DataFragment) []uint64 {
	out := make([]uint64, len(fs))
	for i, f := range fs {
		out[i] = f.GetId()
	}
	return out
}
