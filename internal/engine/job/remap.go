package job

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// KindRemap is the index remap task kind.
const KindRemap Kind = "remap"

// RemapTask remaps one index segment for a batch of rewrites of the same
// read version, the way Lance's commit_compaction remaps every index that
// covers a rewritten fragment before its Rewrite commit
// (https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/optimize.rs).
// The new fragment ids are fixed (reserved by a ReserveFragments commit)
// before the task runs, because the remapped files hold row addresses
// (fragment id << 32 | offset). The executor recomputes the row-address
// mapping from the read version's deletion files and Groups, so neither the
// task nor the result carries one entry per row.
type RemapTask struct {
	// Table is the table URI.
	Table string `json:"table"`
	// ReadVersion is the version the rewrites were planned against.
	ReadVersion uint64 `json:"read_version"`
	// Segment is the old segment's IndexMetadata (protobuf) as the read
	// version holds it: uuid, name, details, files and bitmap.
	Segment []byte `json:"segment"`
	// Groups are the rewrite groups whose old fragments the segment covers.
	Groups []RemapGroup `json:"groups"`
	// Seed makes randomized parts of a remap (HNSW levels) reproducible.
	Seed uint64 `json:"seed,omitempty"`
	// Slices, when set (two or more), split the remap into part tasks
	// (SliceTask), each over a range [Lo, Hi) of the segment's units of
	// work (IVF partitions, btree pages: index.PartRemapper), joined by page copy
	// (JoinTask) into the new segment.
	Slices []RowRange `json:"slices,omitempty"`
	// FMMaxBytes bounds a partition's text when the segment is an FM
	// index (rebuilt from the column); 0: the engine's default.
	FMMaxBytes uint64 `json:"fm_max_bytes,omitempty"`
}

// RemapGroup is one rewrite group of a remap: old fragment ids in the order
// the rewrite read them, new fragments with their reserved ids and rows.
type RemapGroup struct {
	Old []uint64      `json:"old"`
	New []RemapNewRow `json:"new"`
}

// RemapNewRow is a new fragment: reserved id and row count.
type RemapNewRow struct {
	ID   uint64 `json:"id"`
	Rows uint64 `json:"rows"`
}

// SegmentMeta decodes the old segment's metadata.
func (t *RemapTask) SegmentMeta() (*tablepb.IndexMetadata, error) {
	m := &tablepb.IndexMetadata{}
	if err := proto.Unmarshal(t.Segment, m); err != nil {
		return nil, fmt.Errorf("%w: remap segment metadata: %v", ErrInvalidTask, err)
	}
	return m, nil
}

// SegmentUUID is the old segment's uuid in its usual text form.
func (t *RemapTask) SegmentUUID() string {
	m, err := t.SegmentMeta()
	if err != nil {
		return ""
	}
	s := &index.Segment{Meta: m}
	return s.UUID()
}

func (t *RemapTask) fragments() []uint64 {
	var out []uint64
	for _, g := range t.Groups {
		out = append(out, g.Old...)
	}
	slices.Sort(out)
	return out
}

func (t *RemapTask) validate() error {
	if t.Table == "" {
		return fmt.Errorf("%w: no table", ErrInvalidTask)
	}
	if len(t.Groups) == 0 {
		return fmt.Errorf("%w: remap of %s names no rewrite group", ErrInvalidTask, t.Table)
	}
	for i, g := range t.Groups {
		if len(g.Old) == 0 || len(g.New) == 0 {
			return fmt.Errorf("%w: remap of %s: group %d is empty", ErrInvalidTask, t.Table, i)
		}
		for _, n := range g.New {
			if n.ID == 0 {
				return fmt.Errorf("%w: remap of %s: group %d has a new fragment without a reserved id", ErrInvalidTask, t.Table, i)
			}
		}
	}
	m, err := t.SegmentMeta()
	if err != nil {
		return err
	}
	if len(m.GetUuid().GetUuid()) != 16 {
		return fmt.Errorf("%w: remap of %s: segment without a uuid", ErrInvalidTask, t.Table)
	}
	return nil
}

// MappingGroups returns the groups in the form index.NewCompactionMapping
// takes, given each old fragment's physical rows and deletions.
func (t *RemapTask) MappingGroups(old func(id uint64) (index.OldFragment, error)) ([]index.RewriteGroup, error) {
	out := make([]index.RewriteGroup, 0, len(t.Groups))
	for _, g := range t.Groups {
		var rg index.RewriteGroup
		for _, id := range g.Old {
			f, err := old(id)
			if err != nil {
				return nil, err
			}
			rg.Old = append(rg.Old, f)
		}
		for _, n := range g.New {
			rg.New = append(rg.New, index.NewFragment{ID: n.ID, Rows: n.Rows})
		}
		out = append(out, rg)
	}
	return out, nil
}

// RemapOutput is an executed remap: the new segment, ready to replace the
// old one in the Rewrite transaction of its groups.
type RemapOutput struct {
	Remap *RemapTask `json:"-"`
	// Join is set when the remap ran in parts and this is the join's
	// output (Task is then the join).
	Join *JoinTask `json:"-"`
	// NewUUID is the new segment's uuid (16 bytes).
	NewUUID []byte `json:"new_uuid"`
	// Files are the new segment's files with their exact sizes.
	Files []index.SegmentFile `json:"files"`
	// Outputs are the store keys written.
	Outputs      []string `json:"written"`
	Rows         uint64   `json:"rows"`
	Dropped      uint64   `json:"dropped"`
	BytesRead    int64    `json:"bytes_read"`
	BytesWritten int64    `json:"bytes_written"`
}

// Task implements Job.
func (o *RemapOutput) Task() Task {
	if o.Join != nil {
		return Task{Join: o.Join}
	}
	return Task{Remap: o.Remap}
}

// Written implements Job.
func (o *RemapOutput) Written() []string { return o.Outputs }

// Op implements Job: a remap joins its groups' Rewrite transaction.
func (o *RemapOutput) Op() Op { return RewriteTxn }

// Bytes implements Job.
func (o *RemapOutput) Bytes() (read, written int64) { return o.BytesRead, o.BytesWritten }

// Classify implements Job: the rewrite's rules for its fragments, and a
// CreateIndex that removed or replaced the segment (optimize, createIndex
// replace, drop) makes the remap stale. An FM segment is rebuilt from the
// column of every fragment it covers (rewritten or not) as they were at the
// read version, so a commit that changed that column's data in any of them
// makes the rebuild stale too (fmRebuildConflict).
func (o *RemapOutput) Classify(theirs *tablepb.Transaction) (Verdict, string) {
	old := map[uint64]bool{}
	for _, id := range o.Remap.fragments() {
		old[id] = true
	}
	if v, why := ClassifyForRewrite(old, theirs); v != Compatible {
		return v, why
	}
	seg, err := o.Remap.SegmentMeta()
	if err != nil {
		return Incompatible, err.Error()
	}
	if index.Detect(seg) == index.KindFM {
		if v, why := fmRebuildConflict(seg, theirs); v != Compatible {
			return v, why
		}
	}
	if ci := theirs.GetCreateIndex(); ci != nil {
		for _, r := range ci.GetRemovedIndices() {
			if proto.Equal(r.GetUuid(), seg.GetUuid()) {
				return Retryable, fmt.Sprintf("CreateIndex removed index %q segment the remap rewrites", seg.GetName())
			}
		}
	}
	return Compatible, ""
}

// fmRebuildConflict checks a committed transaction against an FM segment
// rebuilt from the column (its fields) of every fragment it covers, as read
// at the remap's read version, with Lance's rules for a CreateIndex over
// those fragments (check_create_index_txn in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/io/commit/conflict_resolver.rs):
// an Update that rewrote the column in a covered fragment (fields_modified;
// an Update that moves rows leaves deletions the index filters at query
// time), a DataReplacement of the column's file in one, or a Rewrite that
// moved a covered fragment's rows (the rebuilt segment would hold their
// old addresses) is retryable: the rebuild would hold text or addresses
// the table no longer has.
func fmRebuildConflict(seg *tablepb.IndexMetadata, theirs *tablepb.Transaction) (Verdict, string) {
	covered, err := index.DecodeBitmap(seg.GetFragmentBitmap())
	if err != nil || covered == nil {
		return Retryable, fmt.Sprintf("FM index %q: segment without a readable fragment bitmap", seg.GetName())
	}
	field := map[int32]bool{}
	for _, f := range seg.GetFields() {
		field[f] = true
	}
	in := func(id uint64) bool { return id <= 0xffffffff && covered.Contains(uint32(id)) }
	name := format.OperationName(theirs)
	switch op := theirs.GetOperation().(type) {
	case *tablepb.Transaction_Update_:
		u := op.Update
		if !slices.ContainsFunc(u.GetFieldsModified(), func(f uint32) bool { return field[int32(f)] }) {
			return Compatible, ""
		}
		for _, f := range u.GetUpdatedFragments() {
			if in(f.GetId()) {
				return Retryable, fmt.Sprintf("%s rewrote the column of FM index %q in fragment %d, which the index's rebuild read", name, seg.GetName(), f.GetId())
			}
		}
	case *tablepb.Transaction_DataReplacement_:
		for _, r := range op.DataReplacement.GetReplacements() {
			if in(r.GetFragmentId()) && slices.ContainsFunc(r.GetNewFile().GetFields(), func(f int32) bool { return field[f] }) {
				return Retryable, fmt.Sprintf("%s replaced the column of FM index %q in fragment %d, which the index's rebuild read", name, seg.GetName(), r.GetFragmentId())
			}
		}
	case *tablepb.Transaction_Rewrite_:
		for _, id := range touchedFragments(theirs) {
			if in(id) {
				return Retryable, fmt.Sprintf("%s moved the rows of fragment %d, which the rebuild of FM index %q read", name, id, seg.GetName())
			}
		}
	}
	return Compatible, ""
}

// NewSegment is the new segment's metadata as Lance's Rewrite commit
// leaves it (handle_rewrite_indices in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/transaction.rs):
// the old metadata with the new uuid, the fragment bitmap recalculated
// through the committed groups, and the new files; name, fields,
// dataset_version, index_details and index_version unchanged.
func (o *RemapOutput) NewSegment(old *tablepb.IndexMetadata, groups []*tablepb.Transaction_Rewrite_RewriteGroup) (*tablepb.IndexMetadata, error) {
	bm, err := index.DecodeBitmap(old.GetFragmentBitmap())
	if err != nil {
		return nil, err
	}
	if bm == nil {
		return nil, fmt.Errorf("index %q: segment without a fragment bitmap cannot be remapped", old.GetName())
	}
	for _, g := range groups {
		var oldIDs, newIDs []uint64
		for _, f := range g.GetOldFragments() {
			oldIDs = append(oldIDs, f.GetId())
		}
		for _, f := range g.GetNewFragments() {
			newIDs = append(newIDs, f.GetId())
		}
		if _, err := index.Recalculate(bm, oldIDs, newIDs); err != nil {
			return nil, fmt.Errorf("index %q: %w", old.GetName(), err)
		}
	}
	b, err := index.EncodeBitmap(bm)
	if err != nil {
		return nil, err
	}
	n := proto.Clone(old).(*tablepb.IndexMetadata)
	n.Uuid = &tablepb.UUID{Uuid: slices.Clone(o.NewUUID)}
	n.FragmentBitmap = b
	n.Files = nil
	for _, f := range o.Files {
		n.Files = append(n.Files, &tablepb.IndexFile{Path: f.Name, SizeBytes: uint64(f.Size)})
	}
	return n, nil
}

// segmentKey is a segment's uuid as a map key.
func segmentKey(m *tablepb.IndexMetadata) string { return string(m.GetUuid().GetUuid()) }

// needsRemap reports whether a rewrite job must have its indices remapped:
// index_coverage "remap" (or "defer", for the kinds it does not defer) on a
// table without stable row ids.
func needsRemap(o *RewriteOutput, stable bool) bool {
	return !stable && o.Rewrite != nil && (o.Rewrite.IndexCoverage == "remap" || o.Rewrite.IndexCoverage == DeferIndexRemap)
}

// RemapsSegment reports whether a rewrite job remaps the segment when it
// covers the job's fragments: always under "remap"; under "defer" only a
// kind real Lance does not read through the fragment reuse index
// everywhere (index.Deferrable).
func RemapsSegment(o *RewriteOutput, m *tablepb.IndexMetadata) bool {
	if o.Rewrite != nil && o.Rewrite.IndexCoverage == DeferIndexRemap {
		return !index.Deferrable(index.Detect(m))
	}
	return true
}

// sameGroup reports whether a remap group is the rewrite group g (same old
// fragments in order, same reserved new fragments).
func sameGroup(rg RemapGroup, g *RewriteGroup) bool {
	if !g.Reserved || len(rg.Old) != len(g.Old) || len(rg.New) != len(g.New) {
		return false
	}
	for i, id := range rg.Old {
		if g.Old[i].GetId() != id {
			return false
		}
	}
	for i, n := range rg.New {
		if g.New[i].GetId() != n.ID || g.New[i].GetPhysicalRows() != n.Rows {
			return false
		}
	}
	return true
}

// joinRemaps pairs rewrite jobs with the remaps of their indices on the
// latest manifest, refusing until what is left fits together:
//   - a remap whose segment is no longer in latest (dropped, replaced by
//     createIndex or optimize), or one of whose groups is not a live
//     rewrite job;
//   - a rewrite job that needs its indices remapped but some segment of
//     latest covering one of its old fragments has no live remap of its
//     group.
//
// A rewrite that is refused takes every remap of its group with it, and a
// refused remap every rewrite it covers, so an index is never committed
// pointing at fragments that do not exist nor missing the rows of
// fragments it claims.
func joinRemaps(latest *format.Manifest, rws []*RewriteOutput, rms []*RemapOutput, stable bool) ([]*RewriteOutput, []*RemapOutput, []Refusal) {
	var refusals []Refusal
	segs := map[string]*tablepb.IndexMetadata{}
	for _, m := range latest.Indices.GetIndices() {
		segs[segmentKey(m)] = m
	}
	for {
		changed := false
		live := map[string]*RemapOutput{}
		keepRm := rms[:0:0]
		for _, r := range rms {
			seg, err := r.Remap.SegmentMeta()
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case segs[segmentKey(seg)] == nil:
				why = fmt.Sprintf("index %q segment %s is no longer in the table (dropped, replaced or optimized)", seg.GetName(), r.Remap.SegmentUUID())
			default:
				for _, rg := range r.Remap.Groups {
					if !slices.ContainsFunc(rws, func(o *RewriteOutput) bool { return sameGroup(rg, o.Group) }) {
						why = fmt.Sprintf("rewrite of fragments %v is not committed with it", rg.Old)
						break
					}
				}
			}
			if why != "" {
				refusals = append(refusals, Refusal{Job: r, Verdict: Retryable, Reason: "remap refused: " + why})
				changed = true
				continue
			}
			live[segmentKey(seg)] = r
			keepRm = append(keepRm, r)
		}
		rms = keepRm
		keepRw := rws[:0:0]
		for _, o := range rws {
			why := ""
			if needsRemap(o, stable) {
				for _, m := range latest.Indices.GetIndices() {
					if !RemapsSegment(o, m) || !CoversGroup(m, o.Group) {
						continue
					}
					r := live[segmentKey(m)]
					if r == nil || !slices.ContainsFunc(r.Remap.Groups, func(rg RemapGroup) bool { return sameGroup(rg, o.Group) }) {
						why = fmt.Sprintf("index %q covers its fragments but has no remap for them", m.GetName())
						break
					}
				}
			}
			if why != "" {
				refusals = append(refusals, Refusal{Job: o, Verdict: Retryable, Reason: "rewrite refused: " + why})
				changed = true
				continue
			}
			keepRw = append(keepRw, o)
		}
		rws = keepRw
		if !changed {
			return rws, rms, refusals
		}
	}
}

// applyRemaps replaces each remapped segment by its new segment and records
// it in the transaction's rewritten_indices, as Lance's commit_compaction
// does (old and new uuid, the unchanged index_details and index_version,
// and the new files with their sizes).
func applyRemaps(indices []*tablepb.IndexMetadata, rms []*RemapOutput, tg []*tablepb.Transaction_Rewrite_RewriteGroup, rewrite *tablepb.Transaction_Rewrite) ([]*tablepb.IndexMetadata, error) {
	byKey := map[string]*RemapOutput{}
	for _, r := range rms {
		seg, err := r.Remap.SegmentMeta()
		if err != nil {
			return nil, err
		}
		if byKey[segmentKey(seg)] != nil {
			return nil, fmt.Errorf("%w: index segment %s remapped twice in one commit", ErrInvalidTask, r.Remap.SegmentUUID())
		}
		byKey[segmentKey(seg)] = r
	}
	out := make([]*tablepb.IndexMetadata, len(indices))
	for i, m := range indices {
		r := byKey[segmentKey(m)]
		if r == nil {
			out[i] = m
			continue
		}
		n, err := r.NewSegment(m, tg)
		if err != nil {
			return nil, err
		}
		out[i] = n
		ri := &tablepb.Transaction_Rewrite_RewrittenIndex{
			OldId:           proto.Clone(m.GetUuid()).(*tablepb.UUID),
			NewId:           proto.Clone(n.GetUuid()).(*tablepb.UUID),
			NewIndexDetails: m.GetIndexDetails(),
			NewIndexVersion: uint32(m.GetIndexVersion()),
		}
		for _, f := range n.GetFiles() {
			ri.NewIndexFiles = append(ri.NewIndexFiles, proto.Clone(f).(*tablepb.IndexFile))
		}
		rewrite.RewrittenIndices = append(rewrite.RewrittenIndices, ri)
	}
	return out, nil
}

// verifyRemapped checks that the committed index section holds every new
// segment exactly as built and none of the old ones.
func verifyRemapped(want, got []*tablepb.IndexMetadata, rewritten []*tablepb.Transaction_Rewrite_RewrittenIndex) error {
	have := map[string]*tablepb.IndexMetadata{}
	for _, m := range got {
		have[segmentKey(m)] = m
	}
	wantBy := map[string]*tablepb.IndexMetadata{}
	for _, m := range want {
		wantBy[segmentKey(m)] = m
	}
	for _, ri := range rewritten {
		if have[string(ri.GetOldId().GetUuid())] != nil {
			return fmt.Errorf("remapped index segment %x is still in the committed version", ri.GetOldId().GetUuid())
		}
		k := string(ri.GetNewId().GetUuid())
		if have[k] == nil || !proto.Equal(have[k], wantBy[k]) {
			return fmt.Errorf("remapped index segment %x is not committed as built", ri.GetNewId().GetUuid())
		}
	}
	return nil
}

// verifyRemapCoverage checks a committed remapping Rewrite against the
// fragments it committed: each remapped segment (looked up in beforeIdx,
// the index section the commit was built on) was remapped for every
// rewrite group of the transaction that it covers, each of its groups was
// committed as the remap mapped it (the reserved new fragments are there,
// with the rows the remap wrote addresses for and no deletions), and its
// new entry claims exactly its old fragments with the groups' old ids
// replaced by their new ids, nothing its files do not index.
func verifyRemapCoverage(beforeIdx []*tablepb.IndexMetadata, after *format.Manifest, tg []*tablepb.Transaction_Rewrite_RewriteGroup, rms []*RemapOutput) error {
	old := map[string]*tablepb.IndexMetadata{}
	for _, m := range beforeIdx {
		old[segmentKey(m)] = m
	}
	got := map[string]*tablepb.IndexMetadata{}
	for _, m := range after.Indices.GetIndices() {
		got[segmentKey(m)] = m
	}
	frags := format.FragmentsByID(after.PB)
	oldIDs := func(g *tablepb.Transaction_Rewrite_RewriteGroup) []uint64 {
		out := make([]uint64, 0, len(g.GetOldFragments()))
		for _, f := range g.GetOldFragments() {
			out = append(out, f.GetId())
		}
		return out
	}
	for _, r := range rms {
		seg, err := r.Remap.SegmentMeta()
		if err != nil {
			return err
		}
		o, n := old[segmentKey(seg)], got[string(r.NewUUID)]
		if o == nil || n == nil {
			return fmt.Errorf("index %q: remapped segment %s or its replacement is missing", seg.GetName(), r.Remap.SegmentUUID())
		}
		if n.GetName() != o.GetName() || !slices.Equal(n.GetFields(), o.GetFields()) {
			return fmt.Errorf("index %q: remapped segment changed its name or fields", o.GetName())
		}
		ob, err := index.DecodeBitmap(o.GetFragmentBitmap())
		if err != nil || ob == nil {
			return fmt.Errorf("index %q: old fragment bitmap unreadable or missing: %v", o.GetName(), err)
		}
		nb, err := index.DecodeBitmap(n.GetFragmentBitmap())
		if err != nil || nb == nil {
			return fmt.Errorf("index %q: new fragment bitmap unreadable or missing: %v", o.GetName(), err)
		}
		want := ob.Clone()
		done := map[int]bool{}
		for _, rg := range r.Remap.Groups {
			gi := slices.IndexFunc(tg, func(g *tablepb.Transaction_Rewrite_RewriteGroup) bool { return slices.Equal(oldIDs(g), rg.Old) })
			if gi < 0 || len(tg[gi].GetNewFragments()) != len(rg.New) {
				return fmt.Errorf("index %q: remapped for fragments %v, which the commit did not rewrite as mapped", o.GetName(), rg.Old)
			}
			done[gi] = true
			for _, id := range rg.Old {
				want.Remove(uint32(id))
			}
			for i, nr := range rg.New {
				f := frags[nr.ID]
				if tg[gi].GetNewFragments()[i].GetId() != nr.ID || f == nil || f.GetPhysicalRows() != nr.Rows || f.GetDeletionFile() != nil {
					return fmt.Errorf("index %q: new fragment %d is not committed with the %d rows the remap wrote addresses for", o.GetName(), nr.ID, nr.Rows)
				}
				want.Add(uint32(nr.ID))
			}
		}
		for gi, g := range tg {
			if done[gi] {
				continue
			}
			for _, id := range oldIDs(g) {
				if ob.Contains(uint32(id)) {
					return fmt.Errorf("index %q segment %s covers rewritten fragment %d but was not remapped for its group", o.GetName(), r.Remap.SegmentUUID(), id)
				}
			}
		}
		if !nb.Equals(want) {
			return fmt.Errorf("index %q: remapped segment claims fragments %v, its files index %v", o.GetName(), nb.ToArray(), want.ToArray())
		}
	}
	return nil
}

// CoversGroup reports whether a (non-system) index segment's fragment
// bitmap holds one of the group's old fragments: the segment must be
// remapped for the group in address mode.
func CoversGroup(m *tablepb.IndexMetadata, g *RewriteGroup) bool {
	if index.Detect(m).IsSystem() {
		return false
	}
	bm, err := index.DecodeBitmap(m.GetFragmentBitmap())
	if err != nil || bm == nil {
		return false
	}
	return slices.ContainsFunc(g.Old, func(f *tablepb.DataFragment) bool { return bm.Contains(uint32(f.GetId())) })
}

// SegmentBytes is the size of a segment's files as its metadata records
// them (0 when it records none).
func SegmentBytes(m *tablepb.IndexMetadata) uint64 {
	var n uint64
	for _, f := range m.GetFiles() {
		n += f.GetSizeBytes()
	}
	return n
}

// RemapParts is how many part tasks the remap of a segment of segBytes
// bytes is split into under index.remap_part_bytes partBytes (0: never
// split): about segBytes / partBytes, at least 1. The remapper may make
// fewer (no more than the segment's units of work).
func RemapParts(segBytes, partBytes uint64) int {
	if partBytes == 0 || segBytes <= partBytes {
		return 1
	}
	return int(min((segBytes+partBytes-1)/partBytes, 1<<16))
}
