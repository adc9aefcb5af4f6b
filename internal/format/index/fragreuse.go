package index

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// The fragment reuse index (__lance_frag_reuse) is Lance's record of
// compactions that did not remap the indices (defer_index_remap): one reuse
// version per compaction, each listing its rewrite groups with the old row
// addresses the rewrite kept. Lance translates an index's fragment bitmap
// through it when it loads the index section (load_indices in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index.rs) and
// every old row address an index holds when it loads the index
// (remap_row_id in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/frag_reuse.rs),
// version after version, oldest first.

// FragReuseMaxInline is the largest encoded InlineContent Lance keeps in
// the manifest; above it Lance writes the content to details.binpb under
// the index's directory (build_frag_reuse_index_metadata in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/frag_reuse.rs).
const FragReuseMaxInline = 204800

// ErrReuseExternal reports a fragment reuse index whose details are in an
// external file: reading it needs I/O, which this package does not do.
var ErrReuseExternal = errors.New("fragment reuse index details are in an external file")

// ErrReuseTooLarge reports a fragment reuse index whose inline content would
// exceed FragReuseMaxInline.
var ErrReuseTooLarge = errors.New("fragment reuse index would exceed the inline size Lance keeps in the manifest")

// FragDigest is a fragment as a reuse group records it.
type FragDigest struct {
	ID             uint64
	PhysicalRows   uint64
	NumDeletedRows uint64
}

// ReuseGroup is one rewrite group of a reuse version: the old row addresses
// it kept (a serialized 64-bit Roaring treemap, ascending order = the order
// the rows were written), the old fragments in the order they were read and
// the new fragments in the order they were written.
type ReuseGroup struct {
	Retained []byte
	Old      []FragDigest
	New      []FragDigest
}

// ReuseVersion is one compaction: the dataset version it read and its
// groups.
type ReuseVersion struct {
	DatasetVersion uint64
	Groups         []ReuseGroup
}

// oldIn is how many of the group's old fragments bm holds.
func (g *ReuseGroup) oldIn(bm *roaring.Bitmap) int {
	in := 0
	for _, f := range g.Old {
		if bm.Contains(uint32(f.ID)) {
			in++
		}
	}
	return in
}

// NewBitmap returns the new fragment ids of every group.
func (v *ReuseVersion) NewBitmap() *roaring.Bitmap {
	bm := roaring.New()
	for _, g := range v.Groups {
		for _, f := range g.New {
			bm.Add(uint32(f.ID))
		}
	}
	return bm
}

// FragReuse is a decoded fragment reuse index.
type FragReuse struct {
	// Meta is the index entry (nil for one not yet built).
	Meta     *tablepb.IndexMetadata
	Versions []ReuseVersion
}

// FindFragReuse returns the fragment reuse index entry of an index section,
// or nil.
func FindFragReuse(indices []*tablepb.IndexMetadata) *tablepb.IndexMetadata {
	for _, m := range indices {
		if m.GetName() == FragReuseName {
			return m
		}
	}
	return nil
}

// DecodeFragReuse decodes the entry's inline details. Details in an
// external file are refused with ErrReuseExternal.
func DecodeFragReuse(m *tablepb.IndexMetadata) (*FragReuse, error) {
	d := m.GetIndexDetails()
	if d == nil || !bytes.HasSuffix([]byte(d.GetTypeUrl()), []byte(urlFragReuse)) {
		return nil, fmt.Errorf("index %q: details are not FragmentReuseIndexDetails", m.GetName())
	}
	var pb tablepb.FragmentReuseIndexDetails
	if err := proto.Unmarshal(d.GetValue(), &pb); err != nil {
		return nil, fmt.Errorf("fragment reuse index: %w", err)
	}
	fr := &FragReuse{Meta: m}
	switch {
	case pb.GetExternal() != nil:
		return nil, fmt.Errorf("%w (%s)", ErrReuseExternal, pb.GetExternal().GetPath())
	case pb.GetInline() == nil:
		return nil, errors.New("fragment reuse index: details have no content")
	}
	for _, v := range pb.GetInline().GetVersions() {
		rv := ReuseVersion{DatasetVersion: v.GetDatasetVersion()}
		for _, g := range v.GetGroups() {
			rg := ReuseGroup{Retained: g.GetChangedRowAddrs()}
			for _, f := range g.GetOldFragments() {
				rg.Old = append(rg.Old, FragDigest{ID: f.GetId(), PhysicalRows: f.GetPhysicalRows(), NumDeletedRows: f.GetNumDeletedRows()})
			}
			for _, f := range g.GetNewFragments() {
				rg.New = append(rg.New, FragDigest{ID: f.GetId(), PhysicalRows: f.GetPhysicalRows(), NumDeletedRows: f.GetNumDeletedRows()})
			}
			rv.Groups = append(rv.Groups, rg)
		}
		fr.Versions = append(fr.Versions, rv)
	}
	return fr, nil
}

// inline encodes the versions as Lance does, oldest dataset version first.
func (fr *FragReuse) inline() *tablepb.FragmentReuseIndexDetails_InlineContent {
	vs := slices.Clone(fr.Versions)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].DatasetVersion < vs[j].DatasetVersion })
	out := &tablepb.FragmentReuseIndexDetails_InlineContent{}
	for _, v := range vs {
		pv := &tablepb.FragmentReuseIndexDetails_Version{DatasetVersion: v.DatasetVersion}
		for _, g := range v.Groups {
			pg := &tablepb.FragmentReuseIndexDetails_Group{ChangedRowAddrs: g.Retained}
			for _, f := range g.Old {
				pg.OldFragments = append(pg.OldFragments, &tablepb.FragmentReuseIndexDetails_FragmentDigest{Id: f.ID, PhysicalRows: f.PhysicalRows, NumDeletedRows: f.NumDeletedRows})
			}
			for _, f := range g.New {
				pg.NewFragments = append(pg.NewFragments, &tablepb.FragmentReuseIndexDetails_FragmentDigest{Id: f.ID, PhysicalRows: f.PhysicalRows, NumDeletedRows: f.NumDeletedRows})
			}
			pv.Groups = append(pv.Groups, pg)
		}
		out.Versions = append(out.Versions, pv)
	}
	return out
}

// Build returns a new index entry for the versions: a new uuid, the given
// dataset version and creation time (ms), the new fragments of every
// version as its bitmap, index_version carried from the previous entry
// (build_frag_reuse_index_metadata). Unknown fields of the previous entry
// are not carried: Lance rebuilds the entry too. Content over
// FragReuseMaxInline is refused with ErrReuseTooLarge.
func (fr *FragReuse) Build(uuid [16]byte, datasetVersion, createdAtMs uint64) (*tablepb.IndexMetadata, error) {
	content := fr.inline()
	if n := proto.Size(content); n > FragReuseMaxInline {
		return nil, fmt.Errorf("%w: %d bytes in %d reuse version(s), limit %d", ErrReuseTooLarge, n, len(fr.Versions), FragReuseMaxInline)
	}
	val, err := proto.Marshal(&tablepb.FragmentReuseIndexDetails{Content: &tablepb.FragmentReuseIndexDetails_Inline{Inline: content}})
	if err != nil {
		return nil, err
	}
	bm := roaring.New()
	for i := range fr.Versions {
		bm.Or(fr.Versions[i].NewBitmap())
	}
	bb, err := EncodeBitmap(bm)
	if err != nil {
		return nil, err
	}
	m := &tablepb.IndexMetadata{
		Uuid:           &tablepb.UUID{Uuid: slices.Clone(uuid[:])},
		Name:           FragReuseName,
		Fields:         []int32{},
		DatasetVersion: datasetVersion,
		FragmentBitmap: bb,
		IndexDetails:   &anypb.Any{TypeUrl: "/lance.table." + urlFragReuse, Value: val},
		CreatedAt:      &createdAtMs,
	}
	iv := fr.Meta.GetIndexVersion()
	m.IndexVersion = &iv
	return m, nil
}

// RemapBitmap is Lance's remap_fragment_bitmap: for every version, oldest
// first, a group whose old fragments are all in bm is replaced by its new
// fragments. A group only partly in bm is an error (Lance refuses it as
// invalid input, and its load_indices panics on it).
func (fr *FragReuse) RemapBitmap(bm *roaring.Bitmap) error {
	for _, v := range fr.Versions {
		for _, g := range v.Groups {
			in := g.oldIn(bm)
			if in == 0 {
				continue
			}
			if in != len(g.Old) {
				return fmt.Errorf("fragment reuse version %d: group %v only partly covered (%d of %d fragments)", v.DatasetVersion, digestIDs(g.Old), in, len(g.Old))
			}
			for _, f := range g.Old {
				bm.Remove(uint32(f.ID))
			}
			for _, f := range g.New {
				bm.Add(uint32(f.ID))
			}
		}
	}
	return nil
}

func digestIDs(ds []FragDigest) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// ThroughReuse returns the index section as Lance's load_indices sees it:
// when it holds a fragment reuse index, every other entry's fragment bitmap
// is translated through it (copies; indices is not modified). The reuse
// index is returned too (nil when there is none).
func ThroughReuse(indices []*tablepb.IndexMetadata) ([]*tablepb.IndexMetadata, *FragReuse, error) {
	m := FindFragReuse(indices)
	if m == nil {
		return indices, nil, nil
	}
	fr, err := DecodeFragReuse(m)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*tablepb.IndexMetadata, len(indices))
	for i, ix := range indices {
		out[i] = ix
		if ix == m || len(ix.GetFragmentBitmap()) == 0 || len(fr.Versions) == 0 {
			continue
		}
		bm, err := DecodeBitmap(ix.GetFragmentBitmap())
		if err != nil {
			return nil, nil, fmt.Errorf("index %q: %w", ix.GetName(), err)
		}
		before := bm.Clone()
		if err := fr.RemapBitmap(bm); err != nil {
			return nil, nil, fmt.Errorf("index %q: %w", ix.GetName(), err)
		}
		if bm.Equals(before) {
			continue
		}
		c := proto.Clone(ix).(*tablepb.IndexMetadata)
		if c.FragmentBitmap, err = EncodeBitmap(bm); err != nil {
			return nil, nil, err
		}
		out[i] = c
	}
	return out, fr, nil
}

// CaughtUp is Lance's is_index_remap_caught_up: a segment no longer needs
// reuse version v when it was built at or after v's dataset version and
// covers none of v's old fragments (its files then hold no address v
// translates). System indices are always caught up; a segment without a
// bitmap is treated as caught up, as Lance does. A group only partly in the
// bitmap is an error.
func CaughtUp(v *ReuseVersion, seg *tablepb.IndexMetadata) (bool, error) {
	if Detect(seg).IsSystem() {
		return true, nil
	}
	if seg.GetDatasetVersion() < v.DatasetVersion {
		return false, nil
	}
	bm, err := DecodeBitmap(seg.GetFragmentBitmap())
	if err != nil || bm == nil {
		return bm == nil, err
	}
	for _, g := range v.Groups {
		in := g.oldIn(bm)
		if in > 0 && in != len(g.Old) {
			return false, fmt.Errorf("fragment reuse version %d: group %v only partly covered by index %q", v.DatasetVersion, digestIDs(g.Old), seg.GetName())
		}
		if in > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Trim is Lance's cleanup_frag_reuse_index rule over the recorded (not
// translated) index section: the versions every index segment is caught up
// on are dropped, and so are versions a segment covers only partly (Lance
// treats them as corrupt). It returns the versions kept and whether any was
// dropped.
func (fr *FragReuse) Trim(indices []*tablepb.IndexMetadata) ([]ReuseVersion, bool) {
	var kept []ReuseVersion
	for i := range fr.Versions {
		v := &fr.Versions[i]
		all, bad := true, false
		for _, seg := range indices {
			ok, err := CaughtUp(v, seg)
			if err != nil {
				bad = true
				break
			}
			all = all && ok
		}
		if !bad && !all {
			kept = append(kept, *v)
		}
	}
	return kept, len(kept) != len(fr.Versions)
}

// Behind reports whether a segment's files may still hold row addresses a
// retained reuse version translates: it was built before that version and
// its recorded bitmap names the version's old or new fragments (Lance
// persists translated bitmaps at its next commit, so either may appear).
// Rewriting such a segment's rows (a remap, a merge) without the reuse
// index's translation would lose them.
func (fr *FragReuse) Behind(seg *tablepb.IndexMetadata) (bool, error) {
	if fr == nil || Detect(seg).IsSystem() {
		return false, nil
	}
	bm, err := DecodeBitmap(seg.GetFragmentBitmap())
	if err != nil {
		return false, err
	}
	for i := range fr.Versions {
		v := &fr.Versions[i]
		if seg.GetDatasetVersion() >= v.DatasetVersion {
			continue
		}
		if bm == nil {
			return true, nil
		}
		for _, g := range v.Groups {
			if g.oldIn(bm) > 0 {
				return true, nil
			}
		}
		if bm.Intersects(v.NewBitmap()) {
			return true, nil
		}
	}
	return false, nil
}

// RetainedAddrs collects the old row addresses a rewrite group keeps, in
// the order it reads them.
type RetainedAddrs struct {
	bm *roaring64.Bitmap
}

// NewRetainedAddrs returns an empty collection.
func NewRetainedAddrs() *RetainedAddrs { return &RetainedAddrs{bm: roaring64.New()} }

// AddFragment adds every row of fragment id (physical rows) except the
// deleted ones (nil: none).
func (r *RetainedAddrs) AddFragment(id, physicalRows uint64, deleted *roaring.Bitmap) {
	base := id << 32
	if physicalRows == 0 {
		return
	}
	r.bm.AddRange(base, base+physicalRows)
	if deleted == nil {
		return
	}
	it := deleted.Iterator()
	for it.HasNext() {
		r.bm.Remove(base | uint64(it.Next()))
	}
}

// Len is the number of retained rows.
func (r *RetainedAddrs) Len() uint64 { return r.bm.GetCardinality() }

// Bytes serializes the addresses as Lance's RoaringTreemap serialize_into
// does: the number of 32-bit bitmaps (u64 LE), then per bitmap its high 32
// bits (u32 LE) and the bitmap in the portable format.
func (r *RetainedAddrs) Bytes() ([]byte, error) { return encodeRoaring(r.bm.Clone()) }

// deferrable are the index kinds whose rows lance 8.0.0 reads through the
// fragment reuse index wherever it reads them: in queries and when its
// optimize() rewrites the index (update with new rows, remap at
// compaction). Shown against real Lance: filters through a Bitmap and
// searches through IVF_PQ, IVF_FLAT and IVF_RQ return the rows and recall
// of an immediately remapped copy, before and after Lance's optimize().
// Not deferrable:
//   - BTree: its queries read through the reuse index, but its update and
//     remap read the recorded pages as they are (into_data_stream and
//     remap in
//     https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/btree.rs),
//     so after Lance's optimize() filters miss every row the reuse index
//     moved (measured: 2 of 8 rows of an IN filter);
//   - FTS: after two reuse versions and Lance's optimize(), a match query
//     returned 16 of 166 rows;
//   - HNSW (SQ, PQ): the storage drops the rows a reuse version deleted
//     but the graph is loaded as written, so its nodes no longer line up
//     with the vectors (measured: recall@10 from 1.0 to 0.15);
//   - LabelList and FM: not shown either way.
var deferrable = map[Kind]bool{KindBitmap: true, KindIVFPQ: true, KindIVFFlat: true, KindIVFRQ: true}

// Deferrable reports whether a rewrite may leave an index of kind k to the
// fragment reuse index (index_coverage = "defer"); other kinds are remapped
// in the same commit.
func Deferrable(k Kind) bool { return deferrable[k] }
