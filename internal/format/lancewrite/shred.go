package lancewrite

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
)

// A leaf accumulates the rows of one leaf column until a page is flushed.
//
// Levels are recorded as "codes" while walking: 0 = a value (or a null that
// owns a value slot at the leaf), 1+2*d = null at layer d (outer-first), 2+2*d
// = empty list at layer d. At flush time the codes actually used decide the
// page's layer kinds (a nullable field without nulls is written ALL_VALID, as
// lance does) and are mapped to def levels.
type leaf struct {
	n       *node
	path    []*node  // root .. leaf
	childI  []int    // index of path[d+1] among path[d]'s children (structs)
	listRep []uint16 // rep level of the list at layer d (0 for non-lists)
	maxRep  uint16
	inner   int // outer-first index of the innermost list layer, -1 without lists

	rows     uint64
	written  uint64   // rows already flushed as pages (priority of the next page)
	rep      []uint16 // nil without list layers
	codes    []uint16 // level codes, one per entry (nil for a column without levels so far)
	hasCodes bool     // some code != 0 was recorded
	visible  []bool   // per entry (lists only): entry owns a value slot

	nvis      int // value slots
	fixed     []byte
	bits      []byte
	offs      []int64 // variable: n+1 end offsets into data, offs[0] = 0
	data      []byte
	maxLen    int
	itemValid []byte // fsl item validity (LSB bitmap), all slots
	itemNulls bool
	nvalid    int // slots holding a non-null value
	// dict: the values are held as indices into a merged dictionary
	// (data and offs unused); nil otherwise
	dict *mergedDict
}

func newLeaf(path []*node) *leaf {
	l := &leaf{n: path[len(path)-1], path: path, inner: -1}
	l.childI = make([]int, len(path))
	l.listRep = make([]uint16, len(path))
	for d := 0; d+1 < len(path); d++ {
		for i, c := range path[d].children {
			if c == path[d+1] {
				l.childI[d] = i
			}
		}
	}
	var nl uint16
	for d, p := range path {
		if p.kind == kindList {
			nl++
			l.inner = d
		}
	}
	l.maxRep = nl
	r := nl
	for d, p := range path {
		if p.kind == kindList {
			l.listRep[d] = r
			r--
		}
	}
	l.reset()
	return l
}

func (l *leaf) reset() {
	l.rows, l.nvis, l.nvalid, l.maxLen = 0, 0, 0, 0
	l.rep, l.codes, l.visible = l.rep[:0], l.codes[:0], l.visible[:0]
	l.hasCodes, l.itemNulls = false, false
	l.fixed, l.bits, l.data, l.itemValid = l.fixed[:0], l.bits[:0], l.data[:0], l.itemValid[:0]
	l.offs = append(l.offs[:0], 0)
	l.dict = nil
}

// size estimates the buffered bytes.
func (l *leaf) size() int {
	return len(l.fixed) + len(l.bits) + len(l.data) + 8*len(l.offs) + 2*len(l.rep) + 2*len(l.codes) + len(l.visible)
}

// add appends all rows of the top-level array arr.
func (l *leaf) add(arr arrow.Array) error {
	n := arr.Len()
	if len(l.path) == 1 && l.maxRep == 0 {
		// flat column: one entry per row, every entry owns a slot
		if arr.NullN() > 0 || len(l.codes) > 0 {
			for len(l.codes) < int(l.rows) {
				l.codes = append(l.codes, 0)
			}
			for i := 0; i < n; i++ {
				if arr.IsNull(i) {
					l.codes = append(l.codes, 1)
					l.hasCodes = true
				} else {
					l.codes = append(l.codes, 0)
				}
			}
		}
		if err := l.appendValues(arr, 0, n); err != nil {
			return err
		}
		l.rows += uint64(n)
		return nil
	}
	for len(l.codes) < int(l.rows) && l.maxRep == 0 {
		l.codes = append(l.codes, 0)
	}
	for i := 0; i < n; i++ {
		if err := l.walk(0, arr, i, l.maxRep); err != nil {
			return err
		}
	}
	l.rows += uint64(n)
	return nil
}

func (l *leaf) entry(rep, code uint16, visible bool) {
	if l.maxRep > 0 {
		l.rep = append(l.rep, rep)
		l.visible = append(l.visible, visible)
	}
	l.codes = append(l.codes, code)
	if code != 0 {
		l.hasCodes = true
	}
}

func (l *leaf) walk(d int, arr arrow.Array, i int, rep uint16) error {
	if arr.IsNull(i) {
		vis := d > l.inner
		l.entry(rep, uint16(1+2*d), vis)
		if vis {
			l.appendNullSlot()
		}
		return nil
	}
	p := l.path[d]
	switch p.kind {
	case kindStruct:
		st, ok := arr.(*array.Struct)
		if !ok {
			return fmt.Errorf("%w: field %q: want struct array, got %s", ErrTypeMismatch, p.f.Name, arr.DataType())
		}
		return l.walk(d+1, st.Field(l.childI[d]), i, rep)
	case kindList:
		var start, end int64
		var child arrow.Array
		switch la := arr.(type) {
		case *array.List:
			start, end = la.ValueOffsets(i)
			child = la.ListValues()
		case *array.LargeList:
			start, end = la.ValueOffsets(i)
			child = la.ListValues()
		default:
			return fmt.Errorf("%w: field %q: want list array, got %s", ErrTypeMismatch, p.f.Name, arr.DataType())
		}
		if start == end {
			l.entry(rep, uint16(2+2*d), false)
			return nil
		}
		for k := start; k < end; k++ {
			r := rep
			if k > start {
				r = l.listRep[d] - 1
			}
			if err := l.walk(d+1, child, int(k), r); err != nil {
				return err
			}
		}
		return nil
	}
	l.entry(rep, 0, true)
	return l.appendValues(arr, i, i+1)
}

// appendNullSlot adds a value slot for a null (zeros / empty).
func (l *leaf) appendNullSlot() {
	l.nvis++
	switch l.n.vk {
	case valFixed:
		l.fixed = append(l.fixed, make([]byte, l.n.width)...)
	case valBool:
		l.growBits(l.nvis)
	case valVariable:
		l.offs = append(l.offs, int64(len(l.data)))
	case valFSL:
		l.fixed = append(l.fixed, make([]byte, l.n.width*l.n.dim)...)
		l.growItemValid(l.nvis*l.n.dim, true, (l.nvis-1)*l.n.dim)
	}
}

func (l *leaf) growBits(n int) {
	need := int(bitutil.BytesForBits(int64(n)))
	if k := need - len(l.bits); k > 0 {
		l.bits = append(l.bits, make([]byte, k)...)
	}
}

// growItemValid extends the item validity bitmap to n bits, marking bits
// from `from` valid if valid is set.
func (l *leaf) growItemValid(n int, valid bool, from int) {
	need := int(bitutil.BytesForBits(int64(n)))
	if k := need - len(l.itemValid); k > 0 {
		l.itemValid = append(l.itemValid, make([]byte, k)...)
	}
	if valid && n > from {
		bitutil.SetBitsTo(l.itemValid, int64(from), int64(n-from), true)
	}
}

// appendValues appends value slots for rows [from, to) of the leaf array a.
// Null rows get zero / empty slots.
func (l *leaf) appendValues(a arrow.Array, from, to int) error {
	if to <= from {
		return nil
	}
	var err error
	switch l.n.vk {
	case valNull:
	case valFixed:
		err = l.appendFixed(a, from, to)
	case valBool:
		err = l.appendBool(a, from, to)
	case valVariable:
		err = l.appendVariable(a, from, to)
	case valFSL:
		err = l.appendFSL(a, from, to)
	}
	if err != nil {
		return err
	}
	l.nvis += to - from
	return nil
}

// appendFixed appends fixed-width values, a null slot zeroed.
func (l *leaf) appendFixed(a arrow.Array, from, to int) error {
	data := a.Data()
	bufs := data.Buffers()
	if len(bufs) < 2 || bufs[1] == nil {
		return fmt.Errorf("%w: field %q: no value buffer", ErrTypeMismatch, l.n.f.Name)
	}
	w, off := l.n.width, data.Offset()
	src := bufs[1].Bytes()[(off+from)*w : (off+to)*w]
	start := len(l.fixed)
	l.fixed = append(grow(l.fixed, len(src)), src...)
	if a.NullN() == 0 {
		l.nvalid += to - from
		return nil
	}
	for i := from; i < to; i++ {
		if a.IsNull(i) {
			clear(l.fixed[start+(i-from)*w : start+(i-from+1)*w])
		} else {
			l.nvalid++
		}
	}
	return nil
}

// appendBool appends booleans as bits, a null slot cleared.
func (l *leaf) appendBool(a arrow.Array, from, to int) error {
	b, ok := a.(*array.Boolean)
	if !ok {
		return fmt.Errorf("%w: field %q: want bool array, got %s", ErrTypeMismatch, l.n.f.Name, a.DataType())
	}
	base := l.nvis
	l.growBits(base + to - from)
	for i := from; i < to; i++ {
		if b.IsValid(i) {
			l.nvalid++
			if b.Value(i) {
				bitutil.SetBit(l.bits, base+i-from)
			}
		}
	}
	return nil
}

// appendVariable appends variable-width values (strings, binaries, 32- or
// 64-bit offsets) to data with their end offsets, a null slot empty.
func (l *leaf) appendVariable(a arrow.Array, from, to int) error {
	data := a.Data()
	bufs := data.Buffers()
	if len(bufs) < 3 || bufs[1] == nil {
		return fmt.Errorf("%w: field %q: no offsets buffer", ErrTypeMismatch, l.n.f.Name)
	}
	var vals []byte
	if bufs[2] != nil {
		vals = bufs[2].Bytes()
	}
	ob := bufs[1].Bytes()
	large := false
	switch a.DataType().ID() {
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		large = true
	}
	at := func(k int) int64 {
		if large {
			return int64(binary.LittleEndian.Uint64(ob[8*k:]))
		}
		return int64(int32(binary.LittleEndian.Uint32(ob[4*k:])))
	}
	off, nulls := data.Offset(), a.NullN() > 0
	l.offs = grow(l.offs, to-from)
	s0, e0 := at(off+from), at(off+to)
	if s0 >= 0 && e0 >= s0 && e0 <= int64(len(vals)) {
		l.data = grow(l.data, int(e0-s0))
	}
	if !nulls && s0 >= 0 && e0 >= s0 && e0 <= int64(len(vals)) {
		// the values are one run of bytes: copy it whole, then shift
		// their offsets, checking that they ascend within it
		base := int64(len(l.data)) - s0
		prev := s0
		for i := from + 1; i <= to; i++ {
			e := at(off + i)
			if e < prev || e > e0 {
				return fmt.Errorf("%w: field %q: bad offsets", ErrTypeMismatch, l.n.f.Name)
			}
			if int(e-prev) > l.maxLen {
				l.maxLen = int(e - prev)
			}
			l.offs = append(l.offs, base+e)
			prev = e
		}
		l.data = append(l.data, vals[s0:e0]...)
		l.nvalid += to - from
		return nil
	}
	for i := from; i < to; i++ {
		if nulls && a.IsNull(i) {
			l.offs = append(l.offs, int64(len(l.data)))
			continue
		}
		s, e := at(off+i), at(off+i+1)
		if s < 0 || e < s || e > int64(len(vals)) {
			return fmt.Errorf("%w: field %q: bad offsets", ErrTypeMismatch, l.n.f.Name)
		}
		l.data = append(l.data, vals[s:e]...)
		l.offs = append(l.offs, int64(len(l.data)))
		if int(e-s) > l.maxLen {
			l.maxLen = int(e - s)
		}
		l.nvalid++
	}
	return nil
}

// appendFSL appends fixed-size lists of fixed-width items, with per-item
// validity; a null list or item is zeroed.
func (l *leaf) appendFSL(a arrow.Array, from, to int) error {
	fa, ok := a.(*array.FixedSizeList)
	if !ok {
		return fmt.Errorf("%w: field %q: want fixed_size_list array, got %s", ErrTypeMismatch, l.n.f.Name, a.DataType())
	}
	dim, w := l.n.dim, l.n.width
	items := fa.ListValues()
	ibufs := items.Data().Buffers()
	if len(ibufs) < 2 || ibufs[1] == nil {
		return fmt.Errorf("%w: field %q: no item buffer", ErrTypeMismatch, l.n.f.Name)
	}
	ioff := items.Data().Offset()
	raw := ibufs[1].Bytes()
	nulls, itemNulls := a.NullN() > 0, items.NullN() > 0
	count := to - from
	l.fixed = grow(l.fixed, count*dim*w)
	if !nulls && !itemNulls {
		// one contiguous run of items: copy it whole
		s, _ := fa.ValueOffsets(from)
		l.fixed = append(l.fixed, raw[(ioff+int(s))*w:(ioff+int(s)+count*dim)*w]...)
		l.growItemValid((l.nvis+count)*dim, true, l.nvis*dim)
		l.nvalid += count
		return nil
	}
	for i := from; i < to; i++ {
		slot := l.nvis + i - from
		if nulls && fa.IsNull(i) {
			l.fixed = append(l.fixed, make([]byte, dim*w)...)
			l.growItemValid((slot+1)*dim, true, slot*dim)
			continue
		}
		l.nvalid++
		s, _ := fa.ValueOffsets(i)
		src := raw[(ioff+int(s))*w : (ioff+int(s)+dim)*w]
		start := len(l.fixed)
		l.fixed = append(l.fixed, src...)
		l.growItemValid((slot+1)*dim, true, slot*dim)
		if itemNulls {
			for k := 0; k < dim; k++ {
				if items.IsNull(int(s) + k) {
					bitutil.ClearBit(l.itemValid, slot*dim+k)
					clear(l.fixed[start+k*w : start+(k+1)*w])
					l.itemNulls = true
				}
			}
		}
	}
	return nil
}

// reserve sizes the value buffers of a flat fixed-width or variable-width
// leaf for rows more rows, as far as one page of pageBytes holds them, so
// they fill without being copied to larger ones on the way (a fresh
// buffer's memory is only touched as it fills).
func (l *leaf) reserve(rows uint64, pageBytes int) {
	if len(l.path) != 1 || l.maxRep != 0 || rows == 0 {
		return
	}
	limit := uint64(pageBytes + pageBytes/8)
	switch l.n.vk {
	case valFixed:
		w := uint64(l.n.width)
		l.fixed = grow(l.fixed, int(min(rows*w, limit)))
	case valVariable:
		l.offs = grow(l.offs, int(min(rows, limit/8)))
	}
}

// grow makes room for n more elements, at least doubling the capacity when
// it must reallocate. A page buffer fills batch by batch up to PageBytes;
// append's growth for large slices (~1.25x) copied each buffer about five
// times over on the way there, doubling copies it about once. Doubling past
// DefaultPageBytes would leave a buffer that becomes a page just above it
// with twice the memory it needs (kept for every later page of the
// column), so a doubling that crosses it stops at DefaultPageBytes + 1/8.
func grow[E any](s []E, n int) []E {
	if n <= cap(s)-len(s) {
		return s
	}
	c := max(len(s)+n, 2*cap(s), 512)
	var e E
	if page := DefaultPageBytes / max(1, int(unsafe.Sizeof(e))); c > page && len(s)+n <= page+page/8 {
		c = page + page/8
	}
	ns := make([]E, len(s), c)
	copy(ns, s)
	return ns
}
