package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc20pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// Format 2.0: one column per field in pre-order (struct header columns,
// list offset columns, leaves); page encodings are lance.encodings.ArrayEncoding
// trees (Nullable, Flat, Binary, Dictionary, FixedSizeList, List, SimpleStruct).

func (f *File) arrayEncoding(ci, pi int) (*enc20pb.ArrayEncoding, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	a, err := PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, err
	}
	if anyTypeName(a) != typeURLArrayEnc20 {
		return nil, fmt.Errorf("%w: page encoding %q in a 2.0 file", ErrUnsupportedEncoding, a.GetTypeUrl())
	}
	ae := &enc20pb.ArrayEncoding{}
	if err := proto.Unmarshal(a.GetValue(), ae); err != nil {
		return nil, fmt.Errorf("%w: decode array encoding: %v", ErrCorrupt, err)
	}
	return ae, nil
}

// page20 is a decoded 2.0 leaf page.
type page20 struct {
	vals  values
	valid []byte // one byte per value, nil = all valid
}

type dec20 struct {
	f       *File
	ci      int
	pageBuf [][]byte
}

func (d *dec20) buffer(b *enc20pb.Buffer) ([]byte, error) {
	i := int(b.GetBufferIndex())
	switch b.GetBufferType() {
	case enc20pb.Buffer_page:
		if i >= len(d.pageBuf) {
			return nil, fmt.Errorf("%w: page buffer %d of %d", ErrCorrupt, i, len(d.pageBuf))
		}
		return d.pageBuf[i], nil
	case enc20pb.Buffer_column:
		cm := d.f.Columns[d.ci].Meta
		if i >= len(cm.GetBufferOffsets()) {
			return nil, fmt.Errorf("%w: column buffer %d of %d", ErrCorrupt, i, len(cm.GetBufferOffsets()))
		}
		return d.f.ReadBuffer(Buffer{cm.GetBufferOffsets()[i], cm.GetBufferSizes()[i]})
	}
	return nil, fmt.Errorf("%w: buffer type %v", ErrUnsupportedEncoding, b.GetBufferType())
}

// decode decodes n values of an ArrayEncoding into a value store and an
// optional validity (one byte per value).
func (d *dec20) decode(ae *enc20pb.ArrayEncoding, n int) (*page20, error) {
	switch e := ae.GetArrayEncoding().(type) {
	case *enc20pb.ArrayEncoding_Nullable:
		switch nn := e.Nullable.GetNullability().(type) {
		case *enc20pb.Nullable_NoNulls:
			return d.decode(nn.NoNulls.GetValues(), n)
		case *enc20pb.Nullable_AllNulls:
			return &page20{vals: values{allNull: true, n: n}}, nil
		case *enc20pb.Nullable_SomeNulls:
			v, err := d.decode(nn.SomeNulls.GetValidity(), n)
			if err != nil {
				return nil, fmt.Errorf("validity: %w", err)
			}
			if v.vals.kind != kindBool {
				return nil, fmt.Errorf("%w: validity is not a bitmap", ErrCorrupt)
			}
			p, err := d.decode(nn.SomeNulls.GetValues(), n)
			if err != nil {
				return nil, err
			}
			p.valid = v.vals.data
			return p, nil
		}
		return nil, fmt.Errorf("%w: nullable without nullability", ErrCorrupt)
	case *enc20pb.ArrayEncoding_Flat:
		fl := e.Flat
		if c := fl.GetCompression(); c != nil && c.GetScheme() != "" {
			return nil, fmt.Errorf("%w: 2.0 flat compression %q", ErrUnsupportedEncoding, c.GetScheme())
		}
		b, err := d.buffer(fl.GetBuffer())
		if err != nil {
			return nil, err
		}
		p := &page20{}
		bits := fl.GetBitsPerValue()
		switch {
		case bits == 1:
			err = p.vals.appendBits(b, n)
		case bits > 0 && bits%8 == 0:
			err = p.vals.appendFixed(b, int(bits/8), n)
		default:
			err = fmt.Errorf("%w: flat of %d bits", ErrUnsupportedEncoding, bits)
		}
		if err != nil {
			return nil, err
		}
		return p, nil
	case *enc20pb.ArrayEncoding_FixedSizeList:
		dim := int(e.FixedSizeList.GetDimension())
		if dim <= 0 || dim > 1<<20 {
			return nil, fmt.Errorf("%w: fixed size list of %d items", ErrCorrupt, dim)
		}
		items, err := d.decode(e.FixedSizeList.GetItems(), n*dim)
		if err != nil {
			return nil, err
		}
		if items.vals.allNull {
			return nil, fmt.Errorf("%w: all-null fixed size list items", ErrUnsupportedEncoding)
		}
		p := &page20{}
		p.vals = items.vals
		p.vals.fslDims = []int{dim}
		p.vals.fslValid = [][]byte{items.valid}
		p.vals.n = n
		if items.vals.kind == kindBool {
			p.vals.kind, p.vals.width = kindFixed, dim
		} else {
			p.vals.width *= dim
		}
		return p, nil
	case *enc20pb.ArrayEncoding_Binary:
		return d.binary(e.Binary, n)
	case *enc20pb.ArrayEncoding_Dictionary:
		idx, err := d.decode(e.Dictionary.GetIndices(), n)
		if err != nil {
			return nil, fmt.Errorf("dictionary indices: %w", err)
		}
		items, err := d.decode(e.Dictionary.GetItems(), int(e.Dictionary.GetNumDictionaryItems()))
		if err != nil {
			return nil, fmt.Errorf("dictionary items: %w", err)
		}
		if idx.vals.kind != kindFixed || idx.vals.width > 8 {
			return nil, fmt.Errorf("%w: dictionary indices are not integers", ErrCorrupt)
		}
		p := &page20{valid: make([]byte, n)}
		for i := 0; i < n; i++ {
			k := leUint(idx.vals.fixedAt(i))
			if k == 0 || (idx.valid != nil && idx.valid[i] == 0) {
				if err := p.vals.setKind(items.vals.kind, items.vals.width); err != nil {
					return nil, err
				}
				if items.vals.kind == kindVariable {
					p.vals.offs = append(p.vals.offs, int64(len(p.vals.data)))
				} else {
					p.vals.data = append(p.vals.data, make([]byte, max(items.vals.width, 1))...)
				}
				p.vals.n++
				continue
			}
			k--
			if k >= uint64(items.vals.n) {
				return nil, fmt.Errorf("%w: dictionary index %d of %d items", ErrCorrupt, k+1, items.vals.n)
			}
			p.valid[i] = 1
			if items.valid != nil && items.valid[k] == 0 {
				p.valid[i] = 0
			}
			if items.vals.kind == kindVariable {
				err = p.vals.appendVar(items.vals.value(int(k)))
			} else {
				err = p.vals.appendFixed(items.vals.fixedAt(int(k)), items.vals.width, 1)
			}
			if err != nil {
				return nil, err
			}
		}
		return p, nil
	case *enc20pb.ArrayEncoding_Fsst:
		dec, err := codec.NewFSSTDecoder(e.Fsst.GetSymbolTable())
		if err != nil {
			return nil, err
		}
		inner, err := d.decode(e.Fsst.GetBinary(), n)
		if err != nil {
			return nil, err
		}
		if inner.vals.kind != kindVariable {
			return inner, nil
		}
		p := &page20{valid: inner.valid}
		for i := 0; i < n; i++ {
			b, err := dec.Decode(nil, inner.vals.value(i))
			if err != nil {
				return nil, err
			}
			if err := p.vals.appendVar(b); err != nil {
				return nil, err
			}
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w: 2.0 array encoding %T", ErrUnsupportedEncoding, ae.GetArrayEncoding())
}

func leUint(b []byte) uint64 {
	var x [8]byte
	copy(x[:], b)
	return binary.LittleEndian.Uint64(x[:])
}

// binary decodes u64 end offsets (null: end + null_adjustment) and bytes.
func (d *dec20) binary(b *enc20pb.Binary, n int) (*page20, error) {
	idx, err := d.decode(b.GetIndices(), n)
	if err != nil {
		return nil, fmt.Errorf("binary indices: %w", err)
	}
	if idx.vals.kind != kindFixed || idx.vals.width > 8 {
		return nil, fmt.Errorf("%w: binary indices are not integers", ErrCorrupt)
	}
	fl := b.GetBytes().GetFlat()
	if fl == nil {
		return nil, fmt.Errorf("%w: binary bytes encoded as %T", ErrUnsupportedEncoding, b.GetBytes().GetArrayEncoding())
	}
	data, err := d.buffer(fl.GetBuffer())
	if err != nil {
		return nil, err
	}
	adj := b.GetNullAdjustment()
	p := &page20{}
	start := uint64(0)
	if err := p.vals.setKind(kindVariable, 0); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		e := leUint(idx.vals.fixedAt(i))
		null := adj > 0 && e >= adj
		if null {
			e -= adj
			if p.valid == nil {
				p.valid = ones(n)
			}
			p.valid[i] = 0
		}
		if e < start || e > uint64(len(data)) {
			return nil, fmt.Errorf("%w: binary offset %d = %d out of range (start %d, %d bytes)", ErrCorrupt, i, e, start, len(data))
		}
		if !null {
			p.vals.data = append(p.vals.data, data[start:e]...)
		}
		p.vals.offs = append(p.vals.offs, int64(len(p.vals.data)))
		p.vals.n++
		start = e
	}
	return p, nil
}

// column20 reads one 2.0 column page by page.
type column20 struct {
	f         *File
	ci        int
	pageStart []uint64
	cur       *page20
	curList   *listPage20
	curIdx    int
}

func (f *File) newColumn20(ci int) *column20 {
	c := &column20{f: f, ci: ci, curIdx: -1}
	c.pageStart = append(c.pageStart, 0)
	for _, p := range f.Columns[ci].Meta.GetPages() {
		c.pageStart = append(c.pageStart, c.pageStart[len(c.pageStart)-1]+p.GetLength())
	}
	return c
}

func (c *column20) pageBuffers(pi int) ([][]byte, error) {
	pg := c.f.Columns[c.ci].Meta.GetPages()[pi]
	bufs := make([][]byte, len(pg.GetBufferOffsets()))
	for i, b := range PageBuffers(pg) {
		var err error
		if bufs[i], err = c.f.ReadBuffer(b); err != nil {
			return nil, err
		}
	}
	return bufs, nil
}

func (c *column20) leafPage(pi int) (*page20, error) {
	if pi == c.curIdx && c.cur != nil {
		return c.cur, nil
	}
	ae, err := c.f.arrayEncoding(c.ci, pi)
	if err != nil {
		return nil, err
	}
	bufs, err := c.pageBuffers(pi)
	if err != nil {
		return nil, err
	}
	d := &dec20{f: c.f, ci: c.ci, pageBuf: bufs}
	n := int(c.pageStart[pi+1] - c.pageStart[pi])
	p, err := d.decode(ae, n)
	if err != nil {
		return nil, wrapCorrupt(err)
	}
	if p.vals.n != n {
		return nil, fmt.Errorf("%w: decoded %d values, page length %d", ErrCorrupt, p.vals.n, n)
	}
	c.cur, c.curIdx = p, pi
	return p, nil
}

// pagesFor iterates the pages overlapping rows [a,b).
func (c *column20) pagesFor(a, b uint64, fn func(pi int, lo, hi int) error) error {
	np := len(c.pageStart) - 1
	pi, _ := slices.BinarySearch(c.pageStart, a+1)
	for pi = max(pi-1, 0); pi < np && c.pageStart[pi] < b; pi++ {
		if c.pageStart[pi+1] <= a {
			continue
		}
		lo := max(a, c.pageStart[pi]) - c.pageStart[pi]
		hi := min(b, c.pageStart[pi+1]) - c.pageStart[pi]
		if err := fn(pi, int(lo), int(hi)); err != nil {
			return fmt.Errorf("%s: column %d page %d: %w", c.f.name, c.ci, pi, err)
		}
	}
	return nil
}

type leafReader20 struct {
	col *column20
	dt  arrow.DataType
}

func (r *leafReader20) read(a, b uint64) (arrow.ArrayData, error) {
	if a >= b {
		return emptyData(r.dt), nil
	}
	var parts []arrow.ArrayData
	err := r.col.pagesFor(a, b, func(pi, lo, hi int) error {
		p, err := r.col.leafPage(pi)
		if err != nil {
			return err
		}
		var valid *bitmap
		if p.valid != nil {
			valid = newBitmap(hi - lo)
			for i := lo; i < hi; i++ {
				valid.set(i-lo, p.valid[i] != 0)
			}
		}
		d, err := buildLeaf(r.dt, &p.vals, lo, hi, valid)
		if err != nil {
			return err
		}
		parts = append(parts, d)
		return nil
	})
	if err != nil {
		for _, p := range parts {
			p.Release()
		}
		return nil, err
	}
	return concatData(parts)
}

type structReader20 struct {
	dt       *arrow.StructType
	children []fieldReader
}

func (r *structReader20) read(a, b uint64) (arrow.ArrayData, error) {
	kids := make([]arrow.ArrayData, len(r.children))
	defer func() {
		for _, k := range kids {
			if k != nil {
				k.Release()
			}
		}
	}()
	for i, c := range r.children {
		d, err := c.read(a, b)
		if err != nil {
			return nil, err
		}
		kids[i] = d
	}
	return array.NewData(r.dt, int(b-a), []*memory.Buffer{nil}, kids, 0, 0), nil
}

// listPage20 is a decoded page of a 2.0 list offsets column.
type listPage20 struct {
	ends  []uint64 // page-relative end offsets, null adjustment removed
	null  []bool
	base  uint64 // items before this page
	items uint64
}

type listReader20 struct {
	col   *column20
	dt    arrow.DataType
	item  fieldReader
	bases []uint64 // per page: items in previous pages
}

func (r *listReader20) page(pi int) (*listPage20, error) {
	c := r.col
	if pi == c.curIdx && c.curList != nil {
		return c.curList, nil
	}
	ae, err := c.f.arrayEncoding(c.ci, pi)
	if err != nil {
		return nil, err
	}
	l := ae.GetList()
	if l == nil {
		return nil, fmt.Errorf("%w: list column page encoded as %T", ErrCorrupt, ae.GetArrayEncoding())
	}
	bufs, err := c.pageBuffers(pi)
	if err != nil {
		return nil, err
	}
	n := int(c.pageStart[pi+1] - c.pageStart[pi])
	d := &dec20{f: c.f, ci: c.ci, pageBuf: bufs}
	offs, err := d.decode(l.GetOffsets(), n)
	if err != nil {
		return nil, wrapCorrupt(err)
	}
	if offs.vals.kind != kindFixed || offs.vals.width > 8 || offs.vals.n != n {
		return nil, fmt.Errorf("%w: list offsets are not %d integers", ErrCorrupt, n)
	}
	lp := &listPage20{ends: make([]uint64, n), null: make([]bool, n), base: r.bases[pi], items: l.GetNumItems()}
	adj := l.GetNullOffsetAdjustment()
	prev := uint64(0)
	for i := 0; i < n; i++ {
		e := leUint(offs.vals.fixedAt(i))
		if adj > 0 && e >= adj {
			e -= adj
			lp.null[i] = true
		}
		if e < prev || e > lp.items {
			return nil, fmt.Errorf("%w: list offset %d = %d out of range (prev %d, %d items)", ErrCorrupt, i, e, prev, lp.items)
		}
		lp.ends[i] = e
		prev = e
	}
	c.curList, c.curIdx = lp, pi
	return lp, nil
}

func (r *listReader20) read(a, b uint64) (arrow.ArrayData, error) {
	if a >= b {
		return emptyData(r.dt), nil
	}
	n := int(b - a)
	offsets := make([]int64, 0, n+1)
	valid := newBitmap(n)
	var itemA, itemB uint64
	first := true
	row := 0
	err := r.col.pagesFor(a, b, func(pi, lo, hi int) error {
		lp, err := r.page(pi)
		if err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			s := uint64(0)
			if i > 0 {
				s = lp.ends[i-1]
			}
			if first {
				itemA = lp.base + s
				offsets = append(offsets, 0)
				first = false
			}
			if lp.base+s != itemB && row > 0 {
				return fmt.Errorf("%w: list items are not contiguous across pages", ErrCorrupt)
			}
			itemB = lp.base + lp.ends[i]
			offsets = append(offsets, int64(itemB-itemA))
			valid.set(row, !lp.null[i])
			row++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	child, err := r.item.read(itemA, itemB)
	if err != nil {
		return nil, err
	}
	defer child.Release()
	var offBuf *memory.Buffer
	if _, ok := r.dt.(*arrow.LargeListType); ok {
		offBuf = memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(offsets))
	} else {
		o32 := make([]int32, len(offsets))
		for i, o := range offsets {
			if o > 1<<31-1 {
				return nil, fmt.Errorf("%w: list of more than 2^31 items in one batch", ErrUnsupportedEncoding)
			}
			o32[i] = int32(o)
		}
		offBuf = memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(o32))
	}
	return array.NewData(r.dt, n, []*memory.Buffer{valid.buffer(), offBuf}, []arrow.ArrayData{child}, valid.nullCount(), 0), nil
}

func (f *File) newFieldReader20(tree *fieldTree, fl *filepb.Field, af arrow.Field) (fieldReader, error) {
	ci := f.ColumnForField(fl.GetId())
	if ci < 0 {
		return nil, fmt.Errorf("%w: %s: no column for field %d (%q)", ErrCorrupt, f.name, fl.GetId(), fl.GetName())
	}
	kids := tree.children[fl.GetId()]
	switch t := af.Type.(type) {
	case *arrow.StructType:
		r := &structReader20{dt: t}
		for i, k := range kids {
			c, err := f.newFieldReader20(tree, k, t.Field(i))
			if err != nil {
				return nil, err
			}
			r.children = append(r.children, c)
		}
		return r, nil
	case *arrow.ListType, *arrow.LargeListType:
		var ef arrow.Field
		if lt, ok := t.(*arrow.ListType); ok {
			ef = lt.ElemField()
		} else {
			ef = t.(*arrow.LargeListType).ElemField()
		}
		item, err := f.newFieldReader20(tree, kids[0], ef)
		if err != nil {
			return nil, err
		}
		r := &listReader20{col: f.newColumn20(ci), dt: t, item: item}
		var base uint64
		for pi := range f.Columns[ci].Meta.GetPages() {
			r.bases = append(r.bases, base)
			ae, err := f.arrayEncoding(ci, pi)
			if err != nil {
				return nil, fmt.Errorf("%s: column %d page %d: %w", f.name, ci, pi, err)
			}
			base += ae.GetList().GetNumItems()
		}
		if ic := f.ColumnForField(kids[0].GetId()); ic < 0 || f.Columns[ic].Rows != base {
			return nil, fmt.Errorf("%w: %s: list column %d holds %d items, its item column has a different row count", ErrCorrupt, f.name, ci, base)
		}
		return r, nil
	}
	return &leafReader20{col: f.newColumn20(ci), dt: af.Type}, nil
}
