package text

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Posting and position codecs of lance 8.0.0's inverted index, format V1
// (posting_tail_codec "fixed32_v1", positions stored per document), from
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/inverted/encoding.rs.
//
// A posting list is a list of blocks of blockSize docs. A full block is
//
//	f32 block max score | u32 first doc id | u8 bits | doc id deltas packed | u8 bits | frequencies packed
//
// packed with the SIMD-BP128 "4x" layout of the Rust bitpacking crate
// (BitPacker4x): 128 values as 4 interleaved lanes of 32, lane j holding
// values j, j+4, j+8, ...; each lane packs its values LSB first into u32
// words and word k of lane j is stored at u32 index 4k+j. Doc ids are
// delta-coded against the previous value (the first against itself), so a
// block of n bits takes 16*n bytes. The last, partial block is
//
//	f32 block max score | u32 doc ids... | u32 frequencies...
//
// A document's positions are one list of binaries: the u32 count, then
// each full chunk of 128 positions as u32 first | u8 bits | packed deltas,
// then the remaining positions as raw u32s.

const blockSize = 128

// numBits is the bit width of the largest value.
func numBits(vals []uint32) uint8 {
	var or uint32
	for _, v := range vals {
		or |= v
	}
	return uint8(bits.Len32(or))
}

// pack4x appends the 4x bit-packed form of 128 values of width nb.
func pack4x(dst []byte, vals []uint32, nb uint8) []byte {
	if nb == 0 {
		return dst
	}
	words := make([]uint32, 4*int(nb))
	for j := 0; j < 4; j++ {
		for i := 0; i < 32; i++ {
			v := uint64(vals[4*i+j])
			off := i * int(nb)
			w, s := off/32, off%32
			words[4*w+j] |= uint32(v << s)
			if s+int(nb) > 32 {
				words[4*(w+1)+j] |= uint32(v >> (32 - s))
			}
		}
	}
	for _, w := range words {
		dst = binary.LittleEndian.AppendUint32(dst, w)
	}
	return dst
}

// unpack4x decodes 128 values of width nb from src (16*nb bytes).
func unpack4x(out []uint32, src []byte, nb uint8) {
	if nb == 0 {
		clear(out[:blockSize])
		return
	}
	mask := uint64(1)<<nb - 1
	for j := 0; j < 4; j++ {
		for i := 0; i < 32; i++ {
			off := i * int(nb)
			w, s := off/32, off%32
			v := uint64(binary.LittleEndian.Uint32(src[4*(4*w+j):])) >> s
			if s+int(nb) > 32 {
				v |= uint64(binary.LittleEndian.Uint32(src[4*(4*(w+1)+j):])) << (32 - s)
			}
			out[4*i+j] = uint32(v & mask)
		}
	}
}

// appendSorted appends u32 first | u8 bits | packed deltas of 128 sorted
// values.
func appendSorted(dst []byte, vals []uint32, scratch []uint32) []byte {
	prev := vals[0]
	for i, v := range vals {
		scratch[i] = v - prev
		prev = v
	}
	nb := numBits(scratch[:blockSize])
	dst = binary.LittleEndian.AppendUint32(dst, vals[0])
	dst = append(dst, nb)
	return pack4x(dst, scratch[:blockSize], nb)
}

// readSorted is the inverse of appendSorted; it returns the bytes used.
func readSorted(out []uint32, src []byte) (int, error) {
	if len(src) < 5 {
		return 0, fmt.Errorf("sorted block of %d bytes", len(src))
	}
	first, nb := binary.LittleEndian.Uint32(src), src[4]
	n := 5 + 16*int(nb)
	if nb > 32 || len(src) < n {
		return 0, fmt.Errorf("sorted block: %d bits in %d bytes", nb, len(src))
	}
	unpack4x(out, src[5:], nb)
	acc := first
	for i := range out[:blockSize] {
		acc += out[i]
		out[i] = acc
	}
	return n, nil
}

func appendPacked(dst []byte, vals []uint32) []byte {
	nb := numBits(vals[:blockSize])
	dst = append(dst, nb)
	return pack4x(dst, vals[:blockSize], nb)
}

func readPacked(out []uint32, src []byte) (int, error) {
	if len(src) < 1 {
		return 0, fmt.Errorf("packed block of 0 bytes")
	}
	nb := src[0]
	n := 1 + 16*int(nb)
	if nb > 32 || len(src) < n {
		return 0, fmt.Errorf("packed block: %d bits in %d bytes", nb, len(src))
	}
	unpack4x(out, src[1:], nb)
	return n, nil
}

// decodePostings appends the documents and frequencies of a posting list
// of length documents, stored in blocks, to docs and freqs (block max
// scores are skipped).
func decodePostings(docs, freqs []uint32, blocks [][]byte, length int, scratch []uint32) ([]uint32, []uint32, error) {
	if err := checkBlockCount(len(blocks), length); err != nil {
		return docs, freqs, err
	}
	for i, b := range blocks {
		var err error
		if docs, freqs, err = decodeBlock(docs, freqs, b, i, length, scratch); err != nil {
			return docs, freqs, err
		}
	}
	return docs, freqs, nil
}

// checkBlockCount checks that a posting list of length documents has n
// blocks: one per blockSize documents and one for the rest.
func checkBlockCount(n, length int) error {
	want := (length + blockSize - 1) / blockSize
	if n != want {
		return fmt.Errorf("%d blocks for %d docs, want %d", n, length, want)
	}
	return nil
}

// decodeBlock appends the documents and frequencies of block i of a
// posting list of length documents to docs and freqs: a full block of
// blockSize documents (bit-packed), or the last, shorter one (plain).
func decodeBlock(docs, freqs []uint32, b []byte, i, length int, scratch []uint32) ([]uint32, []uint32, error) {
	full, tail := length/blockSize, length%blockSize
	if len(b) < 4 {
		return docs, freqs, fmt.Errorf("posting block %d has %d bytes", i, len(b))
	}
	b = b[4:]
	if i < full {
		n, err := readSorted(scratch, b)
		if err != nil {
			return docs, freqs, fmt.Errorf("posting block %d doc ids: %w", i, err)
		}
		docs = append(docs, scratch[:blockSize]...)
		m, err := readPacked(scratch, b[n:])
		if err != nil {
			return docs, freqs, fmt.Errorf("posting block %d frequencies: %w", i, err)
		}
		if n+m != len(b) {
			return docs, freqs, fmt.Errorf("posting block %d has %d trailing bytes", i, len(b)-n-m)
		}
		return docs, append(freqs, scratch[:blockSize]...), nil
	}
	if len(b) != 8*tail {
		return docs, freqs, fmt.Errorf("tail block of %d docs has %d bytes, want %d", tail, len(b), 8*tail)
	}
	for k := 0; k < tail; k++ {
		docs = append(docs, binary.LittleEndian.Uint32(b[4*k:]))
	}
	for k := 0; k < tail; k++ {
		freqs = append(freqs, binary.LittleEndian.Uint32(b[4*(tail+k):]))
	}
	return docs, freqs, nil
}

// encodeFull appends one full block (score filled in later).
func encodeFull(dst []byte, docs, freqs []uint32, score float32, scratch []uint32) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(score))
	dst = appendSorted(dst, docs, scratch)
	return appendPacked(dst, freqs)
}

// encodeTail appends a partial (fixed32) block.
func encodeTail(dst []byte, docs, freqs []uint32, score float32) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(score))
	for _, d := range docs {
		dst = binary.LittleEndian.AppendUint32(dst, d)
	}
	for _, f := range freqs {
		dst = binary.LittleEndian.AppendUint32(dst, f)
	}
	return dst
}

// encodeGroupStarts writes the posting group starts as varint deltas.
func encodeGroupStarts(starts []uint32) []byte {
	var out []byte
	prev := uint32(0)
	for _, s := range starts {
		out = binary.AppendUvarint(out, uint64(s-prev))
		prev = s
	}
	return out
}

func decodeGroupStarts(b []byte) ([]uint32, error) {
	var out []uint32
	prev := uint64(0)
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || prev+d > math.MaxUint32 {
			return nil, fmt.Errorf("bad group start varint")
		}
		prev += d
		out = append(out, uint32(prev))
		b = b[n:]
	}
	return out, nil
}
