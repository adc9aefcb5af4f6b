package vector

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// RaBitQ (IVF_RQ) catch-up: lance 8.0.0 writes the quantizer in the
// storage metadata ({"rotation_type":"fast","fast_rotation_signs":[..],
// "code_dim":D,"num_bits":1,"packed":true,"query_estimator":"raw_query"})
// and, per row, the sign bits of the rotated residual ("_rabit_codes",
// LSB first) and three float32 factors ("__add_factors",
// "__scale_factors", "__error_factors"). A new row is encoded as lance's
// IvfTransformer::with_rq chain encodes it (normalized for cosine, then
// L2; dropped when not finite; assigned to the nearest centroid; the
// residual to it rotated and quantized; the factors from the rotated
// residual and the rotated centroid), see RQTransformer,
// compute_raw_query_factors and error_factor_value in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/transform.rs
// and apply_fast_rotation in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/rotation.rs.
// With num_bits > 1 each row also gets ex codes and two more factors
// (rq_ex.go). Supported: 1 to 9 bits per dimension, the fast rotation,
// the raw-query estimator (what lancedb 0.31.0's ivfRq builds); anything
// else is ErrUnsupported.

// rqFactorColumns are the per-row factor columns of a raw-query RQ
// storage: the first three of every storage, then the two of a
// multi-bit one.
var rqFactorColumns = []string{"__add_factors", "__scale_factors", "__error_factors", "__add_factors_ex", "__scale_factors_ex"}

const (
	rqFastRounds   = 4
	rqErrorEpsilon = 1.9
)

// rqModel is the RaBitQ quantizer of a segment.
type rqModel struct {
	signs   []byte    // fast rotation: rqFastRounds rounds of ceil(dim/8) sign bytes
	rotated []float32 // the IVF centroids, rotated (partition-major)
	dot     bool      // factors for dot distance (else L2)
	exBits  int       // num_bits - 1: ex-code bits per dimension
	exWidth int       // bytes per row of blocked ex codes (0: 1-bit)
}

// rqMetadata is the storage metadata of an RQ segment.
type rqMetadata struct {
	RotationType   string `json:"rotation_type"`
	Signs          []byte `json:"-"`
	CodeDim        int    `json:"code_dim"`
	NumBits        int    `json:"num_bits"`
	QueryEstimator string `json:"query_estimator"`
}

func parseRQMetadata(s *StorageFile) (rqMetadata, error) {
	var md rqMetadata
	var raw struct {
		Signs []int `json:"fast_rotation_signs"`
	}
	if err := json.Unmarshal([]byte(s.Metadata[0]), &md); err != nil {
		return md, errorf(s.File, ErrCorrupt, "RQ storage metadata: %v", err)
	}
	if err := json.Unmarshal([]byte(s.Metadata[0]), &raw); err != nil {
		return md, errorf(s.File, ErrCorrupt, "RQ storage metadata: %v", err)
	}
	for _, b := range raw.Signs {
		if b < 0 || b > 255 {
			return md, errorf(s.File, ErrCorrupt, "RQ fast_rotation_signs holds %d", b)
		}
		md.Signs = append(md.Signs, byte(b))
	}
	return md, nil
}

// newRQModel reads the RaBitQ quantizer of s for vectors of dimension dim
// under the IVF centroids (dot: factors for dot distance).
func newRQModel(s *StorageFile, dim int, centroids []float32, dot bool) (*rqModel, error) {
	md, err := parseRQMetadata(s)
	if err != nil {
		return nil, err
	}
	switch {
	case md.NumBits < 1 || md.NumBits > rqMaxBits:
		return nil, errorf(s.File, ErrUnsupported, "catch-up of RQ with %d bits per dimension (1 to %d)", md.NumBits, rqMaxBits)
	case md.RotationType != "fast":
		return nil, errorf(s.File, ErrUnsupported, "catch-up of RQ with rotation %q (fast only)", md.RotationType)
	case md.QueryEstimator != "raw_query":
		return nil, errorf(s.File, ErrUnsupported, "catch-up of RQ with query estimator %q (raw_query only)", md.QueryEstimator)
	case md.CodeDim != dim || dim%8 != 0 || dim == 0:
		return nil, errorf(s.File, ErrUnsupported, "RQ code_dim %d for vectors of dimension %d", md.CodeDim, dim)
	case len(md.Signs) != rqFastRounds*((dim+7)/8):
		return nil, errorf(s.File, ErrCorrupt, "RQ fast rotation has %d sign bytes for dimension %d", len(md.Signs), dim)
	}
	var names []string
	for _, f := range s.File.TopFields() {
		names = append(names, f.GetName())
	}
	q := &rqModel{signs: md.Signs, dot: dot, rotated: make([]float32, len(centroids)), exBits: md.NumBits - 1}
	want := append([]string{RowIDColumn, "_rabit_codes"}, rqFactorColumns[:rqBaseFactors]...)
	if q.exBits > 0 {
		q.exWidth = rqExCodeBytes(dim, q.exBits)
		want = append(want, rqExColumns...)
	}
	if !slices.Equal(names, want) {
		return nil, errorf(s.File, ErrUnsupported, "RQ storage columns %v, want %v", names, want)
	}
	for _, f := range s.File.TopFields()[2:] {
		lt := "float"
		if f.GetName() == rqExCodeColumn {
			lt = fmt.Sprintf("fixed_size_list:uint8:%d", q.exWidth)
		}
		if f.GetLogicalType() != lt {
			return nil, errorf(s.File, ErrUnsupported, "RQ column %s is %s, want %s", f.GetName(), f.GetLogicalType(), lt)
		}
	}
	for p := 0; p < len(centroids)/dim; p++ {
		q.rotate(centroids[p*dim:(p+1)*dim], q.rotated[p*dim:(p+1)*dim])
	}
	return q, nil
}

// rotate writes the fast rotation of in to out (len(in) == len(out)):
// rounds of sign flips and normalized Walsh-Hadamard transforms, as
// lance's apply_fast_rotation (for a dimension not a power of two, the
// transforms alternate between the head and the tail of the largest power
// of two, each round followed by a Kac's walk, and the result is scaled by
// 1/4, as RaBitQ-Library's FhtKacRotator).
func (q *rqModel) rotate(in, out []float32) {
	dim := len(out)
	copy(out, in)
	per := (dim + 7) / 8
	trunc := 1 << (bitsLen(dim) - 1)
	scale := float32(1 / math.Sqrt(float64(trunc)))
	for round := 0; round < rqFastRounds; round++ {
		signs := q.signs[round*per : (round+1)*per]
		for i := range out {
			if signs[i/8]>>(i%8)&1 == 1 {
				out[i] = -out[i]
			}
		}
		part := out
		if trunc != dim {
			if round%2 == 0 {
				part = out[:trunc]
			} else {
				part = out[dim-trunc:]
			}
		}
		fwht(part)
		for i := range part {
			part[i] *= scale
		}
		if trunc != dim {
			half := dim / 2
			for i := 0; i < half; i++ {
				x, y := out[i], out[i+half]
				out[i], out[i+half] = x+y, x-y
			}
		}
	}
	if trunc != dim {
		for i := range out {
			out[i] *= 0.25
		}
	}
}

func bitsLen(n int) int {
	l := 0
	for ; n > 0; n >>= 1 {
		l++
	}
	return l
}

// fwht is the in-place Walsh-Hadamard transform (unnormalized) of a
// power-of-two length, in lance's loop order.
func fwht(v []float32) {
	for half := 1; half < len(v); half *= 2 {
		for i := 0; i < len(v); i += 2 * half {
			for j := i; j < i+half; j++ {
				x, y := v[j], v[j+half]
				v[j], v[j+half] = x+y, x-y
			}
		}
	}
}

// encode writes the code (sign bits, LSB first), the ex code (multi-bit)
// and the factors (three; multi-bit five) of the residual r (modified:
// rotated into scratch) of a row in partition p; normSq is lance's
// res_norm_square (L2: the squared distance to the centroid; dot: |r|^2).
func (q *rqModel) encode(r []float32, p int, normSq float32, code, ex []byte, factors []float32, scratch []float32, exs *rqExScratch) {
	dim := len(r)
	rr := scratch[:dim]
	q.rotate(r, rr)
	rc := q.rotated[p*dim : (p+1)*dim]
	clear(code)
	var exResDot float32
	var exValues []byte
	if q.exBits > 0 {
		exResDot = rqExEncode(rr, q.exBits, ex, exs)
		exValues = exs.values[:dim]
	}
	exBias := -(float32(int(1)<<q.exBits) - 0.5)
	var resDot, centDot, resCent, exCentDot float32
	for i, x := range rr {
		b, sign := float32(-0.5), 0
		if !math.Signbit(float64(x)) {
			code[i/8] |= 1 << (i % 8)
			b, sign = 0.5, 1
		}
		resDot += float32(x * b)
		centDot += float32(rc[i] * b)
		if exValues != nil {
			exCentDot += float32(rc[i] * float32(float32(sign<<q.exBits+int(exValues[i]))+exBias))
		}
		resCent += float32(x * rc[i])
	}
	var errf float32
	if dim > 1 && normSq > 0 && resDot != 0 {
		alignment := float32(normSq*float32(float32(dim)*0.25)) / float32(resDot*resDot)
		angular := float32(math.Sqrt(float64(max(float32(alignment-1), 0) / float32(dim-1))))
		errf = float32(float32(float32(math.Sqrt(float64(normSq)))*rqErrorEpsilon) * angular)
		if !q.dot {
			errf *= 2
		}
	}
	factors[0], factors[1] = q.addScale(normSq, resCent, centDot, resDot)
	factors[2] = errf
	if q.exBits > 0 {
		factors[3], factors[4] = q.addScale(normSq, resCent, exCentDot, exResDot)
	}
}

// addScale returns the add and scale factors of a row from the dot
// products of its code with the rotated centroid (centDot) and the rotated
// residual (resDot), as lance's compute_raw_query_factors (for the sign
// code and, multi-bit, the full code alike).
func (q *rqModel) addScale(normSq, resCent, centDot, resDot float32) (add, scale float32) {
	ratio := func(num, den float32) float32 {
		if den == 0 {
			return 0
		}
		return num / den
	}
	correction := ratio(float32(normSq*centDot), resDot)
	if q.dot {
		return float32(1-resCent) + correction, ratio(-normSq, resDot)
	}
	return normSq + float32(2*correction), ratio(float32(-2*normSq), resDot)
}

// newExScratch returns the ex-code encoder's scratch for dim dimensions
// (nil for 1 bit).
func (q *rqModel) newExScratch(dim int) *rqExScratch {
	if q.exBits == 0 {
		return nil
	}
	return &rqExScratch{abs: make([]float32, dim), values: make([]byte, dim), cur: make([]int, dim)}
}
