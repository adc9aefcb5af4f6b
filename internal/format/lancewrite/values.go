package lancewrite

import (
	"encoding/binary"

	"github.com/apache/arrow-go/v18/arrow/bitutil"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// flatValues: fixed-width values stored as they are (Flat).
type flatValues struct {
	data  []byte
	width int // bytes
}

func (v *flatValues) chunkLen(s, total int) int {
	return pow2Chunk(s, total, maxChunkValues, func(_, n int) bool { return n*v.width <= chunkValueBytes })
}
func (v *flatValues) encode(s, e int) [][]byte                  { return [][]byte{v.data[s*v.width : e*v.width]} }
func (v *flatValues) compression() *enc21pb.CompressiveEncoding { return flat(8 * v.width) }
func (v *flatValues) numBuffers() int                           { return 1 }

// boolValues: one bit per value (Flat{1}); chunks are multiples of 8 values.
type boolValues struct{ bits []byte }

func (v *boolValues) chunkLen(s, total int) int {
	return pow2Chunk(s, total, maxChunkValues, func(_, n int) bool { return true })
}

func (v *boolValues) encode(s, e int) [][]byte {
	n := e - s
	out := make([]byte, bitutil.BytesForBits(int64(n)))
	if s%8 == 0 {
		copy(out, v.bits[s/8:])
		if r := n % 8; r != 0 {
			out[len(out)-1] &= byte(1<<r - 1)
		}
		return [][]byte{out}
	}
	for i := 0; i < n; i++ {
		if bitutil.BitIsSet(v.bits, s+i) {
			bitutil.SetBit(out, i)
		}
	}
	return [][]byte{out}
}
func (v *boolValues) compression() *enc21pb.CompressiveEncoding { return flat(1) }
func (v *boolValues) numBuffers() int                           { return 1 }

// bitpackedValues: InlineBitpacking, one FastLanes block of 1024 values per chunk.
type bitpackedValues struct {
	data  []byte
	width int // bytes: 1, 2, 4 or 8
}

func (v *bitpackedValues) chunkLen(s, total int) int { return min(1024, total-s) }

func (v *bitpackedValues) encode(s, e int) [][]byte {
	return [][]byte{inlineBitpack(v.data[s*v.width:e*v.width], v.width)}
}

// inlineBitpack encodes up to 1024 little-endian words of width bytes as
// one InlineBitpacking chunk.
func inlineBitpack(raw []byte, width int) []byte {
	switch width {
	case 1:
		return codec.AppendInlineBitpacked(nil, raw)
	case 2:
		return codec.AppendInlineBitpacked(nil, codec.AsWords[uint16](raw))
	case 4:
		return codec.AppendInlineBitpacked(nil, codec.AsWords[uint32](raw))
	}
	return codec.AppendInlineBitpacked(nil, codec.AsWords[uint64](raw))
}

func (v *bitpackedValues) compression() *enc21pb.CompressiveEncoding {
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_InlineBitpacking{
		InlineBitpacking: &enc21pb.InlineBitpacking{UncompressedBitsPerValue: uint64(8 * v.width)}}}
}
func (v *bitpackedValues) numBuffers() int { return 1 }

// bitpackedSize is the size of data bitpacked in 1024-value chunks.
func bitpackedSize(data []byte, width int) int {
	n := len(data) / width
	packed, plain := 0, n*width
	for s := 0; s < n; s += 1024 {
		e := min(n, s+1024)
		raw := data[s*width : e*width]
		var w int
		switch width {
		case 1:
			w = codec.MaxBitWidth(raw)
			packed += codec.InlineBitpackedSize[uint8](w)
		case 2:
			w = codec.MaxBitWidth(codec.AsWords[uint16](raw))
			packed += codec.InlineBitpackedSize[uint16](w)
		case 4:
			w = codec.MaxBitWidth(codec.AsWords[uint32](raw))
			packed += codec.InlineBitpackedSize[uint32](w)
		case 8:
			w = codec.MaxBitWidth(codec.AsWords[uint64](raw))
			packed += codec.InlineBitpackedSize[uint64](w)
		}
	}
	_ = plain
	return packed
}

// rleValues: runs of equal values (Rle{values: Flat, run_lengths: Flat{8}}),
// two value buffers per chunk.
type rleValues struct {
	data  []byte
	width int
}

func (v *rleValues) chunkLen(s, total int) int {
	return pow2Chunk(s, total, maxChunkValues, func(s, n int) bool {
		runs := codec.RLERuns(v.data[s*v.width:(s+n)*v.width], v.width)
		return runs*(v.width+1) <= chunkValueBytes
	})
}

func (v *rleValues) encode(s, e int) [][]byte {
	vals, lens := codec.AppendRLE(nil, nil, v.data[s*v.width:e*v.width], v.width)
	return [][]byte{vals, lens}
}

func (v *rleValues) compression() *enc21pb.CompressiveEncoding {
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_Rle{Rle: &enc21pb.Rle{
		Values: flat(8 * v.width), RunLengths: flat(8)}}}
}
func (v *rleValues) numBuffers() int { return 2 }

// fslValues: fixed-size lists of fixed-width items, with an optional item
// validity bitmap as a first buffer per chunk.
type fslValues struct {
	data      []byte
	itemValid []byte // nil: no item nulls
	dim       int
	width     int // bytes per item
}

func (v *fslValues) chunkLen(s, total int) int {
	row := v.dim * v.width
	return pow2Chunk(s, total, maxChunkValues, func(_, n int) bool { return n*row <= chunkValueBytes || n == 1 })
}

func (v *fslValues) encode(s, e int) [][]byte {
	row := v.dim * v.width
	data := v.data[s*row : e*row]
	if v.itemValid == nil {
		return [][]byte{data}
	}
	nb := (e - s) * v.dim
	vb := make([]byte, bitutil.BytesForBits(int64(nb)))
	for i := 0; i < nb; i++ {
		if bitutil.BitIsSet(v.itemValid, s*v.dim+i) {
			bitutil.SetBit(vb, i)
		}
	}
	return [][]byte{vb, data}
}

func (v *fslValues) compression() *enc21pb.CompressiveEncoding {
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_FixedSizeList{FixedSizeList: &enc21pb.FixedSizeList{
		ItemsPerValue: uint64(v.dim), HasValidity: v.itemValid != nil, Values: flat(8 * v.width)}}}
}

func (v *fslValues) numBuffers() int {
	if v.itemValid != nil {
		return 2
	}
	return 1
}

// varValues: variable-width values (Variable with u32 offsets relative to
// the chunk buffer), optionally FSST-coded with one page-level symbol table.
type varValues struct {
	offs  []int64 // n+1
	data  []byte
	fsst  []byte // symbol table, nil when not FSST-coded
	large bool   // u64 offsets (large_string / large_binary)
}

func (v *varValues) offBytes() int {
	if v.large {
		return 8
	}
	return 4
}

func (v *varValues) bytesOf(s, n int) int { return v.offBytes()*(n+1) + int(v.offs[s+n]-v.offs[s]) }

func (v *varValues) chunkLen(s, total int) int {
	return pow2Chunk(s, total, maxChunkValues, func(s, n int) bool { return v.bytesOf(s, n) <= chunkVarBytes || n == 1 })
}

func (v *varValues) encode(s, e int) [][]byte {
	n := e - s
	out := make([]byte, 0, v.bytesOf(s, n)+4)
	ob := v.offBytes()
	base := int64(ob*(n+1)) - v.offs[s]
	for i := s; i <= e; i++ {
		if v.large {
			out = binary.LittleEndian.AppendUint64(out, uint64(v.offs[i]+base))
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(v.offs[i]+base))
		}
	}
	out = append(out, v.data[v.offs[s]:v.offs[e]]...)
	return [][]byte{pad(out, ob, padByte)}
}

func (v *varValues) compression() *enc21pb.CompressiveEncoding {
	inner := variableOf(v.large)
	if v.fsst != nil {
		return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_Fsst{Fsst: &enc21pb.Fsst{SymbolTable: v.fsst, Values: inner}}}
	}
	return inner
}
func (v *varValues) numBuffers() int { return 1 }
