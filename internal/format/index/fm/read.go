package fm

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// Partition is a decoded partition file: what lance loads to search it.
type Partition struct {
	// BWTLen is the length of the partition's text (and BWT).
	BWTLen int
	// RowIDs are the documents' row addresses, DocStarts their offsets in
	// the text.
	RowIDs, DocStarts []uint64
	// CTable[c] counts the text's bytes below c.
	CTable []uint64
	// SASamples are every SASampleRate-th suffix array entry.
	SASamples []uint64

	codes    *[256]code
	children [][2]child
	nodes    []rankBits
}

// rankBits is a bit vector with the set bits before each word.
type rankBits struct {
	words  []uint64
	before []uint64
	n      uint64
}

func (r *rankBits) get(i uint64) bool { return r.words[i/64]>>(i%64)&1 != 0 }

func (r *rankBits) rank1(i uint64) uint64 {
	w := i / 64
	n := r.before[w]
	if b := i % 64; b > 0 {
		n += uint64(bits.OnesCount64(r.words[w] & (1<<b - 1)))
	}
	return n
}

func (r *rankBits) rank0(i uint64) uint64 { return i - r.rank1(i) }

// ReadPartition decodes a partition file, checking that its metadata and
// rows agree.
func ReadPartition(ctx context.Context, f *lancefile.File) (*Partition, error) {
	md := f.Descriptor.GetSchema().GetMetadata()
	num := func(key string) (int, error) {
		v, err := strconv.Atoi(string(md[key]))
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%w: %s: %s %q", ErrCorrupt, f.Name(), key, md[key])
		}
		return v, nil
	}
	u64s := func(key string) ([]uint64, error) {
		raw, err := hex.DecodeString(string(md[key]))
		if err != nil || len(raw)%8 != 0 {
			return nil, fmt.Errorf("%w: %s: %s is not hex of u64s", ErrCorrupt, f.Name(), key)
		}
		out := make([]uint64, len(raw)/8)
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(raw[8*i:])
		}
		return out, nil
	}
	p := &Partition{}
	var nNodes, waveletRows, saBlocks, saLen int
	var err error
	for _, v := range []struct {
		dst *int
		key string
	}{{&p.BWTLen, KeyBWTLen}, {&nNodes, KeyNumBWTNodes}, {&waveletRows, KeyTotalWaveletRows}, {&saBlocks, KeyNumSABlocks}, {&saLen, KeySASamplesLen}} {
		if *v.dst, err = num(v.key); err != nil {
			return nil, err
		}
	}
	if rate, _ := num(KeySASampleRate); rate != SASampleRate {
		return nil, fmt.Errorf("%w: %s: sa_sample_rate %q (lance 8.0.0 writes %d)", ErrUnsupported, f.Name(), md[KeySASampleRate], SASampleRate)
	}
	if p.RowIDs, err = u64s(KeyRowIDs); err != nil {
		return nil, err
	}
	if p.DocStarts, err = u64s(KeyDocStartPositions); err != nil {
		return nil, err
	}
	if p.CTable, err = u64s(KeyCTable); err != nil {
		return nil, err
	}
	if len(p.CTable) != 257 || len(p.RowIDs) != len(p.DocStarts) {
		return nil, fmt.Errorf("%w: %s: c_table of %d entries, %d row ids, %d doc starts", ErrCorrupt, f.Name(), len(p.CTable), len(p.RowIDs), len(p.DocStarts))
	}
	raw, err := hex.DecodeString(string(md[KeyHuffmanCodes]))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: huffman_codes: %v", ErrCorrupt, f.Name(), err)
	}
	if p.codes, err = decodeCodes(raw); err != nil {
		return nil, err
	}
	if raw, err = hex.DecodeString(string(md[KeyTreeTopology])); err != nil {
		return nil, fmt.Errorf("%w: %s: tree_topology: %v", ErrCorrupt, f.Name(), err)
	}
	if p.children, err = decodeTopology(raw); err != nil {
		return nil, err
	}
	if len(p.children) != nNodes || uint64(waveletRows+saBlocks) != f.NumRows() {
		return nil, fmt.Errorf("%w: %s: %d nodes in the topology, num_bwt_nodes %d; %d rows, %d + %d recorded", ErrCorrupt, f.Name(), len(p.children), nNodes, f.NumRows(), waveletRows, saBlocks)
	}
	p.nodes = make([]rankBits, nNodes)
	if f.NumRows() > 0 {
		if err := p.readRows(ctx, f, waveletRows, saLen); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// readRows reads the bit vectors and the suffix array samples.
func (p *Partition) readRows(ctx context.Context, f *lancefile.File, waveletRows, saLen int) error {
	rec, err := f.ReadAll(ctx, nil)
	if err != nil {
		return err
	}
	defer rec.Release()
	node, ok1 := rec.Column(0).(*array.Uint32)
	words, ok2 := rec.Column(2).(*array.LargeBinary)
	prefix, ok3 := rec.Column(3).(*array.Uint64)
	blen, ok4 := rec.Column(4).(*array.Uint64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return fmt.Errorf("%w: %s: schema %s", ErrUnsupported, f.Name(), rec.Schema())
	}
	le := func(b []byte) []uint64 {
		out := make([]uint64, len(b)/8)
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return out
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		if len(words.Value(i))%8 != 0 {
			return fmt.Errorf("%w: %s: row %d holds %d bytes", ErrCorrupt, f.Name(), i, len(words.Value(i)))
		}
		if i >= waveletRows {
			p.SASamples = append(p.SASamples, le(words.Value(i))...)
			continue
		}
		id := int(node.Value(i))
		if id >= len(p.nodes) {
			return fmt.Errorf("%w: %s: row %d names node %d of %d", ErrCorrupt, f.Name(), i, id, len(p.nodes))
		}
		r := &p.nodes[id]
		if r.n = blen.Value(i); prefix.Value(i) != popcount(r.words) {
			return fmt.Errorf("%w: %s: row %d: prefix_rank %d, %d bits set before", ErrCorrupt, f.Name(), i, prefix.Value(i), popcount(r.words))
		}
		r.words = append(r.words, le(words.Value(i))...)
	}
	if len(p.SASamples) < saLen {
		return fmt.Errorf("%w: %s: %d suffix array samples, %d recorded", ErrCorrupt, f.Name(), len(p.SASamples), saLen)
	}
	p.SASamples = p.SASamples[:saLen]
	for i := range p.nodes {
		r := &p.nodes[i]
		if uint64(len(r.words)) < (r.n+63)/64 {
			return fmt.Errorf("%w: %s: node %d holds %d words for %d bits", ErrCorrupt, f.Name(), i, len(r.words), r.n)
		}
		r.before = make([]uint64, len(r.words)+1)
		for j, w := range r.words {
			r.before[j+1] = r.before[j] + uint64(bits.OnesCount64(w))
		}
	}
	return nil
}

// access returns the BWT's byte at pos (walking the wavelet tree).
func (p *Partition) access(pos uint64) byte {
	id := 0
	for {
		r := &p.nodes[id]
		side := 0
		if r.get(pos) {
			side, pos = 1, r.rank1(pos)
		} else {
			pos = r.rank0(pos)
		}
		c := p.children[id][side]
		if c.leaf {
			return byte(c.v)
		}
		id = int(c.v)
	}
}

// rank counts byte c in the BWT's positions [0, pos).
func (p *Partition) rank(c byte, pos uint64) uint64 {
	cd := &p.codes[c]
	if cd.length == 0 {
		return 0
	}
	for lvl, id := range cd.path {
		r := &p.nodes[id]
		if cd.bits>>(uint(cd.length)-1-uint(lvl))&1 == 1 {
			pos = r.rank1(pos)
		} else {
			pos = r.rank0(pos)
		}
	}
	return pos
}

// Search returns the row addresses of the documents holding pattern, each
// once, as lance's search_row_addrs finds them: backward search for the
// pattern's range of suffixes, then each suffix located through the
// samples and mapped to its document.
func (p *Partition) Search(pattern []byte) []uint64 {
	if len(pattern) == 0 || p.BWTLen == 0 {
		return nil
	}
	lo, hi := uint64(0), uint64(p.BWTLen)
	for i := len(pattern) - 1; i >= 0; i-- {
		c := pattern[i]
		lo, hi = p.CTable[c]+p.rank(c, lo), p.CTable[c]+p.rank(c, hi)
		if lo >= hi {
			return nil
		}
	}
	seen := map[uint64]bool{}
	var out []uint64
	for i := lo; i < hi; i++ {
		pos := p.locate(i)
		d, _ := slicesSearch(p.DocStarts, pos)
		row := p.RowIDs[d]
		if !seen[row] {
			seen[row] = true
			out = append(out, row)
		}
	}
	return out
}

// locate is the text position of the suffix at BWT position pos.
func (p *Partition) locate(pos uint64) uint64 {
	n := uint64(p.BWTLen)
	for steps := uint64(0); steps < n; steps++ {
		if pos%SASampleRate == 0 && pos/SASampleRate < uint64(len(p.SASamples)) {
			return (p.SASamples[pos/SASampleRate] + steps) % n
		}
		c := p.access(pos)
		pos = p.CTable[c] + p.rank(c, pos)
	}
	return 0
}

// slicesSearch is the index of the last start at or before pos.
func slicesSearch(starts []uint64, pos uint64) (int, bool) {
	lo, hi := 0, len(starts)
	for lo < hi {
		m := (lo + hi) / 2
		if starts[m] <= pos {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1, lo > 0
}
