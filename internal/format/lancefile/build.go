package lancefile

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// bitmap is a validity bitmap under construction.
type bitmap struct {
	bits  []byte
	n     int
	nulls int
}

func newBitmap(n int) *bitmap {
	b := &bitmap{bits: make([]byte, bitutil.BytesForBits(int64(n))), n: n}
	return b
}

func (b *bitmap) set(i int, valid bool) {
	if valid {
		bitutil.SetBit(b.bits, i)
	} else {
		b.nulls++
	}
}

// buffer returns the Arrow validity buffer, or nil when nothing is null.
func (b *bitmap) buffer() *memory.Buffer {
	if b == nil || b.nulls == 0 {
		return nil
	}
	return memory.NewBufferBytes(b.bits)
}

func (b *bitmap) nullCount() int {
	if b == nil {
		return 0
	}
	return b.nulls
}

// pathField is one node on the path from a top-level field to a leaf column.
type pathField struct {
	field arrow.Field // full Arrow field (struct nodes keep all children here)
	child int         // for structs: index of the child on the path
}

// buildRows assembles rows [a,b) of the page into an Arrow array along path.
// Struct nodes in the result carry only the child on the path; mergeParts
// joins sibling leaves afterwards.
func (p *page) buildRows(path []pathField, a, b int) (arrow.ArrayData, error) {
	if len(path) != len(p.layers) {
		return nil, fmt.Errorf("%w: page has %d rep/def layers, schema path has %d levels", ErrCorrupt, len(p.layers), len(path))
	}
	if a < 0 || b > p.rows || a > b {
		return nil, fmt.Errorf("%w: rows [%d,%d) outside page of %d rows", ErrCorrupt, a, b, p.rows)
	}
	outer := make([]enc21pb.RepDefLayer, len(p.layers))
	for k := range outer {
		outer[k] = p.layers[len(p.layers)-1-k]
	}
	lo := make([]int, len(outer))
	sum := 0
	for k := len(outer) - 1; k >= 0; k-- {
		lo[k] = sum
		sum += layerDefLevels(outer[k])
	}
	var starts, ends []int32
	va, vb := a, b
	if p.rowStart == nil {
		starts = make([]int32, b-a)
		for i := range starts {
			starts[i] = int32(a + i)
		}
	} else {
		starts = p.rowStart[a:b]
		ends = p.rowStart[a+1 : b+1]
		va, vb = int(p.visBefore[a]), int(p.visBefore[b])
	}
	bd := &builder{p: p, path: path, outer: outer, lo: lo, va: va, vb: vb}
	return bd.node(0, starts, ends)
}

type builder struct {
	p      *page
	path   []pathField
	outer  []enc21pb.RepDefLayer
	lo     []int
	va, vb int
}

func (bd *builder) defAt(i int32) int {
	if bd.p.def == nil {
		return int(bd.p.defFill)
	}
	return int(bd.p.def[i])
}

func (bd *builder) node(k int, starts, ends []int32) (arrow.ArrayData, error) {
	n := len(starts)
	layer := bd.outer[k]
	pf := bd.path[k]
	if k == len(bd.path)-1 {
		if isListLayer(layer) {
			return nil, fmt.Errorf("%w: leaf %q has a list layer", ErrCorrupt, pf.field.Name)
		}
		if n != bd.vb-bd.va {
			return nil, fmt.Errorf("%w: %d leaf slots but %d visible values", ErrCorrupt, n, bd.vb-bd.va)
		}
		var valid *bitmap
		if bd.p.def != nil || bd.p.defFill != 0 {
			valid = newBitmap(n)
			for i, s := range starts {
				valid.set(i, bd.defAt(s) <= bd.lo[k])
			}
		}
		return buildLeaf(pf.field.Type, &bd.p.vals, bd.va, bd.vb, valid)
	}
	if !isListLayer(layer) {
		st, ok := pf.field.Type.(*arrow.StructType)
		if !ok {
			return nil, fmt.Errorf("%w: item layer for non-struct %q (%s)", ErrCorrupt, pf.field.Name, pf.field.Type)
		}
		var valid *bitmap
		if bd.p.def != nil || bd.p.defFill != 0 {
			valid = newBitmap(n)
			for i, s := range starts {
				valid.set(i, bd.defAt(s) <= bd.lo[k])
			}
		}
		child, err := bd.node(k+1, starts, ends)
		if err != nil {
			return nil, err
		}
		defer child.Release()
		cf := st.Field(pf.child)
		cf.Type = child.DataType()
		ct := arrow.StructOf(cf)
		return array.NewData(ct, n, []*memory.Buffer{valid.buffer()}, []arrow.ArrayData{child}, valid.nullCount(), 0), nil
	}
	// List layer.
	if len(ends) != len(starts) {
		return nil, fmt.Errorf("%w: list layer without repetition", ErrCorrupt)
	}
	r := 0
	for _, l := range bd.outer[k:] {
		if isListLayer(l) {
			r++
		}
	}
	lo := bd.lo[k]
	valid := newBitmap(n)
	offsets := make([]int64, n+1)
	var cs, ce []int32
	rep := bd.p.rep
	for i := range starts {
		s, e := starts[i], ends[i]
		d := bd.defAt(s)
		isNull, isEmpty := false, false
		if d > lo {
			switch layer {
			case enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST:
				isEmpty = d == lo+1
			case enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
				isEmpty = d == lo+2
			}
			isNull = !isEmpty
		}
		valid.set(i, !isNull)
		if !isNull && !isEmpty {
			for j := s; j < e; j++ {
				if j == s || int(rep[j]) >= r-1 {
					if j != s {
						ce = append(ce, j)
					}
					cs = append(cs, j)
				}
			}
			ce = append(ce, e)
		}
		offsets[i+1] = int64(len(cs))
	}
	child, err := bd.node(k+1, cs, ce)
	if err != nil {
		return nil, err
	}
	defer child.Release()
	var offBuf *memory.Buffer
	var lt arrow.DataType
	switch t := pf.field.Type.(type) {
	case *arrow.ListType:
		o32 := make([]int32, n+1)
		for i, o := range offsets {
			o32[i] = int32(o)
		}
		offBuf = memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(o32))
		ef := t.ElemField()
		ef.Type = child.DataType()
		lt = arrow.ListOfField(ef)
	case *arrow.LargeListType:
		offBuf = memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(offsets))
		ef := t.ElemField()
		ef.Type = child.DataType()
		lt = arrow.LargeListOfField(ef)
	default:
		return nil, fmt.Errorf("%w: list layer for non-list %q (%s)", ErrCorrupt, pf.field.Name, pf.field.Type)
	}
	return array.NewData(lt, n, []*memory.Buffer{valid.buffer(), offBuf}, []arrow.ArrayData{child}, valid.nullCount(), 0), nil
}

// buildLeaf makes an Arrow array of type dt from values [va,vb).
func buildLeaf(dt arrow.DataType, v *values, va, vb int, valid *bitmap) (arrow.ArrayData, error) {
	n := vb - va
	if v.allNull {
		a := array.MakeArrayOfNull(memory.DefaultAllocator, dt, n)
		defer a.Release()
		d := a.Data()
		d.Retain()
		return d, nil
	}
	if dt.ID() == arrow.NULL {
		return array.NewData(dt, n, []*memory.Buffer{nil}, nil, n, 0), nil
	}
	if n > 0 && v.kind == kindNone {
		return nil, fmt.Errorf("%w: no values decoded", ErrCorrupt)
	}
	switch t := dt.(type) {
	case *arrow.DictionaryType:
		return buildDictLeaf(t, v, va, vb, valid)
	case *arrow.BooleanType:
		if v.kind != kindBool && n > 0 {
			return nil, fmt.Errorf("%w: bool column stored as %d-byte values", ErrCorrupt, v.width)
		}
		bits := make([]byte, bitutil.BytesForBits(int64(n)))
		for i := 0; i < n; i++ {
			if v.data[va+i] != 0 {
				bitutil.SetBit(bits, i)
			}
		}
		return array.NewData(dt, n, []*memory.Buffer{valid.buffer(), memory.NewBufferBytes(bits)}, nil, valid.nullCount(), 0), nil
	case *arrow.StringType, *arrow.BinaryType:
		return buildVariableLeaf(dt, v, va, vb, valid, 1<<31-1, arrow.Int32Traits.CastToBytes)
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		return buildVariableLeaf(dt, v, va, vb, valid, math.MaxInt64, arrow.Int64Traits.CastToBytes)
	case *arrow.FixedSizeListType:
		if v.kind != kindFixed && n > 0 {
			return nil, fmt.Errorf("%w: fixed size list stored as variable values", ErrCorrupt)
		}
		return buildFSL(t, v, 0, va, vb, valid)
	case *arrow.StructType:
		return buildPackedStruct(t, v, va, vb, valid)
	case arrow.FixedWidthDataType:
		w := byteWidth(dt)
		if w == 0 {
			return nil, fmt.Errorf("%w: leaf type %s", ErrUnsupportedEncoding, dt)
		}
		if n > 0 && (v.kind != kindFixed || v.width != w) {
			return nil, fmt.Errorf("%w: %s column stored as %d-byte values", ErrCorrupt, dt, v.width)
		}
		// The page's decoded values are immutable: share them, no copy.
		data := v.data[va*w : vb*w : vb*w]
		return array.NewData(dt, n, []*memory.Buffer{valid.buffer(), memory.NewBufferBytes(data)}, nil, valid.nullCount(), 0), nil
	}
	return nil, fmt.Errorf("%w: leaf type %s", ErrUnsupportedEncoding, dt)
}

// buildDictLeaf makes an Arrow dictionary array of values [va,vb). Values
// are stored materialized (the page dictionary is applied at decode), so
// they are dictionary-encoded again here.
func buildDictLeaf(t *arrow.DictionaryType, v *values, va, vb int, valid *bitmap) (arrow.ArrayData, error) {
	vd, err := buildLeaf(t.ValueType, v, va, vb, valid)
	if err != nil {
		return nil, err
	}
	defer vd.Release()
	vals := array.MakeFromData(vd)
	defer vals.Release()
	bld := array.NewDictionaryBuilder(memory.DefaultAllocator, t)
	defer bld.Release()
	if err := bld.AppendArray(vals); err != nil {
		return nil, fmt.Errorf("%w: dictionary-encode %s: %v", ErrUnsupportedEncoding, t, err)
	}
	out := bld.NewArray()
	defer out.Release()
	d := out.Data()
	d.Retain()
	return d, nil
}

// buildVariableLeaf makes a string or binary array of values [va,vb) with
// offsets of type O (int32, or int64 for the large types); more than
// maxBytes bytes do not fit O.
func buildVariableLeaf[O int32 | int64](dt arrow.DataType, v *values, va, vb int, valid *bitmap, maxBytes int64, offsetBytes func([]O) []byte) (arrow.ArrayData, error) {
	n := vb - va
	if v.kind != kindVariable && n > 0 {
		return nil, fmt.Errorf("%w: %s column stored as fixed values", ErrCorrupt, dt)
	}
	offs := make([]O, n+1)
	data := []byte{}
	if n > 0 {
		base := v.offs[va]
		if v.offs[vb]-base > maxBytes {
			return nil, fmt.Errorf("%w: %d bytes of %s in one batch exceed 32-bit offsets", ErrUnsupportedEncoding, v.offs[vb]-base, dt)
		}
		for i := range offs {
			offs[i] = O(v.offs[va+i] - base)
		}
		data = append(data, v.data[base:v.offs[vb]]...)
	}
	return array.NewData(dt, n, []*memory.Buffer{valid.buffer(), memory.NewBufferBytes(offsetBytes(offs)), memory.NewBufferBytes(data)}, nil, valid.nullCount(), 0), nil
}

// buildPackedStruct makes a struct array of values [va,vb) of a packed
// struct: each value is one row of the fixed-width children, row-major.
func buildPackedStruct(t *arrow.StructType, v *values, va, vb int, valid *bitmap) (arrow.ArrayData, error) {
	n := vb - va
	if v.kind != kindFixed && n > 0 {
		return nil, fmt.Errorf("%w: packed struct stored as variable values", ErrCorrupt)
	}
	children := make([]arrow.ArrayData, t.NumFields())
	off := 0
	for ci, cf := range t.Fields() {
		w := byteWidth(cf.Type)
		if w == 0 {
			return nil, fmt.Errorf("%w: packed struct child %q of type %s", ErrUnsupportedEncoding, cf.Name, cf.Type)
		}
		buf := make([]byte, 0, n*w)
		for i := va; i < vb; i++ {
			row := v.fixedAt(i)
			if off+w > len(row) {
				return nil, fmt.Errorf("%w: packed struct row of %d bytes", ErrCorrupt, len(row))
			}
			buf = append(buf, row[off:off+w]...)
		}
		off += w
		children[ci] = array.NewData(cf.Type, n, []*memory.Buffer{nil, memory.NewBufferBytes(buf)}, nil, 0, 0)
	}
	d := array.NewData(t, n, []*memory.Buffer{valid.buffer()}, children, valid.nullCount(), 0)
	for _, c := range children {
		c.Release()
	}
	return d, nil
}

// buildFSL builds a (nested) fixed-size list of rows [va,vb) at FSL depth
// `depth`, where a row at this depth is v.width/(product of outer dims) bytes.
func buildFSL(t *arrow.FixedSizeListType, v *values, depth, va, vb int, valid *bitmap) (arrow.ArrayData, error) {
	n := vb - va
	dim := int(t.Len())
	if depth >= len(v.fslDims) && n > 0 {
		return nil, fmt.Errorf("%w: fixed size list type deeper than its encoding", ErrCorrupt)
	}
	if n > 0 && v.fslDims[depth] != dim {
		return nil, fmt.Errorf("%w: fixed size list of %d items stored with %d", ErrCorrupt, dim, v.fslDims[depth])
	}
	ca, cb := va*dim, vb*dim
	// Item validity of this layer.
	var iv *bitmap
	if depth < len(v.fslValid) && v.fslValid[depth] != nil {
		iv = newBitmap(cb - ca)
		for i := ca; i < cb; i++ {
			iv.set(i-ca, v.fslValid[depth][i] != 0)
		}
	}
	et := t.Elem()
	var child arrow.ArrayData
	var err error
	if inner, ok := et.(*arrow.FixedSizeListType); ok {
		child, err = buildFSL(inner, v, depth+1, ca, cb, iv)
	} else {
		if depth != len(v.fslDims)-1 && n > 0 {
			return nil, fmt.Errorf("%w: fixed size list encoding deeper than its type", ErrCorrupt)
		}
		total := 1
		for _, d := range v.fslDims {
			total *= d
		}
		if n > 0 && v.width%total != 0 {
			return nil, fmt.Errorf("%w: fixed size list row of %d bytes for %d items", ErrCorrupt, v.width, total)
		}
		items := values{kind: kindFixed, n: v.n * total}
		if n > 0 {
			items.width = v.width / total
		}
		items.data = v.data
		if et.ID() == arrow.BOOL {
			items.kind, items.width = kindBool, 1
		}
		child, err = buildLeaf(et, &items, ca, cb, iv)
	}
	if err != nil {
		return nil, err
	}
	defer child.Release()
	return array.NewData(t, n, []*memory.Buffer{valid.buffer()}, []arrow.ArrayData{child}, valid.nullCount(), 0), nil
}

// mergeParts joins per-leaf path arrays of one field (same length, same
// structure) into one array of type dt.
func mergeParts(dt arrow.DataType, parts []arrow.ArrayData) (arrow.ArrayData, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no columns for %s", ErrCorrupt, dt)
	}
	first := parts[0]
	for _, p := range parts[1:] {
		if p.Len() != first.Len() {
			return nil, fmt.Errorf("%w: sibling columns of %s have %d and %d rows", ErrCorrupt, dt, first.Len(), p.Len())
		}
	}
	switch t := dt.(type) {
	case *arrow.StructType:
		if len(parts) == 1 && arrow.TypeEqual(first.DataType(), dt) {
			first.Retain()
			return first, nil
		}
		children := make([]arrow.ArrayData, t.NumFields())
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for ci, cf := range t.Fields() {
			var group []arrow.ArrayData
			for _, p := range parts {
				pt := p.DataType().(*arrow.StructType)
				for pi, pf := range pt.Fields() {
					if pf.Name == cf.Name {
						group = append(group, p.Children()[pi])
					}
				}
			}
			if len(group) == 0 {
				return nil, fmt.Errorf("%w: no column for struct child %q", ErrCorrupt, cf.Name)
			}
			c, err := mergeParts(cf.Type, group)
			if err != nil {
				return nil, err
			}
			children[ci] = c
		}
		return array.NewData(dt, first.Len(), []*memory.Buffer{first.Buffers()[0]}, children, first.NullN(), first.Offset()), nil
	case *arrow.ListType, *arrow.LargeListType:
		group := make([]arrow.ArrayData, len(parts))
		for i, p := range parts {
			group[i] = p.Children()[0]
		}
		var et arrow.DataType
		if lt, ok := t.(*arrow.ListType); ok {
			et = lt.Elem()
		} else {
			et = t.(*arrow.LargeListType).Elem()
		}
		c, err := mergeParts(et, group)
		if err != nil {
			return nil, err
		}
		defer c.Release()
		return array.NewData(dt, first.Len(), first.Buffers(), []arrow.ArrayData{c}, first.NullN(), first.Offset()), nil
	}
	if len(parts) != 1 {
		return nil, fmt.Errorf("%w: %d columns for leaf type %s", ErrCorrupt, len(parts), dt)
	}
	first.Retain()
	return first, nil
}
