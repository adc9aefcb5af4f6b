package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// valueKind says how a leaf's decoded values are stored.
type valueKind int

const (
	kindNone     valueKind = iota // not yet known (no values appended)
	kindFixed                     // width bytes per value in data
	kindBool                      // one byte (0/1) per value in data
	kindVariable                  // offsets (n+1) into data
)

// values is the decoded, uncompressed value stream of one leaf column for
// one page: one slot per visible entry. Nulls occupy a slot too.
type values struct {
	kind  valueKind
	width int // bytes per value (kindFixed)
	n     int
	data  []byte
	offs  []int64 // kindVariable: n+1 offsets into data
	// fslValid holds, per fixed-size-list layer (outer first), one byte per
	// list (layer 0: n·dim0 items...) when that layer has item validity;
	// entries are nil for layers without validity.
	fslDims  []int
	fslValid [][]byte
	// allNull marks a store of n null slots with no data.
	allNull bool
}

func (v *values) setKind(k valueKind, width int) error {
	if v.kind == kindNone {
		v.kind, v.width = k, width
		if k == kindVariable && len(v.offs) == 0 {
			v.offs = append(v.offs, 0)
		}
		return nil
	}
	if v.kind != k || v.width != width {
		return fmt.Errorf("%w: value width changes inside a page (%d/%d → %d/%d)", ErrCorrupt, v.kind, v.width, k, width)
	}
	return nil
}

func (v *values) appendFixed(b []byte, width, n int) error {
	if err := v.setKind(kindFixed, width); err != nil {
		return err
	}
	if len(b) < width*n {
		return fmt.Errorf("%w: %d bytes for %d values of %d bytes", ErrCorrupt, len(b), n, width)
	}
	v.data = append(v.data, b[:width*n]...)
	v.n += n
	return nil
}

func (v *values) appendBits(b []byte, n int) error {
	if err := v.setKind(kindBool, 1); err != nil {
		return err
	}
	if len(b)*8 < n {
		return fmt.Errorf("%w: bitmap of %d bytes for %d values", ErrCorrupt, len(b), n)
	}
	for i := 0; i < n; i++ {
		v.data = append(v.data, (b[i>>3]>>(i&7))&1)
	}
	v.n += n
	return nil
}

func (v *values) appendVar(b []byte) error {
	if err := v.setKind(kindVariable, 0); err != nil {
		return err
	}
	v.data = append(v.data, b...)
	v.offs = append(v.offs, int64(len(v.data)))
	v.n++
	return nil
}

// reserve grows capacity for more values like the ones stored so far.
func (v *values) reserve(more int) {
	if more <= 0 || v.n == 0 {
		return
	}
	switch v.kind {
	case kindFixed:
		v.data = slices.Grow(v.data, more*v.width)
	case kindBool:
		v.data = slices.Grow(v.data, more)
	case kindVariable:
		v.offs = slices.Grow(v.offs, more)
		v.data = slices.Grow(v.data, more*len(v.data)/v.n)
	}
}

// value returns the bytes of variable value i.
func (v *values) value(i int) []byte { return v.data[v.offs[i]:v.offs[i+1]] }

// fixedAt returns the bytes of fixed value i.
func (v *values) fixedAt(i int) []byte { return v.data[i*v.width : (i+1)*v.width] }

// decodeMiniBlockValues decodes one chunk's values (n of them) from its value
// buffers with a mini-block compressive encoding, appending to out.
func decodeMiniBlockValues(enc *enc21pb.CompressiveEncoding, bufs [][]byte, n int, out *values) error {
	if len(bufs) == 0 {
		return fmt.Errorf("%w: chunk has no value buffer", ErrCorrupt)
	}
	switch c := enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat:
		return appendFlat(c.Flat, bufs[0], n, out)
	case *enc21pb.CompressiveEncoding_InlineBitpacking:
		if c.InlineBitpacking.Values != nil {
			return fmt.Errorf("%w: inline bitpacking with buffer compression", ErrUnsupportedEncoding)
		}
		return appendInlineBitpacked(c.InlineBitpacking.GetUncompressedBitsPerValue(), bufs[0], n, out)
	case *enc21pb.CompressiveEncoding_Variable:
		if c.Variable.Values != nil {
			return fmt.Errorf("%w: variable with buffer compression", ErrUnsupportedEncoding)
		}
		return appendMiniVariable(c.Variable, bufs[0], n, out, nil)
	case *enc21pb.CompressiveEncoding_Fsst:
		d, err := codec.NewFSSTDecoder(c.Fsst.GetSymbolTable())
		if err != nil {
			return err
		}
		v := c.Fsst.GetValues().GetVariable()
		if v == nil {
			return fmt.Errorf("%w: fsst over %T", ErrUnsupportedEncoding, c.Fsst.GetValues().GetCompression())
		}
		return appendMiniVariable(v, bufs[0], n, out, d)
	case *enc21pb.CompressiveEncoding_FixedSizeList:
		return appendFSL(c.FixedSizeList, bufs, n, out, false)
	case *enc21pb.CompressiveEncoding_Rle:
		flat := c.Rle.GetValues().GetFlat()
		if flat == nil || c.Rle.GetRunLengths().GetFlat().GetBitsPerValue() != 8 {
			return fmt.Errorf("%w: rle with values %v", ErrUnsupportedEncoding, c.Rle)
		}
		if len(bufs) < 2 {
			return fmt.Errorf("%w: rle chunk needs 2 buffers, has %d", ErrCorrupt, len(bufs))
		}
		switch flat.GetBitsPerValue() {
		case 8:
			return appendRLE[uint8](bufs, n, out)
		case 16:
			return appendRLE[uint16](bufs, n, out)
		case 32:
			return appendRLE[uint32](bufs, n, out)
		case 64:
			return appendRLE[uint64](bufs, n, out)
		}
		return fmt.Errorf("%w: rle of %d-bit values", ErrUnsupportedEncoding, flat.GetBitsPerValue())
	case *enc21pb.CompressiveEncoding_ByteStreamSplit:
		bits := c.ByteStreamSplit.GetValues().GetFlat().GetBitsPerValue()
		if bits == 0 || bits%8 != 0 {
			return fmt.Errorf("%w: byte stream split of %d bits", ErrUnsupportedEncoding, bits)
		}
		b, err := codec.DecodeByteStreamSplit(nil, bufs[0], int(bits/8), n)
		if err != nil {
			return err
		}
		return out.appendFixed(b, int(bits/8), n)
	case *enc21pb.CompressiveEncoding_General:
		raw, err := codec.Decompress(codec.Scheme(c.General.GetCompression().GetScheme()), bufs[0])
		if err != nil {
			return err
		}
		nb := append([][]byte{raw}, bufs[1:]...)
		return decodeMiniBlockValues(c.General.GetValues(), nb, n, out)
	case *enc21pb.CompressiveEncoding_PackedStruct:
		flat := c.PackedStruct.GetValues().GetFlat()
		if flat == nil || flat.GetBitsPerValue()%8 != 0 {
			return fmt.Errorf("%w: packed struct values %v", ErrUnsupportedEncoding, c.PackedStruct.GetValues())
		}
		return out.appendFixed(bufs[0], int(flat.GetBitsPerValue()/8), n)
	}
	return fmt.Errorf("%w: mini-block value compression %T", ErrUnsupportedEncoding, enc.GetCompression())
}

func appendFlat(f *enc21pb.Flat, b []byte, n int, out *values) error {
	if f.Data != nil {
		raw, err := codec.Decompress(codec.Scheme(f.GetData().GetScheme()), b)
		if err != nil {
			return err
		}
		b = raw
	}
	bits := f.GetBitsPerValue()
	switch {
	case bits == 1:
		return out.appendBits(b, n)
	case bits > 0 && bits%8 == 0:
		return out.appendFixed(b, int(bits/8), n)
	}
	return fmt.Errorf("%w: flat values of %d bits", ErrUnsupportedEncoding, bits)
}

// inlineBlocks holds the blocks appendInlineBitpacked decodes chunks
// into: a block allocated per chunk of 1024 values was most of a
// bit-packed column's garbage when it is read whole. (A block on the stack
// escapes: the unpack kernels are called through a table.)
var inlineBlocks = sync.Pool{New: func() any { return new([codec.FastLanesBlock]uint64) }}

// appendInlineBitpacked decodes one chunk into a pooled block and appends
// its n values. DecodeInlineBitpacked appends to the block's empty slice,
// whose capacity holds a whole chunk, so it writes into the block.
func appendInlineBitpacked(bits uint64, b []byte, n int, out *values) error {
	blk := inlineBlocks.Get().(*[codec.FastLanesBlock]uint64)
	defer inlineBlocks.Put(blk)
	p := unsafe.Pointer(blk)
	var err error
	switch bits {
	case 8:
		_, err = codec.DecodeInlineBitpacked((*[codec.FastLanesBlock]uint8)(p)[:0], b, n)
	case 16:
		_, err = codec.DecodeInlineBitpacked((*[codec.FastLanesBlock]uint16)(p)[:0], b, n)
	case 32:
		_, err = codec.DecodeInlineBitpacked((*[codec.FastLanesBlock]uint32)(p)[:0], b, n)
	case 64:
		_, err = codec.DecodeInlineBitpacked(blk[:0], b, n)
	default:
		return fmt.Errorf("%w: inline bitpacking of %d-bit values", ErrUnsupportedEncoding, bits)
	}
	if err != nil {
		return err
	}
	return out.appendFixed(codec.AsBytes(blk[:]), int(bits/8), n)
}

func appendRLE[T codec.Word](bufs [][]byte, n int, out *values) error {
	v, err := codec.DecodeRLE[T](nil, bufs[0], bufs[1], n)
	if err != nil {
		return err
	}
	var z T
	return out.appendFixed(codec.AsBytes(v), sizeOf(z), n)
}

func sizeOf[T codec.Word](T) int {
	var z T
	switch any(z).(type) {
	case uint8:
		return 1
	case uint16:
		return 2
	case uint32:
		return 4
	}
	return 8
}

// appendMiniVariable decodes a mini-block Variable buffer: n+1 offsets
// (u32 or u64) relative to the buffer start, then the bytes.
func appendMiniVariable(v *enc21pb.Variable, b []byte, n int, out *values, fsst *codec.FSSTDecoder) error {
	bits := v.GetOffsets().GetFlat().GetBitsPerValue()
	if bits != 32 && bits != 64 {
		return fmt.Errorf("%w: variable offsets of %d bits", ErrUnsupportedEncoding, bits)
	}
	w := int(bits / 8)
	if len(b) < (n+1)*w {
		return fmt.Errorf("%w: variable chunk of %d bytes for %d offsets", ErrCorrupt, len(b), n+1)
	}
	off := func(i int) uint64 {
		if w == 4 {
			return uint64(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return binary.LittleEndian.Uint64(b[8*i:])
	}
	if err := out.setKind(kindVariable, 0); err != nil {
		return err
	}
	prev := off(0)
	for i := 1; i <= n; i++ {
		cur := off(i)
		if cur < prev || cur > uint64(len(b)) {
			return fmt.Errorf("%w: variable offset %d = %d out of range (prev %d, buffer %d)", ErrCorrupt, i, cur, prev, len(b))
		}
		if fsst != nil {
			var err error
			if out.data, err = fsst.Decode(out.data, b[prev:cur]); err != nil {
				return err
			}
		} else {
			out.data = append(out.data, b[prev:cur]...)
		}
		out.offs = append(out.offs, int64(len(out.data)))
		prev = cur
	}
	out.n += n
	return nil
}

// appendFSL decodes (possibly nested) fixed-size-list values. Mini-block:
// validity bitmaps (one per layer with validity, outer first) precede the
// data buffer. perValue: bufs[0] is one row: ceil(dim/8) validity bytes per
// layer with validity, then the data.
func appendFSL(f *enc21pb.FixedSizeList, bufs [][]byte, n int, out *values, perValue bool) error {
	var dims []int
	var hasValid []bool
	enc := &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_FixedSizeList{FixedSizeList: f}}
	for enc.GetFixedSizeList() != nil {
		l := enc.GetFixedSizeList()
		if l.GetItemsPerValue() == 0 || l.GetItemsPerValue() > 1<<20 {
			return fmt.Errorf("%w: fixed size list of %d items", ErrCorrupt, l.GetItemsPerValue())
		}
		dims = append(dims, int(l.GetItemsPerValue()))
		hasValid = append(hasValid, l.GetHasValidity())
		enc = l.GetValues()
	}
	flat := enc.GetFlat()
	if flat == nil {
		return fmt.Errorf("%w: fixed size list over %T", ErrUnsupportedEncoding, enc.GetCompression())
	}
	if out.fslDims == nil {
		out.fslDims = dims
		out.fslValid = make([][]byte, len(dims))
	} else if len(out.fslDims) != len(dims) {
		return fmt.Errorf("%w: fixed size list depth changes inside a page", ErrCorrupt)
	}
	total := 1
	for _, d := range dims {
		total *= d
		if total > 1<<24 {
			return fmt.Errorf("%w: fixed size list of more than 2^24 items", ErrCorrupt)
		}
	}
	bits := int(flat.GetBitsPerValue())
	if bits != 1 && bits%8 != 0 {
		return fmt.Errorf("%w: fixed size list items of %d bits", ErrUnsupportedEncoding, bits)
	}
	var data []byte
	var vbufs [][]byte
	if perValue {
		row := bufs[0]
		p := 0
		cum := 1
		for li, d := range dims {
			cum *= d
			if hasValid[li] {
				nb := (cum + 7) / 8
				if len(row) < p+nb {
					return fmt.Errorf("%w: per-value fixed size list row too short", ErrCorrupt)
				}
				vbufs = append(vbufs, row[p:p+nb])
				p += nb
			}
		}
		data = row[p:]
	} else {
		nv := 0
		for _, h := range hasValid {
			if h {
				nv++
			}
		}
		if len(bufs) < nv+1 {
			return fmt.Errorf("%w: fixed size list chunk has %d buffers, want %d", ErrCorrupt, len(bufs), nv+1)
		}
		vbufs, data = bufs[:nv], bufs[nv]
	}
	// Validity per layer.
	vi, cum := 0, 1
	for li, d := range dims {
		cum *= d
		cnt := n * cum
		if hasValid[li] {
			vb := vbufs[vi]
			vi++
			if len(vb)*8 < cnt {
				return fmt.Errorf("%w: fixed size list validity of %d bytes for %d items", ErrCorrupt, len(vb), cnt)
			}
			prevLen := len(out.fslValid[li])
			// Fill layers that had no validity so far in this page with "valid".
			if want := (out.n) * cum; prevLen < want {
				out.fslValid[li] = append(out.fslValid[li], ones(want-prevLen)...)
			}
			for i := 0; i < cnt; i++ {
				out.fslValid[li] = append(out.fslValid[li], (vb[i>>3]>>(i&7))&1)
			}
		} else if out.fslValid[li] != nil {
			out.fslValid[li] = append(out.fslValid[li], ones(cnt)...)
		}
	}
	if bits == 1 {
		// Bool items: keep one byte per item; the value "width" is total bytes.
		if len(data)*8 < n*total {
			return fmt.Errorf("%w: fixed size list bitmap too short", ErrCorrupt)
		}
		if err := out.setKind(kindFixed, total); err != nil {
			return err
		}
		for i := 0; i < n*total; i++ {
			out.data = append(out.data, (data[i>>3]>>(i&7))&1)
		}
		out.n += n
		return nil
	}
	return out.appendFixed(data, total*bits/8, n)
}

func ones(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 1
	}
	return b
}
