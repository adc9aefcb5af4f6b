package lancefile

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// Format 2.0 field readers: leaves decode page by page; struct header
// columns carry no validity; list offset columns map rows to item ranges.

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
