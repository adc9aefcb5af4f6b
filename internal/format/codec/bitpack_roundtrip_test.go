package codec

import (
	"math/rand/v2"
	"testing"
)

func roundTripInline[T Word](t *testing.T, width int) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(width), 7))
	for _, n := range []int{1, 100, 1023, 1024} {
		vals := make([]T, n)
		for i := range vals {
			v := r.Uint64()
			if width < 64 {
				v &= (uint64(1) << width) - 1
			}
			vals[i] = T(v)
		}
		enc := AppendInlineBitpacked(nil, vals)
		if got, want := len(enc), InlineBitpackedSize[T](MaxBitWidth(vals)); got != want {
			t.Fatalf("T=%d W=%d n=%d: size %d, want %d", bitsOf[T](), width, n, got, want)
		}
		dec, err := DecodeInlineBitpacked[T](nil, enc, n)
		if err != nil {
			t.Fatalf("T=%d W=%d n=%d: %v", bitsOf[T](), width, n, err)
		}
		for i := range vals {
			if dec[i] != vals[i] {
				t.Fatalf("T=%d W=%d n=%d: value %d = %d, want %d", bitsOf[T](), width, n, i, dec[i], vals[i])
			}
		}
		for _, w := range []int{width, bitsOf[T]()} {
			for _, m := range []int{n, n + 1024, 2048 + n} {
				vs := make([]T, m)
				for i := range vs {
					vs[i] = vals[i%n]
				}
				enc := AppendOutOfLineBitpacked(nil, vs, max(w, MaxBitWidth(vs)))
				dec, err := DecodeOutOfLineBitpacked[T](nil, enc, max(w, MaxBitWidth(vs)), m)
				if err != nil {
					t.Fatalf("ool T=%d W=%d n=%d: %v", bitsOf[T](), w, m, err)
				}
				for i := range vs {
					if dec[i] != vs[i] {
						t.Fatalf("ool T=%d W=%d n=%d: value %d = %d, want %d", bitsOf[T](), w, m, i, dec[i], vs[i])
					}
				}
			}
		}
	}
}

func TestBitpackRoundTripAllWidths(t *testing.T) {
	for w := 0; w <= 8; w++ {
		roundTripInline[uint8](t, w)
	}
	for w := 0; w <= 16; w++ {
		roundTripInline[uint16](t, w)
	}
	for w := 0; w <= 32; w++ {
		roundTripInline[uint32](t, w)
	}
	for w := 0; w <= 64; w++ {
		roundTripInline[uint64](t, w)
	}
}

// The packed layout must be lance's transposed FastLanes order, not just any
// layout our decoder agrees with: check against the documented formula.
func TestPackMatchesFormula(t *testing.T) {
	order := [8]int{0, 4, 2, 6, 1, 5, 3, 7}
	var in [1024]uint32
	for i := range in {
		in[i] = uint32(i*2654435761) & (1<<11 - 1)
	}
	const T, W, lanes = 32, 11, 32
	out := make([]uint32, 1024*W/T)
	PackFL32(W, &in, out)
	for lane := 0; lane < lanes; lane++ {
		for row := 0; row < T; row++ {
			idx := order[row/8]*16 + (row%8)*128 + lane
			bit := row * W
			w, sh := bit/T, bit%T
			v := uint64(out[lanes*w+lane]) >> sh
			if sh+W > T {
				v |= uint64(out[lanes*(w+1)+lane]) << (T - sh)
			}
			if got := uint32(v) & (1<<W - 1); got != in[idx] {
				t.Fatalf("lane %d row %d: %d, want %d", lane, row, got, in[idx])
			}
		}
	}
}

func BenchmarkPackFL32(b *testing.B) {
	var in [1024]uint32
	for i := range in {
		in[i] = uint32(i) & 0x3ff
	}
	out := make([]uint32, 1024)
	b.Run("pack_w10", func(b *testing.B) {
		b.SetBytes(4096)
		for b.Loop() {
			PackFL32(10, &in, out)
		}
	})
	b.Run("memcpy", func(b *testing.B) {
		b.SetBytes(4096)
		for b.Loop() {
			copy(out, in[:])
		}
	})
}
