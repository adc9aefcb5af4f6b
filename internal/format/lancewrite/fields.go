package lancewrite

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// ErrUnsupportedType is returned for Arrow or Lance types this writer cannot
// encode (dictionary arrays, maps, unions, FSL of nested types, ...).
var ErrUnsupportedType = errors.New("lancewrite: unsupported type")

type nodeKind int

const (
	kindLeaf nodeKind = iota
	kindStruct
	kindList
)

// valueKind is the physical shape of a leaf's values.
type valueKind int

const (
	valFixed    valueKind = iota // width bytes per value (ints, floats, dates, decimals, fsb)
	valBool                      // one bit per value
	valVariable                  // bytes with offsets (string, binary and large variants)
	valFSL                       // dim items of width bytes (fixed_size_list of a fixed-width type)
	valNull                      // arrow null type: always null
)

// node is one Lance field with its children, in pre-order.
type node struct {
	f        *filepb.Field
	kind     nodeKind
	large    bool // large_list
	children []*node
	// leaves only
	vk       valueKind
	width    int // bytes per value (fixed), per item (fsl)
	dim      int // fsl dimension
	itemBool bool
	col      int // column index of a leaf (2.1) or of any node (2.0)
}

// buildTree turns a pre-order Lance field list into trees (one per top-level field).
func buildTree(fields []*filepb.Field) ([]*node, error) {
	byID := map[int32]*node{}
	var roots []*node
	for _, f := range fields {
		if f == nil {
			return nil, errors.New("lancewrite: nil field")
		}
		if _, dup := byID[f.Id]; dup {
			return nil, fmt.Errorf("lancewrite: duplicate field id %d", f.Id)
		}
		n := &node{f: f}
		if err := n.classify(); err != nil {
			return nil, err
		}
		byID[f.Id] = n
		if f.ParentId < 0 {
			roots = append(roots, n)
			continue
		}
		p, ok := byID[f.ParentId]
		if !ok {
			return nil, fmt.Errorf("lancewrite: field %q (id %d) has parent %d that does not precede it", f.Name, f.Id, f.ParentId)
		}
		if p.kind == kindLeaf {
			return nil, fmt.Errorf("lancewrite: field %q (id %d) has a leaf parent %q", f.Name, f.Id, p.f.Name)
		}
		p.children = append(p.children, n)
	}
	var check func(n *node) error
	check = func(n *node) error {
		switch n.kind {
		case kindList:
			if len(n.children) != 1 {
				return fmt.Errorf("lancewrite: list field %q has %d children, want 1", n.f.Name, len(n.children))
			}
		case kindStruct:
			if len(n.children) == 0 {
				return fmt.Errorf("%w: struct field %q without children", ErrUnsupportedType, n.f.Name)
			}
		}
		for _, c := range n.children {
			if err := check(c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range roots {
		if err := check(r); err != nil {
			return nil, err
		}
	}
	return roots, nil
}

var fixedWidths = map[string]int{
	"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "halffloat": 2,
	"int32": 4, "uint32": 4, "float": 4, "date32:day": 4,
	"int64": 8, "uint64": 8, "double": 8, "date64:ms": 8,
}

// fixedWidthOf returns the byte width of a fixed-width logical type, or 0.
func fixedWidthOf(lt string) int {
	if w, ok := fixedWidths[lt]; ok {
		return w
	}
	switch {
	case strings.HasPrefix(lt, "time32:"):
		return 4
	case strings.HasPrefix(lt, "time64:"), strings.HasPrefix(lt, "timestamp:"), strings.HasPrefix(lt, "duration:"):
		return 8
	case strings.HasPrefix(lt, "decimal:128:"):
		return 16
	case strings.HasPrefix(lt, "decimal:256:"):
		return 32
	case strings.HasPrefix(lt, "fixed_size_binary:"):
		n, err := strconv.Atoi(strings.TrimPrefix(lt, "fixed_size_binary:"))
		if err == nil && n > 0 {
			return n
		}
	}
	return 0
}

func (n *node) classify() error {
	lt := n.f.LogicalType
	switch {
	case lt == "struct":
		n.kind = kindStruct
	case lt == "list" || lt == "list.struct":
		n.kind = kindList
	case lt == "large_list" || lt == "large_list.struct":
		n.kind, n.large = kindList, true
	case lt == "bool":
		n.vk = valBool
	case lt == "null":
		n.vk = valNull
	case lt == "string" || lt == "binary" || lt == "large_string" || lt == "large_binary":
		n.vk = valVariable
	case strings.HasPrefix(lt, "fixed_size_list:"):
		rest := strings.TrimPrefix(lt, "fixed_size_list:")
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return fmt.Errorf("lancewrite: field %q: bad logical type %q", n.f.Name, lt)
		}
		dim, err := strconv.Atoi(rest[i+1:])
		if err != nil || dim <= 0 {
			return fmt.Errorf("lancewrite: field %q: bad logical type %q", n.f.Name, lt)
		}
		inner := rest[:i]
		n.vk, n.dim = valFSL, dim
		switch {
		case inner == "bool":
			n.itemBool = true
		case inner == "lance.bfloat16":
			n.width = 2
		default:
			n.width = fixedWidthOf(inner)
		}
		if n.width == 0 && !n.itemBool {
			return fmt.Errorf("%w: field %q: fixed_size_list of %q", ErrUnsupportedType, n.f.Name, inner)
		}
		if n.itemBool {
			return fmt.Errorf("%w: field %q: fixed_size_list of bool", ErrUnsupportedType, n.f.Name)
		}
	default:
		w := fixedWidthOf(lt)
		if w == 0 {
			return fmt.Errorf("%w: field %q: logical type %q", ErrUnsupportedType, n.f.Name, lt)
		}
		n.vk, n.width = valFixed, w
	}
	return nil
}

// logicalType is Lance's logical type string for an Arrow type.
func logicalType(dt arrow.DataType) (string, error) {
	switch t := dt.(type) {
	case *arrow.NullType:
		return "null", nil
	case *arrow.BooleanType:
		return "bool", nil
	case *arrow.Int8Type:
		return "int8", nil
	case *arrow.Uint8Type:
		return "uint8", nil
	case *arrow.Int16Type:
		return "int16", nil
	case *arrow.Uint16Type:
		return "uint16", nil
	case *arrow.Int32Type:
		return "int32", nil
	case *arrow.Uint32Type:
		return "uint32", nil
	case *arrow.Int64Type:
		return "int64", nil
	case *arrow.Uint64Type:
		return "uint64", nil
	case *arrow.Float16Type:
		return "halffloat", nil
	case *arrow.Float32Type:
		return "float", nil
	case *arrow.Float64Type:
		return "double", nil
	case *arrow.StringType:
		return "string", nil
	case *arrow.BinaryType:
		return "binary", nil
	case *arrow.LargeStringType:
		return "large_string", nil
	case *arrow.LargeBinaryType:
		return "large_binary", nil
	case *arrow.Date32Type:
		return "date32:day", nil
	case *arrow.Date64Type:
		return "date64:ms", nil
	case *arrow.Time32Type:
		return "time32:" + t.Unit.String(), nil
	case *arrow.Time64Type:
		return "time64:" + t.Unit.String(), nil
	case *arrow.TimestampType:
		tz := t.TimeZone
		if tz == "" {
			tz = "-"
		}
		return "timestamp:" + t.Unit.String() + ":" + tz, nil
	case *arrow.DurationType:
		return "duration:" + t.Unit.String(), nil
	case *arrow.Decimal128Type:
		return fmt.Sprintf("decimal:128:%d:%d", t.Precision, t.Scale), nil
	case *arrow.Decimal256Type:
		return fmt.Sprintf("decimal:256:%d:%d", t.Precision, t.Scale), nil
	case *arrow.FixedSizeBinaryType:
		return fmt.Sprintf("fixed_size_binary:%d", t.ByteWidth), nil
	case *arrow.StructType:
		return "struct", nil
	case *arrow.ListType:
		if _, ok := t.Elem().(*arrow.StructType); ok {
			return "list.struct", nil
		}
		return "list", nil
	case *arrow.LargeListType:
		if _, ok := t.Elem().(*arrow.StructType); ok {
			return "large_list.struct", nil
		}
		return "large_list", nil
	case *arrow.FixedSizeListType:
		inner, err := logicalType(t.Elem())
		if err != nil {
			return "", err
		}
		if fixedWidthOf(inner) == 0 {
			return "", fmt.Errorf("%w: fixed_size_list of %s", ErrUnsupportedType, t.Elem())
		}
		return fmt.Sprintf("fixed_size_list:%s:%d", inner, t.Len()), nil
	}
	return "", fmt.Errorf("%w: %s", ErrUnsupportedType, dt)
}

// FieldsFromArrow builds the Lance field list (pre-order, parent ids, ids
// from firstID) for an Arrow schema, as lance does for a new table. In the
// daemon the fields always come from the table's manifest; this is for new
// tables and tests.
func FieldsFromArrow(schema *arrow.Schema, firstID int32) ([]*filepb.Field, error) {
	var out []*filepb.Field
	next := firstID
	var add func(f arrow.Field, parent int32) error
	add = func(f arrow.Field, parent int32) error {
		lt, err := logicalType(f.Type)
		if err != nil {
			return fmt.Errorf("field %q: %w", f.Name, err)
		}
		pf := &filepb.Field{Name: f.Name, Id: next, ParentId: parent, LogicalType: lt, Nullable: f.Nullable}
		switch f.Type.(type) {
		case *arrow.StringType, *arrow.BinaryType, *arrow.LargeStringType, *arrow.LargeBinaryType:
			pf.Encoding = filepb.Encoding_VAR_BINARY
		case *arrow.StructType, *arrow.ListType, *arrow.LargeListType:
		default:
			pf.Encoding = filepb.Encoding_PLAIN
		}
		if md := f.Metadata; md.Len() > 0 {
			pf.Metadata = map[string][]byte{}
			for i, k := range md.Keys() {
				pf.Metadata[k] = []byte(md.Values()[i])
			}
		}
		out = append(out, pf)
		id := next
		next++
		switch t := f.Type.(type) {
		case *arrow.StructType:
			for _, c := range t.Fields() {
				if err := add(c, id); err != nil {
					return err
				}
			}
		case *arrow.ListType:
			return add(t.ElemField(), id)
		case *arrow.LargeListType:
			return add(t.ElemField(), id)
		}
		return nil
	}
	for _, f := range schema.Fields() {
		if err := add(f, -1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkType verifies that an Arrow type can be written as the Lance field n.
func checkType(n *node, dt arrow.DataType) error {
	switch n.kind {
	case kindStruct:
		st, ok := dt.(*arrow.StructType)
		if !ok || st.NumFields() != len(n.children) {
			return fmt.Errorf("%w: field %q is a struct of %d fields, record has %s", ErrTypeMismatch, n.f.Name, len(n.children), dt)
		}
		for i, c := range n.children {
			if err := checkType(c, st.Field(i).Type); err != nil {
				return err
			}
		}
		return nil
	case kindList:
		var elem arrow.DataType
		switch t := dt.(type) {
		case *arrow.ListType:
			if n.large {
				return fmt.Errorf("%w: field %q is a large_list, record has %s", ErrTypeMismatch, n.f.Name, dt)
			}
			elem = t.Elem()
		case *arrow.LargeListType:
			if !n.large {
				return fmt.Errorf("%w: field %q is a list, record has %s", ErrTypeMismatch, n.f.Name, dt)
			}
			elem = t.Elem()
		default:
			return fmt.Errorf("%w: field %q is a list, record has %s", ErrTypeMismatch, n.f.Name, dt)
		}
		return checkType(n.children[0], elem)
	}
	lt, err := logicalType(dt)
	if err != nil {
		return fmt.Errorf("field %q: %w", n.f.Name, err)
	}
	if lt != n.f.LogicalType {
		return fmt.Errorf("%w: field %q is %s, record has %s", ErrTypeMismatch, n.f.Name, n.f.LogicalType, lt)
	}
	return nil
}

// ErrTypeMismatch is returned when a record does not match the writer's fields.
var ErrTypeMismatch = errors.New("lancewrite: record does not match fields")
