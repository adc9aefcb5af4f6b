package codec

//go:generate go run bitpack_encode_gen.go

import (
	"math/bits"
)

// PackFL8 packs 1024 values into w bits each in lance's FastLanes layout
// (the transposed order of rust/compression/bitpacking). out must hold
// 1024*w/8 words. The kernels are generated per width (bitpack_encode_kernels.go).
func PackFL8(w int, in *[1024]uint8, out []uint8) { packFL8Kernels[w](in, out) }

// PackFL16 is PackFL8 for 16-bit words.
func PackFL16(w int, in *[1024]uint16, out []uint16) { packFL16Kernels[w](in, out) }

// PackFL32 is PackFL8 for 32-bit words.
func PackFL32(w int, in *[1024]uint32, out []uint32) { packFL32Kernels[w](in, out) }

// PackFL64 is PackFL8 for 64-bit words.
func PackFL64(w int, in *[1024]uint64, out []uint64) { packFL64Kernels[w](in, out) }

func packBlock[T Word](w int, in *[1024]T, out []T) {
	switch p := any(in).(type) {
	case *[1024]uint8:
		PackFL8(w, p, any(out).([]uint8))
	case *[1024]uint16:
		PackFL16(w, p, any(out).([]uint16))
	case *[1024]uint32:
		PackFL32(w, p, any(out).([]uint32))
	case *[1024]uint64:
		PackFL64(w, p, any(out).([]uint64))
	}
}

// MaxBitWidth is the number of bits needed for the largest value (0 if all are 0).
func MaxBitWidth[T Word](vals []T) int {
	var or uint64
	for _, v := range vals {
		or |= uint64(v)
	}
	return bits.Len64(or)
}

func appendWords[T Word](dst []byte, ws []T) []byte {
	return append(dst, AsBytes(ws)...) // little-endian host, like the decoders
}

// AppendInlineBitpacked appends one InlineBitpacking mini-block chunk for up
// to 1024 values: a T-bit word holding the width W, then one full FastLanes
// block of 1024·W/T words (values past len(vals) are zero).
func AppendInlineBitpacked[T Word](dst []byte, vals []T) []byte {
	if len(vals) > FastLanesBlock {
		panic("codec: AppendInlineBitpacked: more than 1024 values")
	}
	var block, out [1024]T
	copy(block[:], vals)
	w := MaxBitWidth(vals)
	hdr := [1]T{T(w)}
	dst = appendWords(dst, hdr[:])
	if w == 0 {
		return dst
	}
	k := BlockWords(bitsOf[T](), w)
	packBlock(w, &block, out[:k])
	return appendWords(dst, out[:k])
}

// InlineBitpackedSize is the byte size AppendInlineBitpacked produces for a
// chunk whose widest value needs w bits.
func InlineBitpackedSize[T Word](w int) int {
	t := bitsOf[T]()
	return t/8 + BlockWords(t, w)*t/8
}

// AppendOutOfLineBitpacked appends vals packed to w bits as consecutive
// FastLanes blocks (OutOfLineBitpacking). A tail of r = n mod 1024 values is
// stored as one zero-padded block if that is smaller than r raw words, else
// raw — the rule lance's writer uses and its reader tells apart by length.
func AppendOutOfLineBitpacked[T Word](dst []byte, vals []T, w int) []byte {
	t := bitsOf[T]()
	wpc := BlockWords(t, w)
	out := make([]T, wpc)
	var block [1024]T
	n := len(vals)
	whole := n / FastLanesBlock
	for k := 0; k < whole; k++ {
		copy(block[:], vals[k*FastLanesBlock:(k+1)*FastLanesBlock])
		packBlock(w, &block, out)
		dst = appendWords(dst, out)
	}
	tail := vals[whole*FastLanesBlock:]
	if len(tail) == 0 {
		return dst
	}
	if wpc < len(tail) {
		block = [1024]T{}
		copy(block[:], tail)
		packBlock(w, &block, out)
		return appendWords(dst, out)
	}
	return appendWords(dst, tail)
}
