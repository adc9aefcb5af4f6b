package plan

import (
	"sort"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// blobMetaKey marks a blob column (lance-arrow BLOB_META_KEY).
const blobMetaKey = "lance-encoding:blob"

// Reserved field ids in DataFile.fields: -1 unassigned, -2 tombstone, and
// -3..-5 the spilled row lineage columns (row ids, created-at and
// last-updated-at versions) of newer Lance releases.
const (
	tombstoneFieldID = -2
	lineageMinID     = -5
	lineageMaxID     = -3
)

func isLineageID(id int32) bool { return id >= lineageMinID && id <= lineageMaxID }

// schema is the table schema as the repack planner needs it.
type schema struct {
	ids      map[int32]bool           // every schema field id
	parent   map[int32]int32          // field id -> parent id (-1 top level)
	children map[int32][]int32        // field id -> child ids
	name     map[int32]string         // field id -> name
	blob     map[int32]bool           // field id -> blob column (by metadata)
	top      []int32                  // top-level field ids in schema order
	leaves   map[int32]map[int32]bool // top-level id -> leaf ids beneath (itself if none)
	subtree  map[int32]map[int32]bool // top-level id -> every id beneath, itself included
	byName   map[string]int32         // top-level name -> id
	topOf    map[int32]int32          // any field id -> its top-level ancestor
	order    []int32                  // every field id in manifest (pre-)order
}

func newSchema(fields []*filepb.Field) *schema {
	s := &schema{
		ids: map[int32]bool{}, parent: map[int32]int32{}, children: map[int32][]int32{},
		name: map[int32]string{}, blob: map[int32]bool{}, leaves: map[int32]map[int32]bool{},
		subtree: map[int32]map[int32]bool{}, byName: map[string]int32{}, topOf: map[int32]int32{},
	}
	for _, f := range fields {
		id := f.GetId()
		s.ids[id] = true
		s.order = append(s.order, id)
		s.parent[id] = f.GetParentId()
		s.name[id] = f.GetName()
		if _, ok := f.GetMetadata()[blobMetaKey]; ok {
			s.blob[id] = true
		}
	}
	for _, f := range fields {
		id, p := f.GetId(), f.GetParentId()
		if p == -1 || !s.ids[p] {
			if p == -1 {
				s.top = append(s.top, id)
				s.byName[f.GetName()] = id
			}
			continue
		}
		s.children[p] = append(s.children[p], id)
	}
	for _, t := range s.top {
		leaves, sub := map[int32]bool{}, map[int32]bool{}
		var walk func(id int32, depth int)
		walk = func(id int32, depth int) {
			if depth > 64 || sub[id] {
				return // a cycle in a corrupt schema
			}
			sub[id] = true
			s.topOf[id] = t
			if len(s.children[id]) == 0 {
				leaves[id] = true
			}
			for _, c := range s.children[id] {
				walk(c, depth+1)
			}
		}
		walk(t, 0)
		s.leaves[t], s.subtree[t] = leaves, sub
	}
	return s
}

// holdsBlob reports whether the column or anything beneath it is a blob.
func (s *schema) holdsBlob(top int32) bool {
	for id := range s.subtree[top] {
		if s.blob[id] {
			return true
		}
	}
	return false
}

// ancestors adds id's schema ancestors to out.
func (s *schema) ancestors(id int32, out map[int32]bool) {
	for i := 0; i < 64; i++ {
		p, ok := s.parent[id]
		if !ok || p == -1 || !s.ids[p] {
			return
		}
		out[p] = true
		id = p
	}
}

func sortedIDs(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
