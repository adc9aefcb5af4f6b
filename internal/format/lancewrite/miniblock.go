package lancewrite

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

const (
	maxChunkValues  = 4096  // lance's MAX_MINIBLOCK_VALUES
	chunkValueBytes = 8192  // target bytes of fixed-width values per chunk
	chunkVarBytes   = 4096  // lance's AIM_MINICHUNK_SIZE for variable width
	maxChunkBytes   = 32768 // hard limit of the chunk metadata word
	maxU16          = 65535
	chunkFill       = 0xFE // lance's FILL_BYTE inside mini-block chunks
)

// mbValues produces the value buffers of a mini-block page chunk by chunk.
type mbValues interface {
	// chunkLen returns how many value slots the chunk starting at slot s
	// takes: a power of two, or everything left for the last chunk.
	chunkLen(s, total int) int
	// encode returns the value buffers of slots [s, e).
	encode(s, e int) [][]byte
	// compression describes the value buffers (MiniBlockLayout.value_compression).
	compression() *enc21pb.CompressiveEncoding
	numBuffers() int
}

// pow2Chunk returns the chunk length for slot s: everything left if it fits,
// else the largest power of two that fits (at least 1).
func pow2Chunk(s, total, maxN int, fits func(s, n int) bool) int {
	rem := total - s
	if rem <= maxN && fits(s, rem) {
		return rem
	}
	n := 1
	for n*2 <= maxN && n*2 <= rem && fits(s, n*2) {
		n *= 2
	}
	return n
}

func flat(bitsPer int) *enc21pb.CompressiveEncoding {
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_Flat{Flat: &enc21pb.Flat{BitsPerValue: uint64(bitsPer)}}}
}

// variableOf is Variable with u32 offsets, or u64 for large types.
func variableOf(large bool) *enc21pb.CompressiveEncoding {
	b := 32
	if large {
		b = 64
	}
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_Variable{Variable: &enc21pb.Variable{Offsets: flat(b)}}}
}

func oolBitpacked(w int) *enc21pb.CompressiveEncoding {
	return &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_OutOfLineBitpacking{OutOfLineBitpacking: &enc21pb.OutOfLineBitpacking{UncompressedBitsPerValue: 16, Values: flat(w)}}}
}

func pad(b []byte, to int, fill byte) []byte {
	for len(b)%to != 0 {
		b = append(b, fill)
	}
	return b
}

// padFrom pads b with fill until len(b)-start is a multiple of to.
func padFrom(b []byte, start, to int, fill byte) []byte {
	for (len(b)-start)%to != 0 {
		b = append(b, fill)
	}
	return b
}

// miniBlockPage encodes one mini-block page from levels and value slots.
func miniBlockPage(lv levels, nvis int, vals mbValues, dict *dictPage) ([][]byte, *enc21pb.MiniBlockLayout, error) {
	layout := &enc21pb.MiniBlockLayout{
		ValueCompression: vals.compression(),
		Layers:           lv.layers,
		NumBuffers:       uint64(vals.numBuffers()),
		NumItems:         uint64(nvis),
	}
	repW, defW := bitLen16(lv.maxRep), bitLen16(lv.maxDef)
	if lv.rep != nil {
		layout.RepCompression = oolBitpacked(repW)
		layout.RepetitionIndexDepth = 1
	}
	if lv.def != nil {
		layout.DefCompression = oolBitpacked(defW)
	}
	var meta, data, repIndex []byte
	n0bytes := -1 // size of the first chunk
	pos := 0      // next level entry
	for s := 0; s < nvis || (s == 0 && nvis == 0); {
		n := vals.chunkLen(s, nvis)
		last := s+n >= nvis
		end := lv.chunkEnd(pos, s, n, last)
		if lv.visible == nil {
			pos = s
		}
		if end-pos > maxU16 && (lv.rep != nil || lv.def != nil) {
			return nil, nil, fmt.Errorf("lancewrite: mini-block chunk with %d levels (max %d)", end-pos, maxU16)
		}
		var rb, db []byte
		nlev := 0
		if lv.rep != nil {
			rb = codec.AppendOutOfLineBitpacked(nil, lv.rep[pos:end], repW)
		}
		if lv.def != nil {
			db = codec.AppendOutOfLineBitpacked(nil, lv.def[pos:end], defW)
		}
		if lv.rep != nil || lv.def != nil {
			nlev = end - pos
		}
		// The chunk is encoded in place at the end of data (no copy); data
		// is sized once from the first chunk (chunks are of similar size).
		cstart := len(data)
		if s > 0 && cstart == n0bytes {
			data = slices.Grow(data, n0bytes*((nvis-s)/max(n, 1)+1))
		}
		var err error
		if data, err = appendChunk(data, nlev, lv.rep != nil, rb, lv.def != nil, db, vals.encode(s, s+n)); err != nil {
			return nil, nil, err
		}
		clen := len(data) - cstart
		if s == 0 {
			n0bytes = clen
		}
		logN, err := chunkLog(n, last)
		if err != nil {
			return nil, nil, err
		}
		meta = binary.LittleEndian.AppendUint16(meta, uint16((clen/8-1)<<4|logN))
		if lv.rep != nil {
			finished, partial := lv.repIndexEntry(pos, end, last)
			repIndex = binary.LittleEndian.AppendUint64(repIndex, finished)
			repIndex = binary.LittleEndian.AppendUint64(repIndex, partial)
		}
		pos = end
		s += n
		if n == 0 {
			break
		}
	}
	bufs := [][]byte{meta, data}
	if dict != nil {
		bufs = append(bufs, dict.buf)
		layout.Dictionary = dict.enc
		layout.NumDictionaryItems = uint64(dict.n)
	}
	if lv.rep != nil {
		bufs = append(bufs, repIndex)
	}
	return bufs, layout, nil
}

// chunkEnd is the level entry after a chunk of n visible values starting
// at value s (levels from pos): up to and including the entry of its last
// visible value; trailing invisible entries go to the next chunk, the
// last chunk takes every entry left.
func (lv levels) chunkEnd(pos, s, n int, last bool) int {
	switch {
	case last:
		return lv.entries
	case lv.visible == nil:
		return s + n
	}
	seen, j := 0, pos
	for ; j < lv.entries; j++ {
		if lv.visible[j] {
			seen++
			if seen == n {
				return j + 1
			}
		}
	}
	return j
}

// appendChunk appends one mini-block chunk to data: the level count and
// buffer sizes, then the rep levels, def levels and value buffers, each
// padded to 8 bytes from the chunk's start.
func appendChunk(data []byte, nlev int, hasRep bool, rb []byte, hasDef bool, db []byte, vbufs [][]byte) ([]byte, error) {
	cstart := len(data)
	chunk := binary.LittleEndian.AppendUint16(data, uint16(nlev))
	if hasRep {
		chunk = binary.LittleEndian.AppendUint16(chunk, uint16(len(rb)))
	}
	if hasDef {
		chunk = binary.LittleEndian.AppendUint16(chunk, uint16(len(db)))
	}
	for _, vb := range vbufs {
		if len(vb) > maxU16 {
			return nil, fmt.Errorf("lancewrite: mini-block value buffer of %d bytes (max %d)", len(vb), maxU16)
		}
		chunk = binary.LittleEndian.AppendUint16(chunk, uint16(len(vb)))
	}
	chunk = padFrom(chunk, cstart, 8, chunkFill)
	for _, b := range [][]byte{rb, db} {
		if b != nil {
			chunk = padFrom(append(chunk, b...), cstart, 8, chunkFill)
		}
	}
	for _, b := range vbufs {
		if b != nil {
			chunk = padFrom(append(chunk, b...), cstart, 8, chunkFill)
		}
	}
	if clen := len(chunk) - cstart; clen > maxChunkBytes {
		return nil, fmt.Errorf("lancewrite: mini-block chunk of %d bytes (max %d)", clen, maxChunkBytes)
	}
	return chunk, nil
}

// chunkLog is the log2 of a chunk's value count as the chunk table holds
// it: 0 for the last chunk (its count comes from num_items), else n must
// be a power of two.
func chunkLog(n int, last bool) (int, error) {
	if last {
		return 0, nil
	}
	logN := 0
	for 1<<logN < n {
		logN++
	}
	if 1<<logN != n {
		return 0, fmt.Errorf("lancewrite: internal: chunk of %d values is not a power of two", n)
	}
	return logN, nil
}

// repIndexEntry is a chunk's repetition index entry (levels [pos, end)):
// the rows it finishes and, when its last row goes on in the next chunk,
// how many of that row's levels it holds.
func (lv levels) repIndexEntry(pos, end int, last bool) (finished, partial uint64) {
	r := lv.rep[pos:end]
	for _, x := range r[1:] {
		if x == lv.maxRep {
			finished++
		}
	}
	if last || lv.rep[end] == lv.maxRep {
		return finished + 1, 0
	}
	for k := len(r) - 1; k >= 0; k-- {
		if r[k] == lv.maxRep {
			return finished, uint64(len(r) - k)
		}
	}
	return finished, uint64(len(r))
}
