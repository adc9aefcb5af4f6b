package lancewrite

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"

	"github.com/lanced-dev/lanced/internal/format/pb/enc20pb"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
)

// Format 2.0 (footer 0.3): one column per field in pre-order. Struct fields
// get a header column (one SimpleStruct page spanning the file, no
// buffers; 2.0 stores no struct validity), lists a column of u64 end
// offsets per row (page-relative; a null list adds null_offset_adjustment),
// leaves Nullable{Flat}, Binary (u64 end offsets + bytes) or
// FixedSizeList pages — the encodings lance's 2.0 writer uses.

type col20 struct {
	n       *node
	cm      *file2pb.ColumnMetadata
	rows    uint64 // entries buffered
	written uint64 // entries flushed
	valid   []byte // validity bitmap of the buffered entries
	nulls   int
	val     *leaf // leaf values (reuses the 2.1 value buffers)
	lens    []uint64
}

type writer20 struct {
	c         *container
	cols      []*col20
	roots     []*node
	pageBytes int
	rows      uint64
}

func newWriter20(c *container, roots []*node, pageBytes int) *writer20 {
	w := &writer20{c: c, roots: roots, pageBytes: pageBytes}
	var walk func(n *node)
	walk = func(n *node) {
		n.col = len(w.cols)
		cc := &col20{n: n, cm: &file2pb.ColumnMetadata{Encoding: directEncoding(columnEncodingBytes)}}
		if n.kind == kindLeaf {
			cc.val = newLeaf([]*node{n})
		}
		w.cols = append(w.cols, cc)
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return w
}

func (c *col20) size() int {
	s := len(c.valid) + 8*len(c.lens)
	if c.val != nil {
		s += c.val.size()
	}
	return s
}

func (c *col20) appendValid(ok bool) {
	i := int(c.rows)
	for len(c.valid) <= i/8 {
		c.valid = append(c.valid, 0)
	}
	if ok {
		bitutil.SetBit(c.valid, i)
	} else {
		c.nulls++
	}
	c.rows++
}

func (w *writer20) add(rec arrow.Record) error {
	for i, r := range w.roots {
		col := rec.Column(i)
		if err := w.addArray(r, col, 0, col.Len()); err != nil {
			return fmt.Errorf("column %q: %w", r.f.Name, err)
		}
	}
	w.rows += uint64(rec.NumRows())
	for _, c := range w.cols {
		if c.n.kind != kindStruct && c.size() >= w.pageBytes {
			if err := w.flush(c); err != nil {
				return err
			}
		}
	}
	return w.c.err
}

// addArray appends entries [from, to) of arr to n's column and its children.
func (w *writer20) addArray(n *node, arr arrow.Array, from, to int) error {
	c := w.cols[n.col]
	switch n.kind {
	case kindStruct:
		st, ok := arr.(*array.Struct)
		if !ok {
			return fmt.Errorf("%w: field %q: want struct array, got %s", ErrTypeMismatch, n.f.Name, arr.DataType())
		}
		c.rows += uint64(to - from)
		for i, ch := range n.children {
			if err := w.addArray(ch, st.Field(i), from, to); err != nil {
				return err
			}
		}
		return nil
	case kindList:
		var child arrow.Array
		var offsets func(i int) (int64, int64)
		switch la := arr.(type) {
		case *array.List:
			child, offsets = la.ListValues(), la.ValueOffsets
		case *array.LargeList:
			child, offsets = la.ListValues(), la.ValueOffsets
		default:
			return fmt.Errorf("%w: field %q: want list array, got %s", ErrTypeMismatch, n.f.Name, arr.DataType())
		}
		runS, runE := int64(-1), int64(-1)
		for i := from; i < to; i++ {
			if arr.IsNull(i) {
				c.lens = append(c.lens, 0)
				c.appendValid(false)
				continue
			}
			s, e := offsets(i)
			c.lens = append(c.lens, uint64(e-s))
			c.appendValid(true)
			if s == e {
				continue
			}
			if s != runE {
				if runS >= 0 {
					if err := w.addArray(n.children[0], child, int(runS), int(runE)); err != nil {
						return err
					}
				}
				runS = s
			}
			runE = e
		}
		if runS >= 0 {
			return w.addArray(n.children[0], child, int(runS), int(runE))
		}
		return nil
	}
	for i := from; i < to; i++ {
		c.appendValid(arr.IsValid(i))
	}
	return c.val.appendValues(arr, from, to)
}

func ae(x any) *enc20pb.ArrayEncoding {
	switch v := x.(type) {
	case *enc20pb.ArrayEncoding_Flat:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_Nullable:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_List:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_Binary:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_FixedSizeList:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_Struct:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	case *enc20pb.ArrayEncoding_Dictionary:
		return &enc20pb.ArrayEncoding{ArrayEncoding: v}
	}
	panic(fmt.Sprintf("lancewrite: ae: unexpected %T", x))
}

func flat20(bitsPer, buf int) *enc20pb.ArrayEncoding {
	return ae(&enc20pb.ArrayEncoding_Flat{Flat: &enc20pb.Flat{BitsPerValue: uint64(bitsPer), Buffer: &enc20pb.Buffer{BufferIndex: uint32(buf)}}})
}

// nullable20 wraps values in Nullable; values use buffers from next on,
// the validity (if any) takes buffer `next` first.
func nullable20(c *col20, bufs [][]byte, values func(bufs [][]byte) (*enc20pb.ArrayEncoding, [][]byte)) (*enc20pb.ArrayEncoding, [][]byte) {
	switch {
	case c.nulls == 0:
		v, bufs := values(bufs)
		return ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_NoNulls{NoNulls: &enc20pb.Nullable_NoNull{Values: v}}}}), bufs
	case c.nulls == int(c.rows):
		return ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_AllNulls{AllNulls: &enc20pb.Nullable_AllNull{}}}}), bufs
	}
	vi := len(bufs)
	bufs = append(bufs, c.valid[:bitutil.BytesForBits(int64(c.rows))])
	v, bufs := values(bufs)
	return ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_SomeNulls{SomeNulls: &enc20pb.Nullable_SomeNull{
		Validity: flat20(1, vi), Values: v}}}}), bufs
}

func u64s(v []uint64) []byte {
	out := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(out[8*i:], x)
	}
	return out
}

// flush writes the buffered entries of a (non-struct) column as one page.
func (w *writer20) flush(c *col20) error {
	if c.rows == 0 {
		return nil
	}
	var enc *enc20pb.ArrayEncoding
	var bufs [][]byte
	switch c.n.kind {
	case kindList:
		var total uint64
		for _, l := range c.lens {
			total += l
		}
		adj := total + 1
		ends := make([]uint64, len(c.lens))
		var end uint64
		for i, l := range c.lens {
			end += l
			ends[i] = end
			if !bitutil.BitIsSet(c.valid, i) {
				ends[i] += adj
			}
		}
		offs := ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_NoNulls{NoNulls: &enc20pb.Nullable_NoNull{Values: flat20(64, 0)}}}})
		enc = ae(&enc20pb.ArrayEncoding_List{List: &enc20pb.List{Offsets: offs, NullOffsetAdjustment: adj, NumItems: total}})
		bufs = [][]byte{u64s(ends)}
	default:
		l := c.val
		switch l.n.vk {
		case valFixed:
			enc, bufs = nullable20(c, nil, func(b [][]byte) (*enc20pb.ArrayEncoding, [][]byte) {
				return flat20(8*l.n.width, len(b)), append(b, l.fixed)
			})
		case valBool:
			enc, bufs = nullable20(c, nil, func(b [][]byte) (*enc20pb.ArrayEncoding, [][]byte) {
				return flat20(1, len(b)), append(b, l.bits[:bitutil.BytesForBits(int64(l.nvis))])
			})
		case valNull:
			enc = ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_AllNulls{AllNulls: &enc20pb.Nullable_AllNull{}}}})
		case valVariable:
			if e, b, ok := dictionary20(c); ok {
				enc, bufs = e, b
				break
			}
			total := uint64(len(l.data))
			adj := total + 1
			ends := make([]uint64, l.nvis)
			for i := range ends {
				ends[i] = uint64(l.offs[i+1])
				if !bitutil.BitIsSet(c.valid, i) {
					ends[i] += adj
				}
			}
			idx := ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_NoNulls{NoNulls: &enc20pb.Nullable_NoNull{Values: flat20(64, 0)}}}})
			enc = ae(&enc20pb.ArrayEncoding_Binary{Binary: &enc20pb.Binary{Indices: idx, Bytes: flat20(8, 1), NullAdjustment: adj}})
			bufs = [][]byte{u64s(ends), l.data}
		case valFSL:
			enc, bufs = nullable20(c, nil, func(b [][]byte) (*enc20pb.ArrayEncoding, [][]byte) {
				var items *enc20pb.ArrayEncoding
				if l.itemNulls {
					vi := len(b)
					b = append(b, l.itemValid[:bitutil.BytesForBits(int64(l.nvis*l.n.dim))])
					items = ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_SomeNulls{SomeNulls: &enc20pb.Nullable_SomeNull{
						Validity: flat20(1, vi), Values: flat20(8*l.n.width, len(b))}}}})
				} else {
					items = ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_NoNulls{NoNulls: &enc20pb.Nullable_NoNull{Values: flat20(8*l.n.width, len(b))}}}})
				}
				b = append(b, l.fixed)
				return ae(&enc20pb.ArrayEncoding_FixedSizeList{FixedSizeList: &enc20pb.FixedSizeList{Dimension: uint32(l.n.dim), Items: items}}), b
			})
		}
	}
	if err := w.page(c, bufs, enc, c.rows); err != nil {
		return err
	}
	c.written += c.rows
	c.rows, c.nulls = 0, 0
	c.valid, c.lens = c.valid[:0], c.lens[:0]
	if c.val != nil {
		c.val.reset()
	}
	return w.c.err
}

func (w *writer20) page(c *col20, bufs [][]byte, enc *enc20pb.ArrayEncoding, rows uint64) error {
	b, err := marshalOpts.Marshal(enc)
	if err != nil {
		return fmt.Errorf("lancewrite: marshal 2.0 encoding: %w", err)
	}
	c.cm.Pages = append(c.cm.Pages, w.c.page(bufs, rows, c.written, mustAny(arrayEncodingURL, b)))
	return nil
}

func (w *writer20) finish() ([]*file2pb.ColumnMetadata, error) {
	out := make([]*file2pb.ColumnMetadata, len(w.cols))
	for i, c := range w.cols {
		if c.n.kind == kindStruct {
			if c.rows > 0 {
				if err := w.page(c, nil, ae(&enc20pb.ArrayEncoding_Struct{Struct: &enc20pb.SimpleStruct{}}), c.rows); err != nil {
					return nil, err
				}
			}
		} else if err := w.flush(c); err != nil {
			return nil, err
		}
		out[i] = c.cm
	}
	return out, w.c.err
}

// dict20Threshold is lance's LANCE_DICT_ENCODING_THRESHOLD default: utf8
// pages of at least this many values with fewer distinct values are
// dictionary encoded (u8 indices, 1-based, 0 = null; items as Binary).
const dict20Threshold = 100

func dictionary20(c *col20) (*enc20pb.ArrayEncoding, [][]byte, bool) {
	l := c.val
	if l.n.f.LogicalType != "string" || l.nvis < dict20Threshold {
		return nil, nil, false
	}
	ids := map[string]byte{}
	var items [][]byte
	idx := make([]byte, l.nvis)
	for i := 0; i < l.nvis; i++ {
		if !bitutil.BitIsSet(c.valid, i) {
			continue
		}
		s := l.data[l.offs[i]:l.offs[i+1]]
		id, ok := ids[string(s)]
		if !ok {
			if len(items) >= dict20Threshold-1 {
				return nil, nil, false
			}
			items = append(items, s)
			id = byte(len(items))
			ids[string(s)] = id
		}
		idx[i] = id
	}
	if len(items) == 0 {
		return nil, nil, false // all null: plain Binary (lance fails on an empty dictionary)
	}
	var data []byte
	ends := make([]uint64, len(items))
	for i, s := range items {
		data = append(data, s...)
		ends[i] = uint64(len(data))
	}
	noNulls := func(v *enc20pb.ArrayEncoding) *enc20pb.ArrayEncoding {
		return ae(&enc20pb.ArrayEncoding_Nullable{Nullable: &enc20pb.Nullable{Nullability: &enc20pb.Nullable_NoNulls{NoNulls: &enc20pb.Nullable_NoNull{Values: v}}}})
	}
	itemsEnc := ae(&enc20pb.ArrayEncoding_Binary{Binary: &enc20pb.Binary{Indices: noNulls(flat20(64, 1)), Bytes: flat20(8, 2), NullAdjustment: uint64(len(data)) + 1}})
	enc := ae(&enc20pb.ArrayEncoding_Dictionary{Dictionary: &enc20pb.Dictionary{Indices: noNulls(flat20(8, 0)), Items: itemsEnc, NumDictionaryItems: uint32(len(items))}})
	return enc, [][]byte{idx, u64s(ends), data}, true
}
