package codec

import "testing"

// FuzzDecoders feeds arbitrary bytes to every decoder: errors are fine,
// panics and runaway allocations are not.
func FuzzDecoders(f *testing.F) {
	var vals [1024]uint32
	for i := range vals {
		vals[i] = uint32(i * 7)
	}
	f.Add(AppendInlineBitpacked[uint32](nil, vals[:]), uint16(1000), uint8(13))
	f.Add([]byte{3, 0, 0, 0, 1, 2, 3}, uint16(5), uint8(3))
	tab := make([]byte, 8+9)
	tab[0], tab[3], tab[4], tab[5], tab[6], tab[7] = 1, 1, 0x54, 0x53, 0x53, 0x46
	tab[8], tab[16] = 'a', 1
	f.Add(tab, uint16(2), uint8(1))
	f.Add([]byte{4, 0, 0, 0, 0x40, 1, 2, 3, 4}, uint16(4), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, n uint16, w uint8) {
		cnt := int(n) % 1025
		_, _ = DecodeInlineBitpacked[uint8](nil, b, cnt)
		_, _ = DecodeInlineBitpacked[uint16](nil, b, cnt)
		_, _ = DecodeInlineBitpacked[uint32](nil, b, cnt)
		_, _ = DecodeInlineBitpacked[uint64](nil, b, cnt)
		_, _ = DecodeOutOfLineBitpacked[uint16](nil, b, int(w%17), int(n))
		_, _ = DecodeOutOfLineBitpacked[uint64](nil, b, int(w%65), int(n))
		half := len(b) / 2
		_, _ = DecodeRLE[uint32](nil, b[:half], b[half:], int(n))
		_, _ = DecodeByteStreamSplit(nil, b, int(w%9)+1, int(n))
		if d, err := NewFSSTDecoder(b); err == nil {
			_, _ = d.Decode(nil, b)
		}
		_, _ = Decompress(SchemeLZ4, b)
		_, _ = Decompress(SchemeZSTD, b)
	})
}
