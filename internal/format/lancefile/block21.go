package lancefile

import (
	"encoding/binary"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// Block compression: whole buffers (rep/def levels of a chunk, mini-block
// dictionaries).

// decodeBlock decodes a whole buffer written with a block compressor
// (levels, dictionaries) holding n values.
func decodeBlock(enc *enc21pb.CompressiveEncoding, b []byte, n int, out *values) error {
	switch c := enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat:
		return appendFlat(c.Flat, b, n, out)
	case *enc21pb.CompressiveEncoding_InlineBitpacking:
		return appendInlineBitpacked(c.InlineBitpacking.GetUncompressedBitsPerValue(), b, n, out)
	case *enc21pb.CompressiveEncoding_OutOfLineBitpacking:
		w := int(c.OutOfLineBitpacking.GetValues().GetFlat().GetBitsPerValue())
		var raw []byte
		switch c.OutOfLineBitpacking.GetUncompressedBitsPerValue() {
		case 8:
			v, err := codec.DecodeOutOfLineBitpacked[uint8](nil, b, w, n)
			if err != nil {
				return err
			}
			raw = v
		case 16:
			v, err := codec.DecodeOutOfLineBitpacked[uint16](nil, b, w, n)
			if err != nil {
				return err
			}
			raw = codec.AsBytes(v)
		case 32:
			v, err := codec.DecodeOutOfLineBitpacked[uint32](nil, b, w, n)
			if err != nil {
				return err
			}
			raw = codec.AsBytes(v)
		case 64:
			v, err := codec.DecodeOutOfLineBitpacked[uint64](nil, b, w, n)
			if err != nil {
				return err
			}
			raw = codec.AsBytes(v)
		default:
			return fmt.Errorf("%w: out-of-line bitpacking of %d-bit values", ErrUnsupportedEncoding, c.OutOfLineBitpacking.GetUncompressedBitsPerValue())
		}
		return out.appendFixed(raw, int(c.OutOfLineBitpacking.GetUncompressedBitsPerValue()/8), n)
	case *enc21pb.CompressiveEncoding_Variable:
		return appendBlockVariable(b, n, out)
	case *enc21pb.CompressiveEncoding_General:
		raw, err := codec.Decompress(codec.Scheme(c.General.GetCompression().GetScheme()), b)
		if err != nil {
			return err
		}
		return decodeBlock(c.General.GetValues(), raw, n, out)
	case *enc21pb.CompressiveEncoding_Fsst:
		d, err := codec.NewFSSTDecoder(c.Fsst.GetSymbolTable())
		if err != nil {
			return err
		}
		var inner values
		if err := decodeBlock(c.Fsst.GetValues(), b, n, &inner); err != nil {
			return err
		}
		if inner.kind != kindVariable {
			return fmt.Errorf("%w: fsst block over fixed values", ErrUnsupportedEncoding)
		}
		for i := 0; i < n; i++ {
			dec, err := d.Decode(nil, inner.value(i))
			if err != nil {
				return err
			}
			if err := out.appendVar(dec); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: block compression %T", ErrUnsupportedEncoding, enc.GetCompression())
}

// appendBlockVariable decodes [uW bits][uW bytes_start][offsets ×(n+1)][bytes].
func appendBlockVariable(b []byte, n int, out *values) error {
	if len(b) < 8 {
		return fmt.Errorf("%w: variable block of %d bytes", ErrCorrupt, len(b))
	}
	bits := binary.LittleEndian.Uint32(b)
	var w int
	switch bits {
	case 32:
		w = 4
	case 64:
		w = 8
	default:
		return fmt.Errorf("%w: variable block with %d-bit offsets", ErrUnsupportedEncoding, bits)
	}
	get := func(i int) uint64 {
		if w == 4 {
			return uint64(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return binary.LittleEndian.Uint64(b[8*i:])
	}
	if len(b) < (n+3)*w {
		return fmt.Errorf("%w: variable block of %d bytes for %d values", ErrCorrupt, len(b), n)
	}
	start := get(1)
	if start > uint64(len(b)) || start < uint64((n+3)*w) {
		return fmt.Errorf("%w: variable block data start %d out of range", ErrCorrupt, start)
	}
	data := b[start:]
	for i := 0; i < n; i++ {
		a, e := get(2+i), get(3+i)
		if a > e || e > uint64(len(data)) {
			return fmt.Errorf("%w: variable block offset %d out of range", ErrCorrupt, i)
		}
		if err := out.appendVar(data[a:e]); err != nil {
			return err
		}
	}
	return nil
}

// levelsFrom converts decoded fixed values to u16 levels.
func levelsFrom(v *values, n int) ([]uint16, error) {
	if v.n != n {
		return nil, fmt.Errorf("%w: %d levels decoded, want %d", ErrCorrupt, v.n, n)
	}
	out := make([]uint16, n)
	switch {
	case v.kind == kindBool:
		for i := range out {
			out[i] = uint16(v.data[i])
		}
	case v.kind == kindFixed && v.width == 1:
		for i := range out {
			out[i] = uint16(v.data[i])
		}
	case v.kind == kindFixed && v.width == 2:
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(v.data[2*i:])
		}
	case v.kind == kindFixed && (v.width == 4 || v.width == 8):
		for i := range out {
			x := binary.LittleEndian.Uint32(v.data[v.width*i:])
			if x > 0xFFFF {
				return nil, fmt.Errorf("%w: level %d = %d", ErrCorrupt, i, x)
			}
			out[i] = uint16(x)
		}
	case n == 0:
	default:
		return nil, fmt.Errorf("%w: levels stored as %d-byte values", ErrCorrupt, v.width)
	}
	return out, nil
}
