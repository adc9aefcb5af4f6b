package job

import (
	"fmt"
	"net/url"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// KindCatchUp adds unindexed rows to an index.
const KindCatchUp Kind = "catchup"

// CatchUpTask adds the live rows of fragments no segment of an index
// covers to that index, encoded with the index's trained model, as a new
// segment laid out as lance's optimize_indices lays it out with its
// default options (a delta, or one segment that merges every segment).
type CatchUpTask struct {
	// Table is the table URI.
	Table string `json:"table"`
	// ReadVersion is the version the task was planned against.
	ReadVersion uint64 `json:"read_version"`
	// Index is the index name.
	Index string `json:"index"`
	// Fragments are the unindexed fragments whose rows the segment adds,
	// ascending.
	Fragments []uint64 `json:"fragments"`
	// Rows is the number of live rows the task reads (informational).
	Rows uint64 `json:"rows,omitempty"`
	// Merge asks for one segment that merges every segment of the index
	// and the new rows (the policy's max_segments would be passed by a
	// delta); Fragments may then be empty.
	Merge bool `json:"merge,omitempty"`
	// Slices, when set (two or more), split a large backlog into delta
	// tasks (SliceTask), each over the fragments at positions [Lo, Hi) of
	// Fragments, each writing a delta segment no manifest references; the
	// join (JoinTask) merges them into the one segment the catch-up
	// commits, as if one task had read every fragment.
	Slices []RowRange `json:"slices,omitempty"`
	// FMMaxBytes is the policy's index.fm_max_bytes for an FM index: the
	// most text one partition of the rebuilt segment may hold (0: the
	// engine's default).
	FMMaxBytes uint64 `json:"fm_max_bytes,omitempty"`
}

// CatchUpSplits reports whether a catch-up of an index of kind k may run
// in parts (Slices): btree, FTS and the IVF and HNSW kinds.
func CatchUpSplits(k index.Kind) bool {
	return k == index.KindBTree || k == index.KindFTS || k.IsVector()
}

// Part is the catch-up of delta i of a catch-up planned in slices: the
// fragments of its range, neither merging nor sliced.
func (t *CatchUpTask) Part(i int) *CatchUpTask {
	p := *t
	r := t.Slices[i]
	p.Fragments, p.Slices, p.Merge, p.Rows = t.Fragments[r.Lo:r.Hi], nil, false, 0
	return &p
}

// catchUpKeyKind is the kind part of a catch-up task's key: two indices
// caught up over the same fragments are two tasks.
func (t *CatchUpTask) keyKind() Kind {
	return Kind(string(KindCatchUp) + "." + url.QueryEscape(t.Index))
}

// CatchUpOutput is an executed catch-up: the new segment's index entry and
// the fragments it read.
type CatchUpOutput struct {
	CatchUp *CatchUpTask
	// Join is set when the catch-up ran as delta tasks and this is the
	// join's output (Task is then the join).
	Join *JoinTask
	// Segment is the new segment's entry (uuid, name, fields, fragment
	// bitmap, details, version, files).
	Segment *tablepb.IndexMetadata
	// Removed are the segments it replaces (merged into it); none for a
	// delta segment.
	Removed []*tablepb.IndexMetadata
	// Merged says why the segments were merged ("" for a delta).
	Merged string
	// Base are the fragments read, as they were at the read version.
	Base []*tablepb.DataFragment
	// Outputs are the files written (_indices/<uuid>/...).
	Outputs []string
	// Rows are the rows the segment holds; Dropped the live rows lance's
	// transforms leave out (null or not-finite vectors).
	Rows, Dropped uint64
	BytesRead     int64
	BytesWritten  int64
	// Drift is what a vector catch-up measured of the rows it added (nil
	// for other kinds, or when the model segment stores no rows).
	Drift *DriftSample
}

// rebuilt: the segment was built from the column over the Base fragments
// and covers exactly those. An FM index is caught up that way only (as
// Lance's optimize rebuilds one); every other kind takes a delta or a
// merge.
func (o *CatchUpOutput) rebuilt() bool { return index.Detect(o.Segment) == index.KindFM }

// DriftSample is a vector catch-up's measure of distribution drift: of
// the Rows it added, Far were farther from their nearest centroid than
// Bound, the quantile of the model segment's stored rows' distances
// (vector.DriftBound); Model fingerprints the trained model they were
// measured against.
//
// Reference is how many indexed rows Bound was measured on (by this task
// or by an earlier catch-up against the same model, whose bound the table's
// drift record kept).
type DriftSample struct {
	Model     string  `json:"model"`
	Rows      uint64  `json:"rows"`
	Far       uint64  `json:"far"`
	Bound     float64 `json:"bound"`
	Reference uint64  `json:"reference_rows,omitempty"`
}

// Task implements Job.
func (o *CatchUpOutput) Task() Task {
	if o.Join != nil {
		return Task{Join: o.Join}
	}
	return Task{CatchUp: o.CatchUp}
}

// Written implements Job.
func (o *CatchUpOutput) Written() []string { return o.Outputs }

// Op implements Job: catch-ups commit as one CreateIndex.
func (o *CatchUpOutput) Op() Op { return CatchUpTxn }

// Bytes implements Job.
func (o *CatchUpOutput) Bytes() (read, written int64) { return o.BytesRead, o.BytesWritten }

// Classify implements Job with Lance's rules for a CreateIndex
// (check_create_index_txn in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/io/commit/conflict_resolver.rs),
// stricter where a segment encoded with an index's model must not outlive
// that model: another CreateIndex that adds or removes a segment of the
// same index name (Lance's optimize(), createIndex(replace), dropIndex)
// makes it retryable, where Lance lets two CreateIndex commit; a Rewrite
// that replaced a fragment the segment reads is retryable, as in Lance; a
// Merge is retryable (Lance accepts it); changes to a fragment's data files
// (Update, DataReplacement) are judged at Build against the latest
// manifest (CatchUpRebase); Overwrite and Restore replace the table.
func (o *CatchUpOutput) Classify(theirs *tablepb.Transaction) (Verdict, string) {
	name := format.OperationName(theirs)
	frags := map[uint64]bool{}
	for _, id := range o.CatchUp.Fragments {
		frags[id] = true
	}
	switch classOf(theirs) {
	case opKeepsFragments, opMemWalState:
		return Compatible, name + ": the fragments are checked at rebase"
	case opTouchesFragments:
		if _, rewrite := theirs.GetOperation().(*tablepb.Transaction_Rewrite_); !rewrite {
			return Compatible, name + ": the fragments are checked at rebase"
		}
		if id, ok := intersects(touchedFragments(theirs), frags); ok {
			return Retryable, fmt.Sprintf("Rewrite replaced fragment %d that the catch-up indexes", id)
		}
		return Compatible, "Rewrite touched other fragments"
	case opMerge:
		return Retryable, "Merge replaced the fragment list and schema"
	case opCreateIndex:
		ci := theirs.GetCreateIndex()
		for _, ix := range ci.GetNewIndices() {
			if ix.GetName() == o.CatchUp.Index {
				return Retryable, fmt.Sprintf("CreateIndex changed index %q (Lance's optimize or createIndex)", ix.GetName())
			}
		}
		for _, ix := range ci.GetRemovedIndices() {
			if ix.GetName() == o.CatchUp.Index {
				return Retryable, fmt.Sprintf("CreateIndex removed a segment of index %q", ix.GetName())
			}
		}
		return Compatible, "CreateIndex of another index"
	case opReplacesTable:
		return Incompatible, name + " replaced the table"
	}
	return Incompatible, "unknown operation " + name
}

// CatchUpRebase decides whether a catch-up segment still fits latest: the
// index is there, every segment it merged is there unchanged, no other
// segment of the index covers a fragment the catch-up read, and
// every such fragment is there with the data files and physical rows the
// catch-up read (its deletions may have grown: deleted rows in an index
// are filtered at query time, as in any index Lance builds before a
// delete).
func CatchUpRebase(o *CatchUpOutput, latest *format.Manifest) (Verdict, string) {
	var segs []*tablepb.IndexMetadata
	found, any := 0, false
	for _, ix := range latest.Indices.GetIndices() {
		if ix.GetName() != o.CatchUp.Index {
			continue
		}
		any = true
		if slices.ContainsFunc(o.Removed, func(r *tablepb.IndexMetadata) bool { return proto.Equal(r, ix) }) {
			found++
			continue
		}
		segs = append(segs, ix)
	}
	if !any {
		return Retryable, fmt.Sprintf("index %q is gone", o.CatchUp.Index)
	}
	if found != len(o.Removed) {
		return Retryable, fmt.Sprintf("a segment of index %q the catch-up merged is gone or changed", o.CatchUp.Index)
	}
	for _, ix := range segs {
		if !slices.Equal(ix.GetFields(), o.Segment.GetFields()) {
			return Retryable, fmt.Sprintf("index %q now indexes fields %v, the catch-up %v", o.CatchUp.Index, ix.GetFields(), o.Segment.GetFields())
		}
		bm, err := decodeBitmap(ix.GetFragmentBitmap())
		if err != nil {
			return Retryable, fmt.Sprintf("index %q has an unreadable fragment bitmap: %v", o.CatchUp.Index, err)
		}
		if len(ix.GetFragmentBitmap()) == 0 {
			return Retryable, fmt.Sprintf("index %q has a segment without a fragment bitmap", o.CatchUp.Index)
		}
		for _, id := range o.CatchUp.Fragments {
			if bm.Contains(uint32(id)) {
				return Retryable, fmt.Sprintf("fragment %d is already indexed by a segment of %q", id, o.CatchUp.Index)
			}
		}
	}
	cur := format.FragmentsByID(latest.PB)
	for _, base := range o.Base {
		if v, why := RepackRebase(base, cur[base.GetId()]); v != Compatible {
			return v, why
		}
	}
	return Compatible, ""
}

// CatchUpTxn commits catch-up jobs as one CreateIndex transaction that adds
// each job's segment and removes the segments it merged, as lance's
// optimize_indices commits (new_indices, removed_indices).
var CatchUpTxn Op = catchUpTxn{}

type catchUpTxn struct{}

func (catchUpTxn) Name() string { return "create_index" }

// A CreateIndex records the version its segments were built on.
func (catchUpTxn) TxnReadVersion(planned, _ uint64) uint64 { return planned }

func (catchUpTxn) Build(latest *format.Manifest, jobs []Job, txn *tablepb.Transaction) (*Built, error) {
	b := &Built{}
	var segs, removed []*tablepb.IndexMetadata
	var outs []*CatchUpOutput
	seen := map[string]bool{}
	for _, j := range jobs {
		o, ok := j.(*CatchUpOutput)
		if !ok {
			return nil, fmt.Errorf("%w: %T in a create_index transaction", ErrInvalidTask, j)
		}
		if v, why := CatchUpRebase(o, latest); v != Compatible {
			b.Refused = append(b.Refused, Refusal{Job: j, Verdict: v, Reason: why})
			continue
		}
		if seen[o.CatchUp.Index] {
			// Two catch-ups of one index merge the same segment: one
			// commits, the other is planned again.
			b.Refused = append(b.Refused, Refusal{Job: j, Verdict: Retryable, Reason: "another catch-up of the index commits first"})
			continue
		}
		seen[o.CatchUp.Index] = true
		outs = append(outs, o)
		segs = append(segs, proto.Clone(o.Segment).(*tablepb.IndexMetadata))
		for _, r := range o.Removed {
			removed = append(removed, proto.Clone(r).(*tablepb.IndexMetadata))
		}
	}
	if len(segs) == 0 {
		return b, nil
	}
	txn.Operation = &tablepb.Transaction_CreateIndex_{CreateIndex: &tablepb.Transaction_CreateIndex{NewIndices: segs, RemovedIndices: removed}}
	var idx []*tablepb.IndexMetadata
	for _, ix := range latest.Indices.GetIndices() {
		if !slices.ContainsFunc(removed, func(r *tablepb.IndexMetadata) bool { return proto.Equal(r, ix) }) {
			idx = append(idx, ix)
		}
	}
	idx = append(idx, segs...)
	b.Manifest = proto.Clone(latest.PB).(*tablepb.Manifest)
	b.Indices = &tablepb.IndexSection{Indices: idx}
	if latest.Indices != nil {
		b.Indices = proto.Clone(latest.Indices).(*tablepb.IndexSection)
		b.Indices.Indices = idx
	}
	before := latest
	b.Verify = func(after *format.Manifest) error {
		if err := VerifyCatchUp(before, after, segs, removed); err != nil {
			return err
		}
		return verifyCatchUpCoverage(after, outs)
	}
	return b, nil
}

// VerifyCatchUp checks a committed catch-up: the fragments are those of
// the version it was built on, every index entry of that version but the
// removed (merged) segments is still there, and each new segment is there
// once with the fragments it was built for, none of which another segment
// of its index covers.
func VerifyCatchUp(before, after *format.Manifest, segs, removed []*tablepb.IndexMetadata) error {
	bf, af := before.PB.GetFragments(), after.PB.GetFragments()
	if len(bf) != len(af) {
		return fmt.Errorf("%w: catch-up changed the fragment count %d -> %d", ErrInvariant, len(bf), len(af))
	}
	for i := range bf {
		if bf[i].GetId() != af[i].GetId() || bf[i].GetPhysicalRows() != af[i].GetPhysicalRows() {
			return fmt.Errorf("%w: catch-up changed fragment %d", ErrInvariant, bf[i].GetId())
		}
	}
	key := func(ix *tablepb.IndexMetadata) string { return string(ix.GetUuid().GetUuid()) }
	got := map[string]*tablepb.IndexMetadata{}
	for _, ix := range after.Indices.GetIndices() {
		if got[key(ix)] != nil {
			return fmt.Errorf("%w: index segment %q listed twice", ErrInvariant, ix.GetName())
		}
		got[key(ix)] = ix
	}
	gone := map[string]bool{}
	for _, r := range removed {
		gone[key(r)] = true
		if got[key(r)] != nil {
			return fmt.Errorf("%w: merged segment of index %q still listed", ErrInvariant, r.GetName())
		}
	}
	for _, ix := range before.Indices.GetIndices() {
		if !gone[key(ix)] && !proto.Equal(got[key(ix)], ix) {
			return fmt.Errorf("%w: catch-up changed or dropped a segment of index %q", ErrInvariant, ix.GetName())
		}
	}
	if want := len(before.Indices.GetIndices()) - len(removed) + len(segs); len(got) != want {
		return fmt.Errorf("%w: %d index segments after the catch-up, want %d", ErrInvariant, len(got), want)
	}
	for _, s := range segs {
		if !proto.Equal(got[key(s)], s) {
			return fmt.Errorf("%w: new segment of index %q missing or changed", ErrInvariant, s.GetName())
		}
		mine, err := decodeBitmap(s.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("%w: new segment bitmap: %v", ErrInvariant, err)
		}
		for _, ix := range before.Indices.GetIndices() {
			if ix.GetName() != s.GetName() || gone[key(ix)] {
				continue
			}
			other, err := decodeBitmap(ix.GetFragmentBitmap())
			if err != nil {
				return fmt.Errorf("%w: segment bitmap of %q: %v", ErrInvariant, ix.GetName(), err)
			}
			if mine.Intersects(other) {
				return fmt.Errorf("%w: new segment of %q covers fragments %v another segment covers", ErrInvariant, s.GetName(), roaring.And(mine, other).ToArray())
			}
		}
	}
	return nil
}

// verifyCatchUpCoverage checks each committed catch-up segment against
// the fragments of the committed version: it claims exactly the fragments
// it read plus those of the segments it merged, and every fragment it read
// is there with the data files and physical rows it read (its deletions
// may have grown), so it holds the rows of every fragment it claims.
func verifyCatchUpCoverage(after *format.Manifest, outs []*CatchUpOutput) error {
	got := map[string]*tablepb.IndexMetadata{}
	for _, ix := range after.Indices.GetIndices() {
		got[segmentKey(ix)] = ix
	}
	cur := format.FragmentsByID(after.PB)
	for _, o := range outs {
		name := o.CatchUp.Index
		s := got[segmentKey(o.Segment)]
		if s == nil {
			return fmt.Errorf("%w: new segment of index %q is not committed", ErrInvariant, name)
		}
		want := roaring.New()
		for _, r := range o.Removed {
			if o.rebuilt() {
				break
			}
			rb, err := decodeBitmap(r.GetFragmentBitmap())
			if err != nil {
				return fmt.Errorf("%w: merged segment of %q: %v", ErrInvariant, name, err)
			}
			want.Or(rb)
		}
		read := map[uint64]bool{}
		for _, f := range o.Base {
			read[f.GetId()] = true
			if o.rebuilt() {
				want.Add(uint32(f.GetId()))
			}
			if v, why := RepackRebase(f, cur[f.GetId()]); v != Compatible {
				return fmt.Errorf("%w: catch-up of %q: %s", ErrInvariant, name, why)
			}
		}
		for _, id := range o.CatchUp.Fragments {
			if !read[id] {
				return fmt.Errorf("%w: catch-up of %q claims fragment %d it did not read", ErrInvariant, name, id)
			}
			want.Add(uint32(id))
		}
		bm, err := decodeBitmap(s.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("%w: new segment of %q: %v", ErrInvariant, name, err)
		}
		if !bm.Equals(want) {
			return fmt.Errorf("%w: new segment of %q claims fragments %v, it holds the rows of %v", ErrInvariant, name, bm.ToArray(), want.ToArray())
		}
	}
	return nil
}

// validateCatchUp checks a catch-up task's shape.
func validateCatchUp(c *CatchUpTask) error {
	if c.Index == "" {
		return fmt.Errorf("%w: catch-up of %s names no index", ErrInvalidTask, c.Table)
	}
	if len(c.Fragments) == 0 && !c.Merge {
		return fmt.Errorf("%w: catch-up of %s index %q names no fragments and merges no segments", ErrInvalidTask, c.Table, c.Index)
	}
	if !slices.IsSorted(c.Fragments) || len(slices.Compact(slices.Clone(c.Fragments))) != len(c.Fragments) {
		return fmt.Errorf("%w: catch-up of %s index %q: fragments not ascending and distinct", ErrInvalidTask, c.Table, c.Index)
	}
	for _, id := range c.Fragments {
		if id > 0xffffffff {
			return fmt.Errorf("%w: catch-up of %s: fragment id %d does not fit a fragment bitmap", ErrInvalidTask, c.Table, id)
		}
	}
	return nil
}
