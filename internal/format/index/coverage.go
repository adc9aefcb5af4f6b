package index

import (
	"bytes"
	"fmt"
	"io"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// DecodeBitmap decodes a fragment bitmap (a 32-bit portable Roaring bitmap).
// An empty input decodes to nil: the index has no recorded bitmap.
func DecodeBitmap(b []byte) (*roaring.Bitmap, error) {
	if len(b) == 0 {
		return nil, nil
	}
	bm, err := format.DecodeRoaring(b)
	if err != nil {
		return nil, fmt.Errorf("fragment bitmap: %w", err)
	}
	return bm, nil
}

// EncodeBitmap encodes a fragment bitmap the way Lance stores it.
func EncodeBitmap(bm *roaring.Bitmap) ([]byte, error) { return encodeRoaring(bm.Clone()) }

// encodeRoaring run-optimizes a bitmap (a copy: it is changed) and writes
// it in the portable format (32- or 64-bit).
func encodeRoaring(c interface {
	RunOptimize()
	WriteTo(io.Writer) (int64, error)
}) ([]byte, error) {
	c.RunOptimize()
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Fragments returns the ids of a manifest's fragments as a bitmap (ids
// compared as u32, as Lance does).
func Fragments(frags []*tablepb.DataFragment) *roaring.Bitmap {
	bm := roaring.New()
	for _, f := range frags {
		bm.Add(uint32(f.GetId()))
	}
	return bm
}

// Segment is one index segment (one IndexMetadata entry) with its decoded
// kind and bitmap.
type Segment struct {
	Meta *tablepb.IndexMetadata
	Kind Kind
	// Bitmap is the recorded fragment bitmap; nil when none is recorded.
	Bitmap *roaring.Bitmap
}

// Effective is Lance's effective_fragment_bitmap: the recorded bitmap
// intersected with the existing fragments; nil when no bitmap is recorded.
func (s *Segment) Effective(existing *roaring.Bitmap) *roaring.Bitmap {
	if s.Bitmap == nil {
		return nil
	}
	return roaring.And(s.Bitmap, existing)
}

// Index is every segment of one index name.
type Index struct {
	Name     string
	Kind     Kind
	Fields   []int32
	Segments []*Segment
}

// Covered returns the union of the segments' effective bitmaps.
func (ix *Index) Covered(existing *roaring.Bitmap) *roaring.Bitmap {
	out := roaring.New()
	for _, s := range ix.Segments {
		if e := s.Effective(existing); e != nil {
			out.Or(e)
		}
	}
	return out
}

// Group decodes an index section into indices by name, in the order names
// first appear. A bitmap that does not decode is an error: nothing about
// such an index can be decided safely.
func Group(indices []*tablepb.IndexMetadata) ([]*Index, error) {
	var out []*Index
	byName := map[string]*Index{}
	for _, m := range indices {
		bm, err := DecodeBitmap(m.GetFragmentBitmap())
		if err != nil {
			return nil, fmt.Errorf("index %q: %w", m.GetName(), err)
		}
		s := &Segment{Meta: m, Kind: Detect(m), Bitmap: bm}
		ix := byName[m.GetName()]
		if ix == nil {
			ix = &Index{Name: m.GetName(), Kind: s.Kind, Fields: m.GetFields()}
			byName[m.GetName()] = ix
			out = append(out, ix)
		}
		ix.Segments = append(ix.Segments, s)
	}
	return out, nil
}

// Dropped is a segment Lance's retention rule removes.
type Dropped struct {
	Name   string
	UUID   string
	Kind   Kind
	Reason string
	// Lost is true when the index name loses every segment: a vector
	// index whose trained model (centroids, codebooks) is gone and must be
	// rebuilt from scratch.
	Lost bool
}

// Retention applies Lance 8.0.0's retain_relevant_indices (run by every
// Delete, Update, Merge and Project commit) to an index section over the
// given existing fragments, ignoring the schema rule, and returns the
// segments it would drop: per name, segments whose effective bitmap is empty
// (or missing) are dropped when another segment is not empty; when all are
// empty the oldest is kept for a scalar index and none for a vector index;
// system indices are always kept.
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/transaction.rs
func Retention(indices []*Index, existing *roaring.Bitmap) []Dropped {
	var out []Dropped
	for _, ix := range indices {
		if ix.Name == FragReuseName {
			continue
		}
		var empty, nonEmpty []*Segment
		for _, s := range ix.Segments {
			if e := s.Effective(existing); e == nil || e.IsEmpty() {
				empty = append(empty, s)
			} else {
				nonEmpty = append(nonEmpty, s)
			}
		}
		if len(empty) == 0 {
			continue
		}
		if len(nonEmpty) > 0 {
			for _, s := range empty {
				out = append(out, Dropped{Name: ix.Name, UUID: uuidString(s.Meta), Kind: s.Kind,
					Reason: "segment covers no existing fragment; other segments of the index remain"})
			}
			continue
		}
		sorted := append([]*Segment(nil), empty...)
		sort.SliceStable(sorted, func(i, j int) bool {
			return sorted[i].Meta.GetDatasetVersion() < sorted[j].Meta.GetDatasetVersion()
		})
		keepOldest := !isVectorURL(sorted[0].Meta)
		for i, s := range sorted {
			if i == 0 && keepOldest {
				continue
			}
			d := Dropped{Name: ix.Name, UUID: uuidString(s.Meta), Kind: s.Kind}
			if keepOldest {
				d.Reason = "empty scalar segment; the oldest empty segment of the index is kept"
			} else {
				d.Reason = "vector index covers no existing fragment"
				d.Lost = true
			}
			out = append(out, d)
		}
	}
	return out
}

// isVectorURL is Lance's is_vector_index: the details type URL ends with
// VectorIndexDetails.
func isVectorURL(m *tablepb.IndexMetadata) bool {
	return bytes.HasSuffix([]byte(m.GetIndexDetails().GetTypeUrl()), []byte(urlVector))
}

// uuidString formats an index uuid (16 bytes) in the canonical form.
func uuidString(m *tablepb.IndexMetadata) string {
	b := m.GetUuid().GetUuid()
	if len(b) != 16 {
		return fmt.Sprintf("%x", b)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// UUID returns the segment's uuid in canonical form (its directory name
// under _indices/).
func (s *Segment) UUID() string { return uuidString(s.Meta) }

// Recalculate is Lance's recalculate_fragment_bitmap for one rewrite
// group: when every old fragment of the group is in the bitmap they are
// replaced by the new fragments; when none is, the bitmap is unchanged; a
// partial overlap is an error (Lance refuses it as invalid input). Only
// valid for an index whose files were remapped for the group, or any index
// of a table with stable row ids.
func Recalculate(bm *roaring.Bitmap, oldIDs, newIDs []uint64) (changed bool, err error) {
	in := 0
	for _, id := range oldIDs {
		if bm.Contains(uint32(id)) {
			in++
		}
	}
	switch {
	case in == 0:
		return false, nil
	case in != len(oldIDs):
		return false, fmt.Errorf("rewrite group %v is only partly covered (%d of %d fragments)", oldIDs, in, len(oldIDs))
	}
	for _, id := range oldIDs {
		bm.Remove(uint32(id))
	}
	for _, id := range newIDs {
		bm.Add(uint32(id))
	}
	return true, nil
}

// Coverage is one index's coverage of a table version, as lanced stats
// reports it.
type Coverage struct {
	Name     string  `json:"name"`
	Kind     Kind    `json:"kind"`
	Fields   []int32 `json:"fields"`
	Segments int     `json:"segments"`
	// IndexedRows and UnindexedRows count live rows (physical minus
	// deleted) of the existing fragments the index covers and does not.
	IndexedRows   uint64 `json:"indexed_rows"`
	UnindexedRows uint64 `json:"unindexed_rows"`
	// Fragments are the existing fragments covered; Unindexed the others.
	Fragments []uint64 `json:"fragments"`
	Unindexed []uint64 `json:"unindexed_fragments,omitempty"`
	// Stale counts fragment ids in the bitmaps that no longer exist (left
	// by rewrites that did not remap the index).
	Stale uint64 `json:"stale_fragment_ids"`
	// Lost is set when real Lance's next Delete/Update/Merge/Project
	// commit would drop the index (a vector index covering nothing).
	Lost bool `json:"would_be_dropped,omitempty"`
	// ReuseVersions counts the fragment reuse versions (deferred
	// compactions) some segment of the index is not caught up on: real
	// Lance translates its row addresses through them when it loads it.
	ReuseVersions int `json:"reuse_versions,omitempty"`
	// ReuseError says why the fragment reuse index could not be read; the
	// bitmaps are then reported as recorded.
	ReuseError string `json:"reuse_error,omitempty"`
}

// CoverageOf reports every index's coverage of the given fragments, with
// fragment bitmaps read through the table's fragment reuse index as Lance
// reads them.
func CoverageOf(frags []*tablepb.DataFragment, indices []*tablepb.IndexMetadata) ([]Coverage, error) {
	through, reuse, err := ThroughReuse(indices)
	reuseErr := ""
	if err != nil {
		through, reuseErr = indices, err.Error()
	}
	pending := map[string]int{}
	if reuse != nil {
		for i := range reuse.Versions {
			v := &reuse.Versions[i]
			names := map[string]bool{}
			for _, m := range indices {
				if ok, err := CaughtUp(v, m); err != nil || !ok {
					names[m.GetName()] = true
				}
			}
			for n := range names {
				pending[n]++
			}
		}
	}
	ixs, err := Group(through)
	if err != nil {
		return nil, err
	}
	existing := Fragments(frags)
	lost := map[string]bool{}
	for _, d := range Retention(ixs, existing) {
		if d.Lost {
			lost[d.Name] = true
		}
	}
	var out []Coverage
	for _, ix := range ixs {
		if ix.Kind.IsSystem() {
			continue
		}
		cov := ix.Covered(existing)
		all := roaring.New()
		for _, s := range ix.Segments {
			if s.Bitmap != nil {
				all.Or(s.Bitmap)
			}
		}
		c := Coverage{Name: ix.Name, Kind: ix.Kind, Fields: ix.Fields, Segments: len(ix.Segments),
			Stale: roaring.AndNot(all, existing).GetCardinality(), Lost: lost[ix.Name], ReuseVersions: pending[ix.Name], ReuseError: reuseErr}
		for _, f := range frags {
			live := f.GetPhysicalRows() - min(f.GetPhysicalRows(), f.GetDeletionFile().GetNumDeletedRows())
			if cov.Contains(uint32(f.GetId())) {
				c.IndexedRows += live
				c.Fragments = append(c.Fragments, f.GetId())
			} else {
				c.UnindexedRows += live
				c.Unindexed = append(c.Unindexed, f.GetId())
			}
		}
		out = append(out, c)
	}
	return out, nil
}
