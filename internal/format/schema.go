package format

import (
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// TombstoneFieldID marks a data-file field slot whose column was moved to
// another file (DataFile.fields).
const TombstoneFieldID int32 = -2

// CheckSchema verifies that fields are a flattened schema in pre-order:
// unique ids, top-level fields have parent -1, and every parent appears
// before its children (Lance unwraps the parent lookup, so a violation
// would make it fail).
func CheckSchema(fields []*filepb.Field) error {
	seen := make(map[int32]bool, len(fields))
	for i, f := range fields {
		if f.GetId() < 0 {
			return fmt.Errorf("format: schema field %d (%q) has negative id %d: %w", i, f.GetName(), f.GetId(), ErrCorrupt)
		}
		if seen[f.GetId()] {
			return fmt.Errorf("format: schema field id %d (%q) appears twice: %w", f.GetId(), f.GetName(), ErrCorrupt)
		}
		if p := f.GetParentId(); p != -1 && !seen[p] {
			return fmt.Errorf("format: schema field %d (%q) has parent %d that does not precede it: %w", f.GetId(), f.GetName(), p, ErrCorrupt)
		}
		seen[f.GetId()] = true
	}
	return nil
}

// FieldIDSet returns the set of field ids in the schema.
func FieldIDSet(fields []*filepb.Field) map[int32]bool {
	s := make(map[int32]bool, len(fields))
	for _, f := range fields {
		s[f.GetId()] = true
	}
	return s
}

// FieldByID returns the schema field with id, or nil.
func FieldByID(fields []*filepb.Field, id int32) *filepb.Field {
	for _, f := range fields {
		if f.GetId() == id {
			return f
		}
	}
	return nil
}

// ChildFields returns the direct children of parent (-1 for the top-level
// fields), in schema order.
func ChildFields(fields []*filepb.Field, parent int32) []*filepb.Field {
	var out []*filepb.Field
	for _, f := range fields {
		if f.GetParentId() == parent {
			out = append(out, f)
		}
	}
	return out
}

// TopLevelAncestor returns the id of the top-level field that contains id
// (id itself for a top-level field), or -1 if id is not in the schema.
func TopLevelAncestor(fields []*filepb.Field, id int32) int32 {
	parents := make(map[int32]int32, len(fields))
	for _, f := range fields {
		parents[f.GetId()] = f.GetParentId()
	}
	cur, ok := id, true
	for steps := 0; steps <= len(fields); steps++ {
		var p int32
		if p, ok = parents[cur]; !ok {
			return -1
		}
		if p == -1 {
			return cur
		}
		cur = p
	}
	return -1 // a cycle; CheckSchema rejects such a schema
}

// MaxFieldID returns the highest field id used by the manifest: the schema's
// and every data file's (ids of dropped columns still count), as Lance's
// Manifest::max_field_id; -1 when there is none. New columns take ids above it.
func MaxFieldID(m *tablepb.Manifest) int32 {
	maxID := int32(-1)
	for _, f := range m.GetFields() {
		maxID = max(maxID, f.GetId())
	}
	for _, fr := range m.GetFragments() {
		for _, df := range fr.GetFiles() {
			for _, id := range df.GetFields() {
				maxID = max(maxID, id)
			}
		}
	}
	return maxID
}

// MaxFragmentID returns the manifest's fragment-id high-water mark:
// max_fragment_id when set, else the largest fragment id; ok is false when
// no fragment has ever existed.
func MaxFragmentID(m *tablepb.Manifest) (id uint32, ok bool) {
	if m.MaxFragmentId != nil {
		return m.GetMaxFragmentId(), true
	}
	for _, f := range m.GetFragments() {
		if !ok || uint32(f.GetId()) > id {
			id, ok = uint32(f.GetId()), true
		}
	}
	return id, ok
}
