package codec

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// fsstMagic is "FSST" in the high 32 bits of the symbol-table header.
const fsstMagic = 0x46535354

// FSSTTableLen is the serialized symbol-table size Lance writes.
const FSSTTableLen = 8 + 256*8 + 256

// FSSTDecoder expands FSST-compressed strings with one symbol table.
type FSSTDecoder struct {
	// Compressed is false when the table's switch bit is off: the data was
	// stored uncompressed.
	Compressed bool
	n          int
	syms       [256]uint64
	lens       [256]uint8
}

// NewFSSTDecoder parses a Lance FSST symbol table: u64 header
// ("FSST"<<32 | switch<<24 | suffixLim<<16 | terminator<<8 | nSymbols), then
// nSymbols 8-byte symbols and nSymbols length bytes.
func NewFSSTDecoder(table []byte) (*FSSTDecoder, error) {
	if len(table) < 8 {
		return nil, fmt.Errorf("%w: fsst symbol table of %d bytes", ErrCorrupt, len(table))
	}
	hdr := binary.LittleEndian.Uint64(table)
	if hdr>>32 != fsstMagic {
		return nil, fmt.Errorf("%w: fsst symbol table magic %#x", ErrCorrupt, hdr>>32)
	}
	d := &FSSTDecoder{Compressed: (hdr>>24)&1 == 1, n: int(hdr & 0xFF)}
	if !d.Compressed {
		return d, nil
	}
	if len(table) < 8+9*d.n {
		return nil, fmt.Errorf("%w: fsst symbol table of %d bytes for %d symbols", ErrCorrupt, len(table), d.n)
	}
	for i := 0; i < d.n; i++ {
		d.syms[i] = binary.LittleEndian.Uint64(table[8+8*i:])
		l := table[8+8*d.n+i]
		if l < 1 || l > 8 {
			return nil, fmt.Errorf("%w: fsst symbol %d has length %d", ErrCorrupt, i, l)
		}
		d.lens[i] = l
	}
	return d, nil
}

// Decode appends the expansion of src to dst.
func (d *FSSTDecoder) Decode(dst, src []byte) ([]byte, error) {
	if !d.Compressed {
		return append(dst, src...), nil
	}
	// Each code expands to at most 8 bytes: write whole 8-byte symbols into
	// spare capacity and advance by the symbol length.
	dst = slices.Grow(dst, 8*len(src)+8)
	n := len(dst)
	buf := dst[:cap(dst)]
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == 255 {
			i++
			if i >= len(src) {
				return dst, fmt.Errorf("%w: fsst escape at end of input", ErrCorrupt)
			}
			buf[n] = src[i]
			n++
			continue
		}
		if int(c) >= d.n {
			return dst, fmt.Errorf("%w: fsst code %d beyond %d symbols", ErrCorrupt, c, d.n)
		}
		binary.LittleEndian.PutUint64(buf[n:n+8], d.syms[c])
		n += int(d.lens[c])
	}
	return buf[:n], nil
}
