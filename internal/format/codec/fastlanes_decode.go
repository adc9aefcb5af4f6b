package codec

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

//go:generate go run gen_fastlanes_decode.go

// ErrCorrupt is wrapped by every decode error of this package.
var ErrCorrupt = errors.New("codec: corrupt data")

// FastLanesBlock is the number of values in one FastLanes block.
const FastLanesBlock = 1024

// Word is a FastLanes word type.
type Word interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

// BlockWords returns how many T-bit words a block of 1024 values packed to
// w bits occupies.
func BlockWords(t, w int) int { return 1024 * w / t }

// Unpack8 unpacks one FastLanes block of 1024 values of w bits from in
// (BlockWords(8,w) words) into out.
func Unpack8(in []uint8, w int, out *[1024]uint8) { unpackT(in, w, out, unpack8Kernels[:]) }

// Unpack16 is Unpack8 for 16-bit words.
func Unpack16(in []uint16, w int, out *[1024]uint16) { unpackT(in, w, out, unpack16Kernels[:]) }

// Unpack32 is Unpack8 for 32-bit words.
func Unpack32(in []uint32, w int, out *[1024]uint32) { unpackT(in, w, out, unpack32Kernels[:]) }

// Unpack64 is Unpack8 for 64-bit words.
func Unpack64(in []uint64, w int, out *[1024]uint64) { unpackT(in, w, out, unpack64Kernels[:]) }

func unpackT[T Word](in []T, w int, out *[1024]T, kernels []func([]T, *[1024]T)) {
	if w == 0 {
		*out = [1024]T{}
		return
	}
	kernels[w](in, out)
}

// words reinterprets b as a slice of T (little-endian host).
func words[T Word](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) < sz {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz)
}

// AsWords reinterprets a little-endian byte slice as T words (no copy).
func AsWords[T Word](b []byte) []T { return words[T](b) }

// AsBytes reinterprets a word slice as bytes (no copy).
func AsBytes[T Word](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(z)))
}

func unpackBlock[T Word](in []T, w int, out *[1024]T) {
	// Pointer casts (not interface conversions) keep out on the caller's
	// stack or in the caller's slice.
	p := unsafe.Pointer(unsafe.SliceData(in))
	o := unsafe.Pointer(out)
	switch bitsOf[T]() {
	case 8:
		Unpack8(unsafe.Slice((*uint8)(p), len(in)), w, (*[1024]uint8)(o))
	case 16:
		Unpack16(unsafe.Slice((*uint16)(p), len(in)), w, (*[1024]uint16)(o))
	case 32:
		Unpack32(unsafe.Slice((*uint32)(p), len(in)), w, (*[1024]uint32)(o))
	default:
		Unpack64(unsafe.Slice((*uint64)(p), len(in)), w, (*[1024]uint64)(o))
	}
}

// appendBlock unpacks one block straight into dst's spare capacity and
// keeps the first n values.
func appendBlock[T Word](dst []T, in []T, w, n int) []T {
	l := len(dst)
	dst = slices.Grow(dst, FastLanesBlock)[:l+FastLanesBlock]
	unpackBlock(in, w, (*[1024]T)(dst[l:]))
	return dst[:l+n]
}

func bitsOf[T Word]() int {
	var z T
	return int(unsafe.Sizeof(z)) * 8
}

// DecodeInlineBitpacked decodes one mini-block chunk written with
// InlineBitpacking: a T-bit word holding the bit width W followed by one
// FastLanes block of 1024·W/T words. The first n (≤1024) values are appended
// to dst as T-bit little-endian words.
func DecodeInlineBitpacked[T Word](dst []T, src []byte, n int) ([]T, error) {
	t := bitsOf[T]()
	if n > FastLanesBlock {
		return dst, fmt.Errorf("%w: inline bitpacked chunk of %d values (max 1024)", ErrCorrupt, n)
	}
	in := words[T](src)
	if len(in) < 1 {
		return dst, fmt.Errorf("%w: inline bitpacked chunk of %d bytes has no width header", ErrCorrupt, len(src))
	}
	if uint64(in[0]) > uint64(t) {
		return dst, fmt.Errorf("%w: inline bitpacking width %d > %d", ErrCorrupt, uint64(in[0]), t)
	}
	w := int(in[0])
	need := BlockWords(t, w)
	if len(in)-1 < need {
		return dst, fmt.Errorf("%w: inline bitpacked chunk needs %d words, has %d", ErrCorrupt, need, len(in)-1)
	}
	return appendBlock(dst, in[1:1+need], w, n), nil
}

// DecodeOutOfLineBitpacked decodes a buffer of n values packed to w bits in
// consecutive FastLanes blocks; the tail (n mod 1024 values) is either raw
// T-bit words or one more padded block, told apart by the buffer length.
func DecodeOutOfLineBitpacked[T Word](dst []T, src []byte, w, n int) ([]T, error) {
	t := bitsOf[T]()
	if w < 0 || w > t {
		return dst, fmt.Errorf("%w: out-of-line bitpacking width %d for %d-bit words", ErrCorrupt, w, t)
	}
	in := words[T](src)
	wpc := BlockWords(t, w)
	whole, tail := n/FastLanesBlock, n%FastLanesBlock
	if len(in) < whole*wpc {
		return dst, fmt.Errorf("%w: out-of-line bitpacked buffer has %d words, %d blocks need %d", ErrCorrupt, len(in), whole, whole*wpc)
	}
	dst = slices.Grow(dst, n)
	for k := 0; k < whole; k++ {
		dst = appendBlock(dst, in[k*wpc:(k+1)*wpc], w, FastLanesBlock)
	}
	if tail == 0 {
		return dst, nil
	}
	rest := in[whole*wpc:]
	switch {
	case len(rest) == tail:
		return append(dst, rest...), nil
	case len(rest) >= wpc:
		return appendBlock(dst, rest[:wpc], w, tail), nil
	}
	return dst, fmt.Errorf("%w: out-of-line bitpacked tail of %d values has %d words (want %d raw or %d packed)", ErrCorrupt, tail, len(rest), tail, wpc)
}
