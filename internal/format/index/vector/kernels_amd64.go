package vector

import "golang.org/x/sys/cpu"

func init() { useSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// l2BatchAVX2 and dotBatchAVX2 (kernels_amd64.s) write into out[r] the
// squared L2 distance, or the dot product, of v (w values, w a positive
// multiple of 8) and row r of set, for r < rows.
//
//go:noescape
func l2BatchAVX2(set, v *float32, rows, w int, out *float32)

//go:noescape
func dotBatchAVX2(set, v *float32, rows, w int, out *float32)

// distancesSIMD writes into out the squared L2 distances (dot: the dot
// products) of v and the first len(out) vectors of set; false when the
// CPU or the width does not allow the AVX2 kernels.
func distancesSIMD(set, v, out []float32, dot bool) bool {
	w, rows := len(v), len(out)
	if !useSIMD || w == 0 || w%8 != 0 || rows == 0 || len(set) < rows*w {
		return false
	}
	if dot {
		dotBatchAVX2(&set[0], &v[0], rows, w, &out[0])
	} else {
		l2BatchAVX2(&set[0], &v[0], rows, w, &out[0])
	}
	return true
}

// l2ColumnsAVX2 and dotColumnsAVX2 (kernels_amd64.s) write into out[j] the
// squared L2 distance, or the dot product, of v (w values) and vector j of
// the k vectors stored column-major in cols (value d of vector j at
// cols[d*k+j]); k is a positive multiple of 8.
//
//go:noescape
func l2ColumnsAVX2(cols, v *float32, k, w int, out *float32)

//go:noescape
func dotColumnsAVX2(cols, v *float32, k, w int, out *float32)

// columnDistancesSIMD is distancesSIMD over len(out) vectors stored
// column-major in cols (see transposeVectors).
func columnDistancesSIMD(cols, v, out []float32, dot bool) bool {
	w, k := len(v), len(out)
	if !useSIMD || w == 0 || k == 0 || k%8 != 0 || len(cols) < k*w {
		return false
	}
	if dot {
		dotColumnsAVX2(&cols[0], &v[0], k, w, &out[0])
	} else {
		l2ColumnsAVX2(&cols[0], &v[0], k, w, &out[0])
	}
	return true
}
