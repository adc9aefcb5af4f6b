package codec

import (
	"math/rand/v2"
	"testing"
)

var flOrder = [8]int{0, 4, 2, 6, 1, 5, 3, 7}

// refPack is the bit-level definition of the FastLanes layout (slow, for tests).
func refPack(values []uint64, t, w int) []uint64 {
	lanes := 1024 / t
	out := make([]uint64, BlockWords(t, w))
	if w == 0 {
		return out
	}
	mask := ^uint64(0)
	if w < 64 {
		mask = 1<<w - 1
	}
	tmask := ^uint64(0)
	if t < 64 {
		tmask = 1<<t - 1
	}
	for lane := 0; lane < lanes; lane++ {
		for row := 0; row < t; row++ {
			idx := flOrder[row/8]*16 + (row%8)*128 + lane
			v := values[idx] & mask
			start := row * w
			wi, sh := start/t, start%t
			out[lanes*wi+lane] |= (v << sh) & tmask
			if sh+w > t {
				out[lanes*(wi+1)+lane] |= v >> (t - sh)
			}
		}
	}
	return out
}

func toBytes(ws []uint64, t int) []byte {
	b := make([]byte, 0, len(ws)*t/8)
	for _, w := range ws {
		for i := 0; i < t/8; i++ {
			b = append(b, byte(w>>(8*i)))
		}
	}
	return b
}

func checkWidth[T Word](t *testing.T, bits int) {
	rng := rand.New(rand.NewPCG(uint64(bits), 7))
	for w := 0; w <= bits; w++ {
		vals := make([]uint64, 1024)
		for i := range vals {
			vals[i] = rng.Uint64()
			if w < 64 {
				vals[i] &= 1<<w - 1
			}
		}
		packed := toBytes(refPack(vals, bits, w), bits)
		// inline: header word + block
		hdr := toBytes([]uint64{uint64(w)}, bits)
		got, err := DecodeInlineBitpacked[T](nil, append(hdr, packed...), 1000)
		if err != nil {
			t.Fatalf("T=%d W=%d: %v", bits, w, err)
		}
		for i := range got {
			if uint64(got[i]) != vals[i] {
				t.Fatalf("T=%d W=%d: value %d = %d, want %d", bits, w, i, got[i], vals[i])
			}
		}
		// out of line: 2 blocks + raw tail / padded tail
		two := append(append([]byte{}, packed...), packed...)
		raw := append(append([]byte{}, two...), toBytes(vals[:5], bits)...)
		got, err = DecodeOutOfLineBitpacked[T](nil, raw, w, 2048+5)
		if err != nil {
			t.Fatalf("T=%d W=%d oolb raw tail: %v", bits, w, err)
		}
		if len(got) != 2053 || uint64(got[1024+17]) != vals[17] || uint64(got[2048+4]) != vals[4] {
			t.Fatalf("T=%d W=%d oolb raw tail mismatch", bits, w)
		}
		if w > 0 && bits > 8 {
			padded := append(append([]byte{}, two...), packed...)
			got, err = DecodeOutOfLineBitpacked[T](nil, padded, w, 2048+7)
			if err != nil {
				t.Fatalf("T=%d W=%d oolb padded tail: %v", bits, w, err)
			}
			if uint64(got[2048+6]) != vals[6] {
				t.Fatalf("T=%d W=%d oolb padded tail mismatch", bits, w)
			}
		}
	}
}

func TestFastLanesAllWidths(t *testing.T) {
	checkWidth[uint8](t, 8)
	checkWidth[uint16](t, 16)
	checkWidth[uint32](t, 32)
	checkWidth[uint64](t, 64)
}

func TestInlineBitpackedErrors(t *testing.T) {
	if _, err := DecodeInlineBitpacked[uint32](nil, []byte{40, 0, 0, 0}, 10); err == nil {
		t.Fatal("width 40 for 32-bit words accepted")
	}
	if _, err := DecodeInlineBitpacked[uint32](nil, []byte{3, 0, 0, 0, 1, 2}, 10); err == nil {
		t.Fatal("truncated block accepted")
	}
}
