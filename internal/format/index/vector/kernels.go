package vector

import "math"

// Distance kernels of the catch-up encoder (nearest IVF centroid, nearest
// PQ codebook entry). Plain Go: the loops are unrolled with independent
// accumulators so the float units are not serialized on one sum, and the
// squared-L2 search stops summing a candidate once its partial sum reaches
// the best distance found so far (squared L2 only grows as terms are
// added, so a candidate stopped early could not have been nearer: the
// result is the same argmin, first on ties).

// l2Bounded is the squared L2 distance of a and b (same length), or some
// value >= bound once the partial sum reaches bound.
func l2Bounded(a, b []float32, bound float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+16 <= len(a); i += 16 {
		x, y := a[i:i+16:i+16], b[i:i+16:i+16]
		d0, d1, d2, d3 := x[0]-y[0], x[1]-y[1], x[2]-y[2], x[3]-y[3]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		d0, d1, d2, d3 = x[4]-y[4], x[5]-y[5], x[6]-y[6], x[7]-y[7]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		d0, d1, d2, d3 = x[8]-y[8], x[9]-y[9], x[10]-y[10], x[11]-y[11]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		d0, d1, d2, d3 = x[12]-y[12], x[13]-y[13], x[14]-y[14], x[15]-y[15]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		if i&31 == 16 {
			if s := (s0 + s1) + (s2 + s3); s >= bound {
				return s
			}
		}
	}
	for ; i+4 <= len(a); i += 4 {
		x, y := a[i:i+4:i+4], b[i:i+4:i+4]
		d0, d1, d2, d3 := x[0]-y[0], x[1]-y[1], x[2]-y[2], x[3]-y[3]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(a); i++ {
		d := a[i] - b[i]
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// dotProduct is a·b (same length).
func dotProduct(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		s0 += x[0]*y[0] + x[4]*y[4]
		s1 += x[1]*y[1] + x[5]*y[5]
		s2 += x[2]*y[2] + x[6]*y[6]
		s3 += x[3]*y[3] + x[7]*y[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// l2x8 is the squared L2 distance of two 8-value vectors (the common PQ
// sub-vector width: 128 dimensions in 16 sub-vectors).
func l2x8(x, y []float32) float32 {
	x, y = x[:8:8], y[:8:8]
	d0, d1, d2, d3 := x[0]-y[0], x[1]-y[1], x[2]-y[2], x[3]-y[3]
	d4, d5, d6, d7 := x[4]-y[4], x[5]-y[5], x[6]-y[6], x[7]-y[7]
	return (d0*d0 + d4*d4 + d1*d1 + d5*d5) + (d2*d2 + d6*d6 + d3*d3 + d7*d7)
}

// useSIMD is set where the CPU has the vector kernels (AVX2 and FMA on
// amd64: kernels_amd64.s); tests turn it off to check the plain path.
var useSIMD bool

// simdBlock is how many distances one vector-kernel call computes (on the
// caller's stack).
const simdBlock = 64

// nearestSIMD is the nearest of the n vectors of set to v (squared L2, or
// dot distance) through the vector kernels, one block of distances at a
// time; false when they cannot run it.
func nearestSIMD(set []float32, n int, v []float32, dot bool) (int, bool) {
	w := len(v)
	if !useSIMD || w%8 != 0 || n == 0 {
		return 0, false
	}
	best, bestD := 0, float32(math.Inf(1))
	var buf [simdBlock]float32
	for lo := 0; lo < n; lo += simdBlock {
		out := buf[:min(simdBlock, n-lo)]
		if !distancesSIMD(set[lo*w:], v, out, dot) {
			return 0, false
		}
		for i, d := range out {
			if dot {
				d = 1 - d
			}
			if d < bestD {
				best, bestD = lo+i, d
			}
		}
	}
	return best, true
}

// nearestL2 returns the index of the vector of set (n vectors of width
// len(v)) nearest to v by squared L2, the first on ties.
func nearestL2(set []float32, n int, v []float32) int {
	if i, ok := nearestSIMD(set, n, v, false); ok {
		return i
	}
	w := len(v)
	best, bestD := 0, float32(math.Inf(1))
	if w == 8 {
		for i := 0; i < n; i++ {
			if d := l2x8(set[i*8:], v); d < bestD {
				best, bestD = i, d
			}
		}
		return best
	}
	for i := 0; i < n; i++ {
		if d := l2Bounded(set[i*w:(i+1)*w], v, bestD); d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// nearestDot returns the index of the vector of set nearest to v by dot
// distance (1 - x·y, the largest product), the first on ties.
func nearestDot(set []float32, n int, v []float32) int {
	if i, ok := nearestSIMD(set, n, v, true); ok {
		return i
	}
	w := len(v)
	best, bestD := 0, float32(math.Inf(1))
	for i := 0; i < n; i++ {
		if d := 1 - dotProduct(set[i*w:(i+1)*w], v); d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// transposeVectors stores n vectors of width w (row-major in set)
// column-major: value d of vector j at out[d*n+j].
func transposeVectors(set []float32, n, w int) []float32 {
	out := make([]float32, n*w)
	for j := 0; j < n; j++ {
		for d := 0; d < w; d++ {
			out[d*n+j] = set[j*w+d]
		}
	}
	return out
}

// nearestColumns is nearestL2 (dot: nearestDot) over k vectors stored
// column-major (transposeVectors), with buf (at least k values) as
// scratch; false when the vector kernels cannot run it (then the caller
// searches the row-major copy).
func nearestColumns(cols []float32, k int, v, buf []float32, dot bool) (int, bool) {
	if len(buf) < k || !columnDistancesSIMD(cols, v, buf[:k], dot) {
		return 0, false
	}
	best := 0
	if dot {
		bestP := float32(math.Inf(-1))
		for j, p := range buf[:k] {
			if p > bestP { // the smallest 1 - p
				best, bestP = j, p
			}
		}
		return best, true
	}
	bestD := float32(math.Inf(1))
	for j, d := range buf[:k] {
		if d < bestD {
			best, bestD = j, d
		}
	}
	return best, true
}
