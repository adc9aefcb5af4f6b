package vector

import (
	"encoding/binary"
	"math"
	"slices"
)

// Multi-bit RaBitQ (num_bits > 1): besides the sign bit per dimension,
// lance 8.0.0 stores ex_bits = num_bits - 1 more bits per dimension
// ("__blocked_ex_codes", in 64-dimension blocks) and two more factors
// ("__add_factors_ex", "__scale_factors_ex"). The ex code of a rotated
// residual is the magnitude |r_i| / |r| scaled by the factor t that
// maximizes the inner product of the code with the residual and rounded
// down (bit-flipped for negative values), see best_ex_rescale_factor and
// quantize_ex_code in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/builder.rs,
// the factors in compute_raw_query_factors
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/transform.rs)
// and the block layout in pack_blocked_row
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/bq/ex_dot.rs).

// rqExCodeColumn holds the ex codes of a multi-bit RQ storage.
const rqExCodeColumn = "__blocked_ex_codes"

// rqExColumns are the columns a multi-bit RQ storage adds after the
// 1-bit ones, in file order.
var rqExColumns = []string{rqExCodeColumn, "__add_factors_ex", "__scale_factors_ex"}

const (
	rqMaxBits      = 9 // lance's RABIT_MAX_NUM_BITS
	rqExBlockDims  = 64
	rqExEpsilon    = float32(1.0e-5)
	rqBaseFactors  = 3                      // add, scale, error
	rqTotalFactors = 5                      // and add_ex, scale_ex
	rqF32Epsilon   = float32(1.1920929e-07) // Rust's f32::EPSILON
)

// rqExTightStart is lance's EX_TIGHT_START: where the search for the
// rescale factor starts, as a share of its end, per ex_bits.
var rqExTightStart = [9]float32{0.0, 0.15, 0.20, 0.52, 0.59, 0.71, 0.75, 0.77, 0.81}

// rqExCodeBytes is the bytes per row of the blocked ex codes of dim
// dimensions (dim padded to a whole number of 64-dimension blocks).
func rqExCodeBytes(dim, exBits int) int {
	return (dim + rqExBlockDims - 1) / rqExBlockDims * rqExBlockDims * exBits / 8
}

// rqExScratch is per-goroutine scratch of the ex-code encoder.
type rqExScratch struct {
	abs    []float32
	values []byte
	cur    []int
	events []uint64
}

// rqExRescale returns the rescale factor t of lance's
// best_ex_rescale_factor for the normalized magnitudes abs: of the
// thresholds where a dimension's code steps up, the one that maximizes
// sum((code+0.5)*abs) / sqrt(sum((code+0.5)^2)).
func rqExRescale(abs []float32, exBits int, sc *rqExScratch) float32 {
	var maxV float32
	for _, v := range abs {
		if !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v)) && v > maxV {
			maxV = v
		}
	}
	if maxV <= 0 {
		return 0
	}
	maxCode := 1<<exBits - 1
	tEnd := float32(maxCode+10) / maxV
	tStart := float32(tEnd * rqExTightStart[exBits])
	cur := sc.cur[:len(abs)]
	events := sc.events[:0]
	sqDen := float32(float32(len(abs)) * 0.25)
	var num float32
	for idx, v := range abs {
		if v <= 0 || math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			cur[idx] = 0
			continue
		}
		c := rqExFloor(float32(tStart*v)+rqExEpsilon, maxCode)
		cur[idx] = c
		sqDen += float32(c*c + c)
		num += float32(float32(float32(c)+0.5) * v)
		for next := c + 1; next <= maxCode; next++ {
			if th := float32(next) / v; th < tEnd {
				events = append(events, uint64(math.Float32bits(th))<<32|uint64(idx))
			}
		}
	}
	// Positive finite floats order as their bits: by threshold, then
	// dimension (lance's order for distinct thresholds).
	slices.Sort(events)
	sc.events = events
	best := num / float32(math.Sqrt(float64(sqDen)))
	bestT := tStart
	for _, e := range events {
		idx := int(uint32(e))
		cur[idx]++
		sqDen += float32(2 * cur[idx])
		num += abs[idx]
		if ip := num / float32(math.Sqrt(float64(sqDen))); ip > best {
			best, bestT = ip, math.Float32frombits(uint32(e>>32))
		}
	}
	return bestT
}

// rqExFloor is floor(x) clamped to [0, maxCode].
func rqExFloor(x float32, maxCode int) int {
	f := math.Floor(float64(x))
	switch {
	case math.IsNaN(f) || f <= 0:
		return 0
	case f >= float64(maxCode):
		return maxCode
	}
	return int(f)
}

// rqExEncode writes the blocked ex code of the rotated residual rr to
// code and its per-dimension values to sc.values, and returns the inner
// product of rr with the full (sign and ex) code, as lance's
// quantize_ex_code.
func rqExEncode(rr []float32, exBits int, code []byte, sc *rqExScratch) float32 {
	values := sc.values[:len(rr)]
	var normSq float32
	for _, x := range rr {
		normSq += float32(x * x)
	}
	if normSq <= rqF32Epsilon || math.IsInf(float64(normSq), 0) || math.IsNaN(float64(normSq)) {
		clear(code)
		clear(values)
		return 0
	}
	norm := float32(math.Sqrt(float64(normSq)))
	abs := sc.abs[:len(rr)]
	for i, x := range rr {
		abs[i] = float32(math.Abs(float64(x))) / norm
	}
	t := rqExRescale(abs, exBits, sc)
	maxCode := 1<<exBits - 1
	bias := -(float32(int(1)<<exBits) - 0.5)
	var dot float32
	for i, x := range rr {
		c := byte(rqExFloor(float32(t*abs[i])+rqExEpsilon, maxCode))
		sign := 1
		if math.Signbit(float64(x)) {
			c = ^c & byte(maxCode)
			sign = 0
		}
		full := sign<<exBits + int(c)
		dot += float32(x * float32(float32(full)+bias))
		values[i] = c
	}
	rqPackBlocked(values, exBits, code)
	return dot
}

// rqPackBlocked packs one value per dimension into lance's blocked ex-code
// layout: 64-dimension blocks (the last zero-padded), interleaved per
// width so that lance's kernels unpack them in dimension order.
func rqPackBlocked(values []byte, exBits int, out []byte) {
	blockBytes := rqExBlockDims * exBits / 8
	var v [rqExBlockDims]byte
	for blk := 0; blk*blockBytes < len(out); blk++ {
		base := blk * rqExBlockDims
		n := copy(v[:], values[base:])
		clear(v[n:])
		o := out[blk*blockBytes : (blk+1)*blockBytes]
		switch exBits {
		case 1:
			for b := 0; b < 8; b++ {
				var x byte
				for t := 0; t < 8; t++ {
					x |= (v[8*b+t] & 1) << t
				}
				o[b] = x
			}
		case 2, 3:
			for b := 0; b < 16; b++ {
				o[b] = v[b]&3 | (v[16+b]&3)<<2 | (v[32+b]&3)<<4 | (v[48+b]&3)<<6
			}
			if exBits == 3 {
				binary.LittleEndian.PutUint64(o[16:24], rqTopPlane(&v, 2))
			}
		case 4:
			for u := 0; u < 4; u++ {
				for b := 0; b < 8; b++ {
					o[8*u+b] = v[16*u+b]&0x0f | (v[16*u+8+b]&0x0f)<<4
				}
			}
		case 5:
			for b := 0; b < 16; b++ {
				o[b] = v[b]&0x0f | (v[16+b]&0x0f)<<4
				o[16+b] = v[32+b]&0x0f | (v[48+b]&0x0f)<<4
			}
			binary.LittleEndian.PutUint64(o[32:40], rqTopPlane(&v, 4))
		case 6, 7:
			for k := 0; k < 3; k++ {
				for b := 0; b < 16; b++ {
					o[16*k+b] = v[16*k+b]&0x3f | ((v[48+b]>>(2*k))&3)<<6
				}
			}
			if exBits == 7 {
				binary.LittleEndian.PutUint64(o[48:56], rqTopPlane(&v, 6))
			}
		case 8:
			copy(o, v[:])
		}
	}
}

// rqTopPlane packs bit top of each of a block's 64 values: the bit of
// dimension 16k+b at bit 8*(b%8) + 2k + b/8.
func rqTopPlane(v *[rqExBlockDims]byte, top int) uint64 {
	var plane uint64
	for k := 0; k < 4; k++ {
		for b := 0; b < 16; b++ {
			plane |= uint64(v[16*k+b]>>top&1) << (8*(b%8) + 2*k + b/8)
		}
	}
	return plane
}
