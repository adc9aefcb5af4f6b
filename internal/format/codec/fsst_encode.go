package codec

import (
	"encoding/binary"
	"slices"
)

// FSST encoding (Boncz, Neumann, Leis: "FSST: Fast Random Access String
// Compression", VLDB 2020) in the byte format lance's fsst crate decodes:
// codes 0..n-1 stand for symbols of 1..8 bytes, 255 escapes one literal
// byte. The table is trained on a sample with the paper's iterative
// count-and-merge loop; the exact table lance would build is not needed,
// any table decodes.

const (
	fsstEscape       = 255
	fsstMaxSymbols   = 255
	fsstSampleTarget = 1 << 14
	fsstSampleMax    = 1 << 15
	fsstRounds       = 5
)

type fsstSym struct {
	val uint64 // little endian, first byte lowest
	n   uint8
}

func (s fsstSym) mask() uint64 {
	if s.n >= 8 {
		return ^uint64(0)
	}
	return uint64(1)<<(8*s.n) - 1
}

// FSSTEncoder compresses strings with a trained symbol table.
type FSSTEncoder struct {
	syms []fsstSym
	// single[b] is the code of the one-byte symbol b, or -1.
	single [256]int16
	// Symbols of two or more bytes, grouped by their first two bytes
	// (little endian u16 key): codes long[start[k]:start[k+1]], longest
	// first. Two bytes of prefix leave a handful of candidates where one
	// byte left dozens (match was half of a text column's rewrite).
	start []uint32
	long  []fsstCand
}

// fsstCand is a symbol of two or more bytes as match tests it.
type fsstCand struct {
	val, mask uint64
	n, code   uint8
}

func load8(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func newFSSTEncoder(syms []fsstSym) *FSSTEncoder {
	e := &FSSTEncoder{syms: syms, start: make([]uint32, 1<<16+1)}
	for b := range e.single {
		e.single[b] = -1
	}
	var long []uint8
	for c, s := range syms {
		if s.n == 1 {
			if e.single[byte(s.val)] < 0 {
				e.single[byte(s.val)] = int16(c)
			}
			continue
		}
		e.start[int(uint16(s.val))+1]++
		long = append(long, uint8(c))
	}
	for k := 1; k < len(e.start); k++ {
		e.start[k] += e.start[k-1]
	}
	e.long = make([]fsstCand, len(long))
	fill := make([]uint32, 1<<16)
	for _, c := range long {
		s := syms[c]
		k := uint16(s.val)
		e.long[e.start[k]+fill[k]] = fsstCand{val: s.val, mask: s.mask(), n: s.n, code: c}
		fill[k]++
	}
	for k := 0; k < 1<<16; k++ {
		if g := e.long[e.start[k]:e.start[k+1]]; len(g) > 1 {
			slices.SortFunc(g, func(a, b fsstCand) int { return int(b.n) - int(a.n) })
		}
	}
	return e
}

// match returns the code of the longest symbol at the start of b and its
// length, or (-1, 1) if none matches.
func (e *FSSTEncoder) match(b []byte) (int, int) {
	if len(b) >= 2 {
		w := load8(b)
		k := uint16(w)
		for _, s := range e.long[e.start[k]:e.start[int(k)+1]] {
			if (w^s.val)&s.mask == 0 && int(s.n) <= len(b) {
				return int(s.code), int(s.n)
			}
		}
	}
	if c := e.single[b[0]]; c >= 0 {
		return int(c), 1
	}
	return -1, 1
}

// AppendEncode appends the FSST codes for src.
func (e *FSSTEncoder) AppendEncode(dst, src []byte) []byte {
	for len(src) > 0 {
		c, n := e.match(src)
		if c < 0 {
			dst = append(dst, fsstEscape, src[0])
		} else {
			dst = append(dst, byte(c))
		}
		src = src[n:]
	}
	return dst
}

// Table returns the 2312-byte symbol table lance stores in Fsst.symbol_table:
// a u64 header ("FSST" magic, encoder switch on, symbol count), the symbols
// as u64 words, their lengths, zero padding.
func (e *FSSTEncoder) Table() []byte {
	out := make([]byte, FSSTTableLen)
	n := uint64(len(e.syms))
	hdr := uint64(fsstMagic)<<32 | 1<<24 | (n&255)<<16 | n&255
	binary.LittleEndian.PutUint64(out, hdr)
	for i, s := range e.syms {
		binary.LittleEndian.PutUint64(out[8+8*i:], s.val)
		out[8+8*len(e.syms)+i] = s.n
	}
	return out
}

// fsstSample picks whole strings spread over the input, about 16 KiB.
func fsstSample(strs [][]byte) [][]byte {
	total := 0
	for _, s := range strs {
		total += len(s)
	}
	if total <= fsstSampleMax {
		return strs
	}
	var out [][]byte
	got := 0
	step := max(1, total/fsstSampleTarget)
	acc := 0
	for _, s := range strs {
		acc += len(s)
		if acc >= step || len(out) == 0 {
			acc = 0
			if len(s) > 512 {
				s = s[:512]
			}
			out = append(out, s)
			got += len(s)
			if got >= fsstSampleTarget {
				break
			}
		}
	}
	return out
}

// TrainFSST builds a symbol table for strs (a sample is taken internally).
func TrainFSST(strs [][]byte) *FSSTEncoder {
	sample := fsstSample(strs)
	enc := newFSSTEncoder(nil)
	type cand struct {
		s    fsstSym
		gain int
	}
	for round := 0; round < fsstRounds; round++ {
		// count symbols (codes 0..n-1) and literals (256+byte) and adjacent pairs
		count1 := map[int]int{}
		count2 := map[[2]int]int{}
		symOf := func(c int, lit byte) fsstSym {
			if c >= 256 {
				return fsstSym{val: uint64(lit), n: 1}
			}
			return enc.syms[c]
		}
		for _, s := range sample {
			prev := -1
			var prevLit byte
			for len(s) > 0 {
				c, n := enc.match(s)
				lit := s[0]
				if c < 0 {
					c = 256 + int(lit)
				}
				count1[c]++
				if prev >= 0 {
					a, b := symOf(prev, prevLit), symOf(c, lit)
					if a.n+b.n <= 8 {
						count2[[2]int{prev, c}]++
					}
				}
				prev, prevLit = c, lit
				s = s[n:]
			}
		}
		gains := map[fsstSym]int{}
		for c, k := range count1 {
			s := symOf(c, byte(c-256))
			gains[s] += k * int(s.n)
		}
		for p, k := range count2 {
			a, b := symOf(p[0], byte(p[0]-256)), symOf(p[1], byte(p[1]-256))
			s := fsstSym{val: a.val | b.val<<(8*a.n), n: a.n + b.n}
			gains[s] += k * int(s.n)
		}
		cands := make([]cand, 0, len(gains))
		for s, g := range gains {
			cands = append(cands, cand{s, g})
		}
		slices.SortFunc(cands, func(a, b cand) int {
			if a.gain != b.gain {
				return b.gain - a.gain
			}
			if a.s.n != b.s.n {
				return int(b.s.n) - int(a.s.n)
			}
			if a.s.val < b.s.val {
				return -1
			}
			if a.s.val > b.s.val {
				return 1
			}
			return 0
		})
		if len(cands) > fsstMaxSymbols {
			cands = cands[:fsstMaxSymbols]
		}
		syms := make([]fsstSym, len(cands))
		for i, c := range cands {
			syms[i] = c.s
		}
		enc = newFSSTEncoder(syms)
	}
	return enc
}
