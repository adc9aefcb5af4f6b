package vector

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveNearest is the reference argmin: one accumulator, first on ties.
func naiveNearest(set []float32, n int, v []float32, dot bool) (int, float64) {
	w := len(v)
	best, bestD := 0, math.Inf(1)
	for i := 0; i < n; i++ {
		var s float64
		for j, x := range v {
			y := float64(set[i*w+j])
			if dot {
				s += float64(x) * y
			} else {
				s += (float64(x) - y) * (float64(x) - y)
			}
		}
		if dot {
			s = 1 - s
		}
		if s < bestD {
			best, bestD = i, s
		}
	}
	return best, bestD
}

func randVectors(r *rand.Rand, n, w int) []float32 {
	out := make([]float32, n*w)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// The unrolled, early-stopping kernels find the same nearest vector as a
// plain float64 argmin (or, when two candidates are within float32
// rounding of each other, one at the same distance), for widths that
// exercise every tail of the unrolled loops.
func TestNearestKernels(t *testing.T) {
	forEachKernel(t, testNearestKernels)
}

// forEachKernel runs f with the vector kernels (where the CPU has them)
// and with the plain Go kernels.
func forEachKernel(t *testing.T, f func(*testing.T)) {
	saved := useSIMD
	defer func() { useSIMD = saved }()
	t.Run("plain", func(t *testing.T) { useSIMD = false; f(t) })
	if saved {
		t.Run("simd", func(t *testing.T) { useSIMD = true; f(t) })
	} else {
		t.Log("no vector kernels on this CPU: plain Go only")
	}
}

func testNearestKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, w := range []int{1, 3, 4, 8, 12, 16, 24, 31, 32, 48, 100, 128, 130, 768} {
		for _, dot := range []bool{false, true} {
			n := 64 + w%7*23 // several kernel blocks, some partial
			set := randVectors(r, n, w)
			for q := 0; q < 200; q++ {
				v := randVectors(r, 1, w)
				if q%10 == 0 { // a query equal to a member: distance 0 must win
					copy(v, set[(q%n)*w:(q%n+1)*w])
				}
				var got int
				if dot {
					got = nearestDot(set, n, v)
				} else {
					got = nearestL2(set, n, v)
				}
				want, wantD := naiveNearest(set, n, v, dot)
				if got == want {
					continue
				}
				_, gotD := naiveNearest(set[got*w:(got+1)*w], 1, v, dot)
				if math.Abs(gotD-wantD) > 1e-4*(1+math.Abs(wantD)) {
					t.Fatalf("w=%d dot=%v: nearest %d (distance %g), want %d (%g)", w, dot, got, gotD, want, wantD)
				}
			}
		}
	}
}

// The column-major kernels (PQ codebooks) agree with the row-major search.
func TestNearestColumns(t *testing.T) {
	if !useSIMD {
		t.Skip("no vector kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{8, 16, 40, 256} {
		for _, w := range []int{1, 2, 3, 8, 16} {
			for _, dot := range []bool{false, true} {
				set := randVectors(r, k, w)
				cols := transposeVectors(set, k, w)
				for q := 0; q < 100; q++ {
					v := randVectors(r, 1, w)
					if q%10 == 0 {
						copy(v, set[(q%k)*w:(q%k+1)*w])
					}
					got, ok := nearestColumns(cols, k, v, make([]float32, k), dot)
					if !ok {
						t.Fatalf("k=%d w=%d: column kernel refused", k, w)
					}
					want, wantD := naiveNearest(set, k, v, dot)
					if got == want {
						continue
					}
					_, gotD := naiveNearest(set[got*w:(got+1)*w], 1, v, dot)
					if math.Abs(gotD-wantD) > 1e-4*(1+math.Abs(wantD)) {
						t.Fatalf("k=%d w=%d dot=%v: nearest %d (distance %g), want %d (%g)", k, w, dot, got, gotD, want, wantD)
					}
				}
			}
		}
	}
	if _, ok := nearestColumns(make([]float32, 12), 12, make([]float32, 1), make([]float32, 12), false); ok {
		t.Error("12 vectors (not a multiple of 8) accepted by the column kernel")
	}
}

// Ties go to the first candidate, as lance's argmin does.
func TestNearestFirstOnTies(t *testing.T) {
	forEachKernel(t, testNearestFirstOnTies)
}

func testNearestFirstOnTies(t *testing.T) {
	for _, w := range []int{8, 128} {
		set := make([]float32, 3*w)
		v := make([]float32, w)
		for i := range v {
			v[i] = 1
			set[i], set[w+i], set[2*w+i] = 5, 2, 2
		}
		if got := nearestL2(set, 3, v); got != 1 {
			t.Errorf("w=%d: l2 tie went to %d, want 1", w, got)
		}
		if got := nearestDot(set[w:], 2, v); got != 0 {
			t.Errorf("w=%d: dot tie went to %d, want 0", w, got)
		}
	}
}

// BenchmarkEncodeKernels: one vector's IVF_PQ work on the benchmark's
// shape (256 centroids of 128 dimensions, 16 sub-vectors of 8 with 256
// codes each).
func BenchmarkEncodeKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	cents, book := randVectors(r, 256, 128), randVectors(r, 16*256, 8)
	var bookT []float32
	for s := 0; s < 16; s++ {
		bookT = append(bookT, transposeVectors(book[s*256*8:(s+1)*256*8], 256, 8)...)
	}
	qs := randVectors(r, 1024, 128)
	buf := make([]float32, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := qs[(i%1024)*128 : (i%1024+1)*128]
		_ = nearestL2(cents, 256, v)
		for s := 0; s < 16; s++ {
			if _, ok := nearestColumns(bookT[s*256*8:(s+1)*256*8], 256, v[s*8:(s+1)*8], buf, false); !ok {
				_ = nearestL2(book[s*256*8:(s+1)*256*8], 256, v[s*8:(s+1)*8])
			}
		}
	}
}

// plainNearestL2 is the one-accumulator loop the kernels replace (the
// baseline of BenchmarkEncodeKernelsPlain).
func plainNearestL2(set []float32, n int, v []float32) int {
	w := len(v)
	best, bestD := 0, float32(math.Inf(1))
	for i := 0; i < n; i++ {
		var s float32
		c := set[i*w : (i+1)*w]
		for j := range v {
			d := c[j] - v[j]
			s += d * d
		}
		if s < bestD {
			best, bestD = i, s
		}
	}
	return best
}

func BenchmarkEncodeKernelsPlain(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	cents, book := randVectors(r, 256, 128), randVectors(r, 16*256, 8)
	qs := randVectors(r, 1024, 128)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := qs[(i%1024)*128 : (i%1024+1)*128]
		_ = plainNearestL2(cents, 256, v)
		for s := 0; s < 16; s++ {
			_ = plainNearestL2(book[s*256*8:(s+1)*256*8], 256, v[s*8:(s+1)*8])
		}
	}
}
