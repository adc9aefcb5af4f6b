package index

import (
	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Backlog is what an index does not cover: the existing fragments outside
// its fragment bitmaps (Lance's unindexed_fragments) and their live rows
// (Lance's index statistics num_unindexed_rows counts the same rows).
type Backlog struct {
	// Fragments are the ids of the unindexed fragments, ascending.
	Fragments []uint64 `json:"unindexed_fragments"`
	// Rows are the live rows (physical minus deleted) of those fragments.
	Rows uint64 `json:"unindexed_rows"`
	// LiveRows are the live rows of every existing fragment.
	LiveRows uint64 `json:"live_rows"`
	// Unknown counts fragments whose row counts the manifest does not
	// record (legacy fragments); their rows are in neither count.
	Unknown int `json:"unknown_row_counts,omitempty"`
}

// Fraction is Rows / LiveRows (0 for an empty table).
func (b Backlog) Fraction() float64 {
	if b.LiveRows == 0 {
		return 0
	}
	return float64(b.Rows) / float64(b.LiveRows)
}

// ComputeBacklog returns the backlog of an index covering the given
// fragment ids over the manifest's fragments.
func ComputeBacklog(covered *roaring.Bitmap, frags []*tablepb.DataFragment) Backlog {
	var b Backlog
	for _, f := range frags {
		live, ok := liveRows(f)
		if !ok {
			b.Unknown++
		} else {
			b.LiveRows += live
		}
		if covered.Contains(uint32(f.GetId())) {
			continue
		}
		b.Fragments = append(b.Fragments, f.GetId())
		if ok {
			b.Rows += live
		}
	}
	return b
}

// liveRows is physical_rows minus the deletion file's row count; false
// when the manifest does not record them.
func liveRows(f *tablepb.DataFragment) (uint64, bool) {
	physical := f.GetPhysicalRows()
	if physical == 0 && len(f.GetFiles()) > 0 {
		return 0, false
	}
	var deleted uint64
	if df := f.GetDeletionFile(); df != nil {
		deleted = df.GetNumDeletedRows()
		if deleted == 0 || deleted > physical {
			return 0, false
		}
	}
	return physical - deleted, true
}
