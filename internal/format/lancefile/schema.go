package lancefile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// FieldIDKey is the Arrow field-metadata key under which ArrowSchema keeps
// the Lance field id (decimal string).
const FieldIDKey = "lance:field_id"

// ArrowSchema converts a flat pre-order Lance field list into an Arrow schema.
// Each Arrow field carries its Lance id under FieldIDKey plus the Lance
// field metadata.
func ArrowSchema(fields []*filepb.Field) (*arrow.Schema, error) {
	t, err := newFieldTree(fields)
	if err != nil {
		return nil, err
	}
	out := make([]arrow.Field, 0, len(t.top))
	for _, f := range t.top {
		af, err := t.arrowField(f)
		if err != nil {
			return nil, err
		}
		out = append(out, af)
	}
	return arrow.NewSchema(out, nil), nil
}

// ArrowField converts one field (with its descendants from fields).
func ArrowField(fields []*filepb.Field, id int32) (arrow.Field, error) {
	t, err := newFieldTree(fields)
	if err != nil {
		return arrow.Field{}, err
	}
	f, ok := t.byID[id]
	if !ok {
		return arrow.Field{}, fmt.Errorf("%w: no field with id %d", ErrCorrupt, id)
	}
	return t.arrowField(f)
}

type fieldTree struct {
	top      []*filepb.Field
	byID     map[int32]*filepb.Field
	children map[int32][]*filepb.Field
}

func newFieldTree(fields []*filepb.Field) (*fieldTree, error) {
	t := &fieldTree{byID: map[int32]*filepb.Field{}, children: map[int32][]*filepb.Field{}}
	for _, f := range fields {
		if _, dup := t.byID[f.GetId()]; dup {
			return nil, fmt.Errorf("%w: duplicate field id %d", ErrCorrupt, f.GetId())
		}
		t.byID[f.GetId()] = f
	}
	for _, f := range fields {
		if f.GetParentId() < 0 {
			t.top = append(t.top, f)
			continue
		}
		if _, ok := t.byID[f.GetParentId()]; !ok {
			return nil, fmt.Errorf("%w: field %d (%q) has unknown parent %d", ErrCorrupt, f.GetId(), f.GetName(), f.GetParentId())
		}
		t.children[f.GetParentId()] = append(t.children[f.GetParentId()], f)
	}
	return t, nil
}

func (t *fieldTree) arrowField(f *filepb.Field) (arrow.Field, error) {
	dt, err := t.arrowType(f, 0)
	if err != nil {
		return arrow.Field{}, err
	}
	keys := []string{FieldIDKey}
	vals := []string{strconv.Itoa(int(f.GetId()))}
	for k, v := range f.GetMetadata() {
		keys = append(keys, k)
		vals = append(vals, string(v))
	}
	return arrow.Field{Name: f.GetName(), Type: dt, Nullable: f.GetNullable(), Metadata: arrow.NewMetadata(keys, vals)}, nil
}

func (t *fieldTree) arrowType(f *filepb.Field, depth int) (arrow.DataType, error) {
	if depth > 64 {
		return nil, fmt.Errorf("%w: field %d nested too deeply", ErrCorrupt, f.GetId())
	}
	lt := f.GetLogicalType()
	kids := t.children[f.GetId()]
	switch {
	case lt == "struct":
		fs := make([]arrow.Field, 0, len(kids))
		for _, k := range kids {
			af, err := t.arrowField(k)
			if err != nil {
				return nil, err
			}
			fs = append(fs, af)
		}
		return arrow.StructOf(fs...), nil
	case isListType(lt):
		if len(kids) != 1 {
			return nil, fmt.Errorf("%w: list field %d (%q) has %d children, want 1", ErrCorrupt, f.GetId(), f.GetName(), len(kids))
		}
		item, err := t.arrowField(kids[0])
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(lt, "large_list") {
			return arrow.LargeListOfField(item), nil
		}
		return arrow.ListOfField(item), nil
	}
	dt, err := LogicalToArrow(lt)
	if err != nil {
		return nil, fmt.Errorf("field %d (%q): %w", f.GetId(), f.GetName(), err)
	}
	return dt, nil
}

var simpleTypes = map[string]arrow.DataType{
	"null":         arrow.Null,
	"bool":         arrow.FixedWidthTypes.Boolean,
	"int8":         arrow.PrimitiveTypes.Int8,
	"uint8":        arrow.PrimitiveTypes.Uint8,
	"int16":        arrow.PrimitiveTypes.Int16,
	"uint16":       arrow.PrimitiveTypes.Uint16,
	"int32":        arrow.PrimitiveTypes.Int32,
	"uint32":       arrow.PrimitiveTypes.Uint32,
	"int64":        arrow.PrimitiveTypes.Int64,
	"uint64":       arrow.PrimitiveTypes.Uint64,
	"halffloat":    arrow.FixedWidthTypes.Float16,
	"float":        arrow.PrimitiveTypes.Float32,
	"double":       arrow.PrimitiveTypes.Float64,
	"string":       arrow.BinaryTypes.String,
	"binary":       arrow.BinaryTypes.Binary,
	"large_string": arrow.BinaryTypes.LargeString,
	"large_binary": arrow.BinaryTypes.LargeBinary,
	"json":         arrow.BinaryTypes.LargeBinary,
	"date32:day":   arrow.FixedWidthTypes.Date32,
	"date64:ms":    arrow.FixedWidthTypes.Date64,
	"time32:s":     arrow.FixedWidthTypes.Time32s,
	"time32:ms":    arrow.FixedWidthTypes.Time32ms,
	"time64:us":    arrow.FixedWidthTypes.Time64us,
	"time64:ns":    arrow.FixedWidthTypes.Time64ns,
	"duration:s":   arrow.FixedWidthTypes.Duration_s,
	"duration:ms":  arrow.FixedWidthTypes.Duration_ms,
	"duration:us":  arrow.FixedWidthTypes.Duration_us,
	"duration:ns":  arrow.FixedWidthTypes.Duration_ns,
}

func timeUnit(s string) (arrow.TimeUnit, bool) {
	switch s {
	case "s":
		return arrow.Second, true
	case "ms":
		return arrow.Millisecond, true
	case "us":
		return arrow.Microsecond, true
	case "ns":
		return arrow.Nanosecond, true
	}
	return 0, false
}

// LogicalToArrow converts a non-nested Lance logical type string
// (everything except struct and list) to an Arrow type.
func LogicalToArrow(lt string) (arrow.DataType, error) {
	if dt, ok := simpleTypes[lt]; ok {
		return dt, nil
	}
	bad := func() (arrow.DataType, error) {
		return nil, fmt.Errorf("%w: logical type %q", ErrUnsupportedEncoding, lt)
	}
	head, rest, _ := strings.Cut(lt, ":")
	switch head {
	case "timestamp":
		u, tz, ok := strings.Cut(rest, ":")
		unit, uok := timeUnit(u)
		if !ok || !uok {
			return bad()
		}
		if tz == "-" {
			tz = ""
		}
		return &arrow.TimestampType{Unit: unit, TimeZone: tz}, nil
	case "fixed_size_list":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return bad()
		}
		n, err := strconv.Atoi(rest[i+1:])
		if err != nil || n <= 0 {
			return bad()
		}
		inner := rest[:i]
		var elem arrow.DataType
		if inner == "lance.bfloat16" {
			elem = &arrow.FixedSizeBinaryType{ByteWidth: 2}
		} else if elem, err = LogicalToArrow(inner); err != nil {
			return nil, err
		}
		return arrow.FixedSizeListOfField(int32(n), arrow.Field{Name: "item", Type: elem, Nullable: true}), nil
	case "fixed_size_binary":
		n, err := strconv.Atoi(rest)
		if err != nil || n <= 0 {
			return bad()
		}
		return &arrow.FixedSizeBinaryType{ByteWidth: n}, nil
	case "decimal":
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return bad()
		}
		p, err1 := strconv.Atoi(parts[1])
		s, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			return bad()
		}
		switch parts[0] {
		case "128":
			return &arrow.Decimal128Type{Precision: int32(p), Scale: int32(s)}, nil
		case "256":
			return &arrow.Decimal256Type{Precision: int32(p), Scale: int32(s)}, nil
		}
		return bad()
	case "dict":
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return bad()
		}
		vt, err := LogicalToArrow(parts[0])
		if err != nil {
			return nil, err
		}
		kt, err := LogicalToArrow(parts[1])
		if err != nil {
			return nil, err
		}
		return &arrow.DictionaryType{IndexType: kt, ValueType: vt}, nil
	}
	return bad()
}

// byteWidth returns the fixed byte width of a primitive Arrow type, or 0.
func byteWidth(dt arrow.DataType) int {
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return 0
	case arrow.FixedWidthDataType:
		return t.BitWidth() / 8
	}
	return 0
}
