package lancefile

import (
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// BindTableSchema makes the file read through a table's view of it: the
// schema becomes the table's fields that the data file holds (the listed
// fields with their ancestors and descendants, in table order), and columns
// are mapped by the DataFile's fields/column_indices — never by position.
// A column index of -1 means the field is not stored in this file.
func (f *File) BindTableSchema(table []*filepb.Field, fieldIDs, columnIndices []int32) error {
	if len(fieldIDs) != len(columnIndices) {
		return f.errf(ErrCorrupt, "data file lists %d fields but %d column indices", len(fieldIDs), len(columnIndices))
	}
	tree, err := newFieldTree(table)
	if err != nil {
		return fmt.Errorf("%s: table schema: %w", f.name, err)
	}
	keep := map[int32]bool{}
	colByID := map[int32]int{}
	var down func(id int32)
	down = func(id int32) {
		keep[id] = true
		for _, k := range tree.children[id] {
			down(k.GetId())
		}
	}
	for i, id := range fieldIDs {
		ci := columnIndices[i]
		if ci < 0 {
			continue
		}
		fl := tree.byID[id]
		if fl == nil {
			// A dropped column: its data stays in the file, unread.
			continue
		}
		if int(ci) >= len(f.Columns) {
			return f.errf(ErrCorrupt, "field %d mapped to column %d, file has %d columns", id, ci, len(f.Columns))
		}
		colByID[id] = int(ci)
		down(id)
		for p := fl.GetParentId(); p >= 0; {
			keep[p] = true
			pf := tree.byID[p]
			if pf == nil {
				break
			}
			p = pf.GetParentId()
		}
	}
	var kept []*filepb.Field
	for _, fl := range table {
		if keep[fl.GetId()] {
			kept = append(kept, fl)
		}
	}
	f.fields = kept
	f.byID = map[int32]*filepb.Field{}
	f.children = map[int32][]*filepb.Field{}
	f.topFields = nil
	for _, fl := range kept {
		f.byID[fl.GetId()] = fl
		if fl.GetParentId() < 0 {
			f.topFields = append(f.topFields, fl)
		} else {
			f.children[fl.GetParentId()] = append(f.children[fl.GetParentId()], fl)
		}
	}
	f.colByID = colByID
	for _, c := range f.Columns {
		c.FieldID = -1
	}
	for id, ci := range colByID {
		f.Columns[ci].FieldID = id
	}
	return nil
}

// ProjectFields returns the fields (in schema order) that a projection on
// ids reads: each listed field with its descendants and its ancestors. nil
// ids select every field.
func ProjectFields(fields []*filepb.Field, ids []int32) ([]*filepb.Field, error) {
	if ids == nil {
		return fields, nil
	}
	tree, err := newFieldTree(fields)
	if err != nil {
		return nil, err
	}
	keep := map[int32]bool{}
	var down func(id int32)
	down = func(id int32) {
		keep[id] = true
		for _, k := range tree.children[id] {
			down(k.GetId())
		}
	}
	for _, id := range ids {
		fl := tree.byID[id]
		if fl == nil {
			return nil, fmt.Errorf("%w: no field with id %d", ErrCorrupt, id)
		}
		down(id)
		for p := fl.GetParentId(); p >= 0; p = tree.byID[p].GetParentId() {
			keep[p] = true
		}
	}
	var out []*filepb.Field
	for _, fl := range fields {
		if keep[fl.GetId()] {
			out = append(out, fl)
		}
	}
	return out, nil
}
