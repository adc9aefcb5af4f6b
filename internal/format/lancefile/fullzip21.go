package lancefile

import (
	"encoding/binary"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// Full-zip layout (values ≥ 256 B: control word + value per entry) and the
// all-null layout.

func bytesForBits(bits uint32) int {
	switch {
	case bits == 0:
		return 0
	case bits <= 8:
		return 1
	case bits <= 16:
		return 2
	}
	return 4
}

func decodeFullZip(l *enc21pb.FullZipLayout, bufs [][]byte, rows int) (*page, error) {
	return decodeFullZipItems(l, bufs, rows, int(l.GetNumItems()))
}

// decodeFullZipItems decodes n entries, or with n < 0 every entry in the
// data (a row range of a repeated page, whose entry count only the levels
// tell).
func decodeFullZipItems(l *enc21pb.FullZipLayout, bufs [][]byte, rows, n int) (*page, error) {
	p := &page{layers: l.GetLayers()}
	if len(bufs) < 1 || len(bufs) > 2 {
		return nil, fmt.Errorf("%w: full-zip page has %d buffers", ErrCorrupt, len(bufs))
	}
	data := bufs[0]
	bitsRep, bitsDef := l.GetBitsRep(), l.GetBitsDef()
	if bitsRep > 16 || bitsDef > 16 {
		return nil, fmt.Errorf("%w: full-zip control word of %d+%d bits", ErrCorrupt, bitsRep, bitsDef)
	}
	cw := bytesForBits(bitsRep + bitsDef)
	all := n < 0
	if all {
		if cw == 0 {
			return nil, fmt.Errorf("%w: full-zip row range without levels", ErrCorrupt)
		}
		n = len(data) / cw // at most one entry per control word
	}
	mvd := maxVisibleDef(p.layers)
	hasList := false
	for _, ly := range p.layers {
		hasList = hasList || isListLayer(ly)
	}
	if c := min(n, len(data)); !all { // a row range grows as it decodes
		if bitsRep > 0 {
			p.rep = make([]uint16, 0, c)
		}
		if bitsDef > 0 {
			p.def = make([]uint16, 0, c)
		}
	}
	fixedBytes, offBytes, err := fullZipValueWidth(l)
	if err != nil {
		return nil, err
	}
	pv, err := newPerValue(l.GetValueCompression(), fixedBytes > 0)
	if err != nil {
		return nil, err
	}
	o := 0
	repMask := uint32(1)<<bitsDef - 1
	i := 0
	for ; i < n && (!all || o < len(data)); i++ {
		var r, d uint32
		if cw > 0 {
			if o+cw > len(data) {
				return nil, fmt.Errorf("%w: full-zip entry %d beyond buffer", ErrCorrupt, i)
			}
			word := controlWord(data[o:], cw)
			o += cw
			d = word & repMask
			r = word >> bitsDef
			if bitsRep > 0 {
				p.rep = append(p.rep, uint16(r))
			}
			if bitsDef > 0 {
				p.def = append(p.def, uint16(d))
			}
		}
		visible := !hasList || int(d) <= mvd
		if !visible {
			continue
		}
		if o, err = fullZipValue(data, o, i, d != 0, fixedBytes, offBytes, pv, &p.vals); err != nil {
			return nil, err
		}
	}
	if o != len(data) {
		return nil, fmt.Errorf("%w: full-zip entries cover %d of %d bytes", ErrCorrupt, o, len(data))
	}
	if p.vals.n != int(l.GetNumVisibleItems()) && l.GetNumVisibleItems() != 0 {
		return nil, fmt.Errorf("%w: full-zip decoded %d visible values, layout says %d", ErrCorrupt, p.vals.n, l.GetNumVisibleItems())
	}
	if all {
		n = i
	}
	p.entries = n
	if cw == 0 && n != rows {
		return nil, fmt.Errorf("%w: full-zip page of %d rows has %d items without levels", ErrCorrupt, rows, n)
	}
	return p, nil
}

// fullZipValueWidth is the byte width of a fixed value, or else of a
// variable value's length prefix (the other is 0).
func fullZipValueWidth(l *enc21pb.FullZipLayout) (fixedBytes, offBytes int, err error) {
	switch d := l.GetDetails().(type) {
	case *enc21pb.FullZipLayout_BitsPerValue:
		if d.BitsPerValue == 0 || d.BitsPerValue%8 != 0 {
			return 0, 0, fmt.Errorf("%w: full-zip fixed values of %d bits", ErrUnsupportedEncoding, d.BitsPerValue)
		}
		return int(d.BitsPerValue / 8), 0, nil
	case *enc21pb.FullZipLayout_BitsPerOffset:
		if d.BitsPerOffset != 32 && d.BitsPerOffset != 64 {
			return 0, 0, fmt.Errorf("%w: full-zip offsets of %d bits", ErrUnsupportedEncoding, d.BitsPerOffset)
		}
		return 0, int(d.BitsPerOffset / 8), nil
	}
	return 0, 0, fmt.Errorf("%w: full-zip layout without value width", ErrCorrupt)
}

// controlWord reads a little-endian control word of cw (1, 2 or 4) bytes.
func controlWord(b []byte, cw int) uint32 {
	switch cw {
	case 1:
		return uint32(b[0])
	case 2:
		return uint32(binary.LittleEndian.Uint16(b))
	}
	return binary.LittleEndian.Uint32(b)
}

// fullZipValue decodes the value of visible entry i at data[o:] into vals
// and returns the offset after it: a fixed-width value (present even for a
// null entry), or for a variable one nothing when null and otherwise a
// length prefix of offBytes and the value.
func fullZipValue(data []byte, o, i int, null bool, fixedBytes, offBytes int, pv *perValue, vals *values) (int, error) {
	le := binary.LittleEndian
	if fixedBytes > 0 {
		if o+fixedBytes > len(data) {
			return 0, fmt.Errorf("%w: full-zip value %d beyond buffer", ErrCorrupt, i)
		}
		return o + fixedBytes, pv.add(data[o:o+fixedBytes], vals)
	}
	if null {
		return o, pv.addNull(vals)
	}
	if o+offBytes > len(data) {
		return 0, fmt.Errorf("%w: full-zip length %d beyond buffer", ErrCorrupt, i)
	}
	var ln uint64
	if offBytes == 4 {
		ln = uint64(le.Uint32(data[o:]))
	} else {
		ln = le.Uint64(data[o:])
	}
	o += offBytes
	if ln > uint64(len(data)-o) {
		return 0, fmt.Errorf("%w: full-zip value %d of %d bytes beyond buffer", ErrCorrupt, i, ln)
	}
	return o + int(ln), pv.add(data[o:o+int(ln)], vals)
}

// perValue decodes full-zip values one at a time.
type perValue struct {
	enc   *enc21pb.CompressiveEncoding
	fsst  *codec.FSSTDecoder
	fixed bool
}

func newPerValue(enc *enc21pb.CompressiveEncoding, fixed bool) (*perValue, error) {
	pv := &perValue{enc: enc, fixed: fixed}
	switch c := enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat, *enc21pb.CompressiveEncoding_FixedSizeList:
		if !fixed {
			return nil, fmt.Errorf("%w: variable full-zip with fixed compression %T", ErrUnsupportedEncoding, c)
		}
	case *enc21pb.CompressiveEncoding_Variable:
	case *enc21pb.CompressiveEncoding_Fsst:
		d, err := codec.NewFSSTDecoder(c.Fsst.GetSymbolTable())
		if err != nil {
			return nil, err
		}
		pv.fsst = d
	case *enc21pb.CompressiveEncoding_General:
		switch c.General.GetValues().GetCompression().(type) {
		case *enc21pb.CompressiveEncoding_Variable, nil:
		default:
			return nil, fmt.Errorf("%w: per-value general over %T", ErrUnsupportedEncoding, c.General.GetValues().GetCompression())
		}
	default:
		return nil, fmt.Errorf("%w: per-value compression %T", ErrUnsupportedEncoding, enc.GetCompression())
	}
	return pv, nil
}

func (pv *perValue) addNull(out *values) error {
	if err := out.setKind(kindVariable, 0); err != nil {
		return err
	}
	out.offs = append(out.offs, int64(len(out.data)))
	out.n++
	return nil
}

func (pv *perValue) add(b []byte, out *values) error {
	switch c := pv.enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat:
		return appendFlat(c.Flat, b, 1, out)
	case *enc21pb.CompressiveEncoding_FixedSizeList:
		return appendFSL(c.FixedSizeList, [][]byte{b}, 1, out, true)
	case *enc21pb.CompressiveEncoding_Variable:
		return out.appendVar(b)
	case *enc21pb.CompressiveEncoding_Fsst:
		if err := out.setKind(kindVariable, 0); err != nil {
			return err
		}
		var err error
		if out.data, err = pv.fsst.Decode(out.data, b); err != nil {
			return err
		}
		out.offs = append(out.offs, int64(len(out.data)))
		out.n++
		return nil
	case *enc21pb.CompressiveEncoding_General:
		raw, err := codec.Decompress(codec.Scheme(c.General.GetCompression().GetScheme()), b)
		if err != nil {
			return err
		}
		return out.appendVar(raw)
	}
	return fmt.Errorf("%w: per-value compression %T", ErrUnsupportedEncoding, pv.enc.GetCompression())
}

func decodeAllNull(l *enc21pb.AllNullLayout, bufs [][]byte, rows int) (*page, error) {
	p := &page{layers: l.GetLayers()}
	if len(bufs) == 0 {
		p.entries = rows
		if len(p.layers) > 0 {
			p.defFill = 1
		}
		p.vals = values{allNull: true, n: rows}
		return p, nil
	}
	if len(bufs) != 2 {
		return nil, fmt.Errorf("%w: all-null page has %d buffers, want 0 or 2", ErrCorrupt, len(bufs))
	}
	if len(bufs[0])%2 != 0 || len(bufs[1])%2 != 0 {
		return nil, fmt.Errorf("%w: all-null level buffers of odd size", ErrCorrupt)
	}
	if len(bufs[0]) > 0 {
		p.rep = append([]uint16(nil), codec.AsWords[uint16](bufs[0])...)
	}
	if len(bufs[1]) > 0 {
		p.def = append([]uint16(nil), codec.AsWords[uint16](bufs[1])...)
	}
	p.entries = max(len(p.rep), len(p.def))
	// Visible slots (nulls inside the innermost list) hold no data.
	mvd := maxVisibleDef(p.layers)
	n := 0
	for i := 0; i < p.entries; i++ {
		if p.def == nil || int(p.def[i]) <= mvd {
			n++
		}
	}
	hasList := false
	for _, ly := range p.layers {
		hasList = hasList || isListLayer(ly)
	}
	if !hasList {
		n = p.entries
	}
	p.vals = values{allNull: true, n: n}
	return p, nil
}
