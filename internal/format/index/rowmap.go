package index

import (
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
)

// A row address is fragment id << 32 | row offset in the fragment: what an
// index stores on a table without stable row ids.

// Addr builds a row address.
func Addr(fragment, offset uint64) uint64 { return fragment<<32 | offset&0xffffffff }

// Mapping tells a remap where each indexed row went. Map returns the new
// address and true for a row that moved or stayed, and false for a row the
// rewrite deleted (the remap drops it). A row the rewrite did not touch
// keeps its address: Map(old) = old, true. This is the contract of Lance's
// remap (a HashMap<u64, Option<u64>> whose missing keys mean "unchanged"),
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/optimize/remapping.rs
type Mapping interface {
	Map(old uint64) (uint64, bool)
}

// RewriteGroup is one compaction task's input and output: old fragments
// read in order with their deleted rows skipped, written as the new
// fragments in order. That is how Lance's compaction (scan_in_order) and
// lanced's rewrite lay rows out, so the mapping follows from row counts and
// deletions alone.
type RewriteGroup struct {
	Old []OldFragment
	New []NewFragment
}

// OldFragment is a rewritten fragment: its id, physical row count and the
// offsets deleted at the version the rewrite read (nil = none).
type OldFragment struct {
	ID           uint64
	PhysicalRows uint64
	Deleted      *roaring.Bitmap
}

// NewFragment is an output fragment of a rewrite and its row count.
type NewFragment struct {
	ID   uint64
	Rows uint64
}

type oldFrag struct {
	OldFragment
	group int
	base  uint64 // live rows of the group before this fragment
}

// CompactionMapping maps row addresses through one or more rewrite groups.
// Its memory is the groups' deletion bitmaps and fragment lists, never one
// entry per row; a lookup is a map hit, a rank and a binary search. A remap
// split per fragment range builds it from that range's groups only.
type CompactionMapping struct {
	old    map[uint64]*oldFrag
	groups [][]NewFragment
	starts [][]uint64 // per group, first group-rank of each new fragment
}

// NewCompactionMapping checks that every group's live input rows equal its
// output rows and that no fragment is rewritten twice.
func NewCompactionMapping(groups []RewriteGroup) (*CompactionMapping, error) {
	m := &CompactionMapping{old: map[uint64]*oldFrag{}}
	for gi, g := range groups {
		var live uint64
		for _, f := range g.Old {
			if _, dup := m.old[f.ID]; dup {
				return nil, fmt.Errorf("index: mapping: fragment %d is rewritten by two groups", f.ID)
			}
			var del uint64
			if f.Deleted != nil {
				del = f.Deleted.GetCardinality()
				if del > 0 && uint64(f.Deleted.Maximum()) >= f.PhysicalRows {
					return nil, fmt.Errorf("index: mapping: fragment %d deletes offset %d of %d physical rows", f.ID, f.Deleted.Maximum(), f.PhysicalRows)
				}
			}
			m.old[f.ID] = &oldFrag{OldFragment: f, group: gi, base: live}
			live += f.PhysicalRows - del
		}
		var out uint64
		starts := make([]uint64, len(g.New))
		for i, nf := range g.New {
			starts[i] = out
			out += nf.Rows
		}
		if out != live {
			return nil, fmt.Errorf("index: mapping: group %d reads %d live rows but writes %d", gi, live, out)
		}
		m.groups = append(m.groups, g.New)
		m.starts = append(m.starts, starts)
	}
	return m, nil
}

// Rewritten reports whether the fragment is an old fragment of some group.
func (m *CompactionMapping) Rewritten(fragment uint64) bool {
	_, ok := m.old[fragment]
	return ok
}

// Map implements Mapping.
func (m *CompactionMapping) Map(old uint64) (uint64, bool) {
	f, ok := m.old[old>>32]
	if !ok {
		return old, true
	}
	off := old & 0xffffffff
	if off >= f.PhysicalRows {
		// An address past the fragment's end cannot be live: drop it.
		return 0, false
	}
	rank := f.base + off
	if f.Deleted != nil {
		if f.Deleted.Contains(uint32(off)) {
			return 0, false
		}
		rank -= f.Deleted.Rank(uint32(off))
	}
	starts := m.starts[f.group]
	i := sort.Search(len(starts), func(i int) bool { return starts[i] > rank }) - 1
	nf := m.groups[f.group][i]
	return nf.ID<<32 | (rank - starts[i]), true
}
