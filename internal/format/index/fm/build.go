package fm

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/index"
)

// maxText is the most text (documents, separators, terminator) one
// partition may hold: suffix array entries are int32.
const maxText = math.MaxInt32

// Builder writes an FM segment as lance 8.0.0's FM index builder
// (write_partitioned_fmindex_stream in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/fmindex.rs)
// writes it for the same rows in the same order: null rows are left out;
// each other row is a document, its bytes with 0x00 and 0xFF replaced by a
// space; every PartitionDocs documents make one partition file
// (part_<p>_fm.lance), an FM index of their own; a segment of no document
// is one empty partition 0.
//
// A partition is the concatenation of its documents, each followed by
// 0xFF, and a final 0x00; its suffix array (unique, so equal to the one
// lance builds with libsais) gives the Burrows-Wheeler transform, stored as
// a Huffman-shaped wavelet tree (lance's tie-breaking between equal
// frequencies), every 32nd suffix array entry, the count table, and the
// documents' row addresses and start offsets.
//
// Memory: one partition at a time: its text, a 4-byte suffix array entry
// and a BWT byte per text byte, its wavelet tree (at most a byte per text
// byte), about 6 times the partition's text in all; maxBytes bounds the
// text (ErrTooLarge past it).
type Builder struct {
	ctx      context.Context
	out      index.SegmentWriter
	maxBytes int64

	text   []byte
	rows   []uint64
	starts []uint64
	last   uint64
	any    bool
	// unordered: the rows are stable row ids (StableRowIDs), unique but
	// in no order.
	unordered bool

	// Reused between partitions.
	sa  []int32
	bwt []byte

	res Result
}

// Result describes a built segment.
type Result struct {
	// Docs are the documents indexed (non-null rows); Nulls the rows
	// left out.
	Docs, Nulls uint64
	// Text is the documents' bytes; MaxPartitionText the largest
	// partition's text (documents, separators and terminator).
	Text, MaxPartitionText uint64
	// Files are the partition files written, in partition order (the
	// order lance lists them in the index entry).
	Files []string
}

// NewBuilder starts a segment written through out. maxBytes bounds one
// partition's text (DefaultBuildBytes when it is 0 or less).
func NewBuilder(ctx context.Context, out index.SegmentWriter, maxBytes int64) *Builder {
	if maxBytes <= 0 {
		maxBytes = DefaultBuildBytes
	}
	return &Builder{ctx: ctx, out: out, maxBytes: min(maxBytes, maxText)}
}

// StableRowIDs has the builder take the rows' stable row ids (a table
// with stable row ids) instead of their row addresses: unique, in the
// rows' address order, so not ascending once a row moved.
func (b *Builder) StableRowIDs() { b.unordered = true }

// AddColumn adds a batch of the indexed column (utf8, large_utf8, binary
// or large_binary, as lance indexes) with the row addresses of its rows;
// it has the signature index.RowSource hands batches to.
func (b *Builder) AddColumn(values arrow.Array, ids []uint64) error {
	if values.Len() != len(ids) {
		return fmt.Errorf("fm index: %d values with %d row addresses", values.Len(), len(ids))
	}
	var get func(int) []byte
	switch a := values.(type) {
	case *array.String:
		get = func(i int) []byte { return []byte(a.Value(i)) }
	case *array.LargeString:
		get = func(i int) []byte { return []byte(a.Value(i)) }
	case *array.Binary:
		get = a.Value
	case *array.LargeBinary:
		get = a.Value
	default:
		return fmt.Errorf("%w: column of type %s (lance builds FM indices over utf8, large_utf8, binary and large_binary)", ErrUnsupported, values.DataType())
	}
	for i, id := range ids {
		if values.IsNull(i) {
			b.res.Nulls++
			continue
		}
		if err := b.Add(id, get(i)); err != nil {
			return err
		}
	}
	return nil
}

// Add adds one document at row address addr; addresses must ascend
// (stable row ids need only be unique, StableRowIDs).
func (b *Builder) Add(addr uint64, doc []byte) error {
	if b.any && addr <= b.last && !b.unordered {
		return fmt.Errorf("fm index: row address %d after %d: rows must come in address order", addr, b.last)
	}
	b.any, b.last = true, addr
	// The text must hold the document, its separator and the terminator.
	if need := int64(len(b.text)) + int64(len(doc)) + 2; need > b.maxBytes {
		return fmt.Errorf("%w: partition %d would hold %d bytes of text with row %d:%d (%d bytes), over the bound of %d (index.fm_max_bytes; the suffix array takes 4 bytes per byte of text)",
			ErrTooLarge, len(b.res.Files), need, addr>>32, addr&0xffffffff, len(doc), b.maxBytes)
	}
	b.starts = append(b.starts, uint64(len(b.text)))
	b.rows = append(b.rows, addr)
	n := len(b.text)
	b.text = append(b.text, doc...)
	for i, c := range b.text[n:] {
		if c == separator || c == terminator {
			b.text[n+i] = ' '
		}
	}
	b.text = append(b.text, separator)
	b.res.Docs++
	b.res.Text += uint64(len(doc))
	if len(b.rows) == PartitionDocs {
		return b.flush()
	}
	return nil
}

// Finish writes the last partition (an empty partition 0 when there was
// no document at all).
func (b *Builder) Finish() (Result, error) {
	if len(b.rows) > 0 || len(b.res.Files) == 0 {
		if err := b.flush(); err != nil {
			return b.res, err
		}
	}
	return b.res, nil
}

// flush builds and writes the documents gathered as the next partition.
func (b *Builder) flush() error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	p, err := b.build()
	if err != nil {
		return err
	}
	name := PartitionFileName(uint64(len(b.res.Files)))
	err = index.WriteFiles(b.ctx, b.out, []string{name}, func(w []io.Writer) error {
		return p.write(b.ctx, w[0])
	})
	if err != nil {
		return err
	}
	b.res.Files = append(b.res.Files, name)
	b.res.MaxPartitionText = max(b.res.MaxPartitionText, uint64(p.bwtLen))
	b.text, b.rows, b.starts = b.text[:0], nil, nil
	return nil
}

// partition is one partition's FM index, as written.
type partition struct {
	rows, starts []uint64
	bwtLen       int
	cTable       [257]uint64
	codes        [256]code
	children     [][2]child
	// nodes are the wavelet tree's bit vectors (bit i of the vector is
	// bit i%64 of word i/64), lens their lengths in bits.
	nodes     [][]uint64
	lens      []uint64
	saSamples []uint64
}

// build computes the partition of the gathered documents.
func (b *Builder) build() (*partition, error) {
	p := &partition{rows: b.rows, starts: b.starts}
	if len(b.rows) == 0 {
		return p, nil
	}
	text := append(b.text, terminator)
	b.text = text
	n := len(text)
	p.bwtLen = n
	if cap(b.sa) < n {
		b.sa = make([]int32, n)
	}
	sa := b.sa[:n]
	suffixArray(text, sa)
	if cap(b.bwt) < n {
		b.bwt = make([]byte, n)
	}
	bwt := b.bwt[:n]
	p.saSamples = make([]uint64, 0, (n+SASampleRate-1)/SASampleRate)
	for i, s := range sa {
		if s == 0 {
			bwt[i] = text[n-1]
		} else {
			bwt[i] = text[s-1]
		}
		if i%SASampleRate == 0 {
			p.saSamples = append(p.saSamples, uint64(s))
		}
	}
	var freq [256]uint64
	for _, c := range text {
		freq[c]++
	}
	for c, f := range freq {
		p.cTable[c+1] = p.cTable[c] + f
	}
	if err := p.huffman(&freq); err != nil {
		return nil, err
	}
	p.fillWavelet(bwt)
	return p, nil
}

// hnode is a node of the Huffman tree under construction.
type hnode struct {
	freq        uint64
	tie         int
	sym         byte
	left, right *hnode
}

// hqueue pops the lowest frequency first, then the lowest tie (the order
// of lance's BinaryHeap of (Reverse(freq), Reverse(tie), node)).
type hqueue []*hnode

func (q hqueue) Len() int { return len(q) }
func (q hqueue) Less(i, j int) bool {
	if q[i].freq != q[j].freq {
		return q[i].freq < q[j].freq
	}
	return q[i].tie < q[j].tie
}
func (q hqueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *hqueue) Push(x any)   { *q = append(*q, x.(*hnode)) }
func (q *hqueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// huffman builds the wavelet tree's shape as lance's
// HuffmanWaveletTree::build does: leaves in symbol order, ties numbered in
// creation order, the first node popped becomes the left child; internal
// nodes numbered in preorder.
func (p *partition) huffman(freq *[256]uint64) error {
	var q hqueue
	tie := 0
	for c, f := range freq {
		if f > 0 {
			q = append(q, &hnode{freq: f, tie: tie, sym: byte(c)})
			tie++
		}
	}
	heap.Init(&q)
	if q.Len() == 1 {
		// One symbol: lance pairs it with a zero-frequency leaf 255.
		only := heap.Pop(&q).(*hnode)
		heap.Push(&q, &hnode{freq: 0, tie: tie, sym: 255})
		tie++
		only.tie = tie
		tie++
		heap.Push(&q, only)
	}
	for q.Len() > 1 {
		l := heap.Pop(&q).(*hnode)
		r := heap.Pop(&q).(*hnode)
		heap.Push(&q, &hnode{freq: l.freq + r.freq, tie: tie, left: l, right: r})
		tie++
	}
	root := heap.Pop(&q).(*hnode)
	var path []uint32
	var assign func(n *hnode, bits uint32, depth int) (child, error)
	assign = func(n *hnode, code uint32, depth int) (child, error) {
		if n.left == nil {
			if depth > 32 {
				return child{}, fmt.Errorf("%w: a Huffman code of %d bits (lance stores codes in 32 bits)", ErrUnsupported, depth)
			}
			p.codes[n.sym] = codeOf(code, depth, path)
			return child{leaf: true, v: uint32(n.sym)}, nil
		}
		id := uint32(len(p.children))
		p.children = append(p.children, [2]child{})
		path = append(path, id)
		l, err := assign(n.left, code<<1, depth+1)
		if err != nil {
			return child{}, err
		}
		r, err := assign(n.right, code<<1|1, depth+1)
		if err != nil {
			return child{}, err
		}
		p.children[id] = [2]child{l, r}
		path = path[:len(path)-1]
		return child{v: id}, nil
	}
	_, err := assign(root, 0, 0)
	return err
}

func codeOf(bits uint32, depth int, path []uint32) code {
	return code{bits: bits, length: uint8(depth), path: append([]uint32(nil), path...)}
}

// fillWavelet sets the wavelet tree's bit vectors from the BWT: each
// symbol passes the nodes of its code's path, adding its code bit at that
// level to the node's vector.
func (p *partition) fillWavelet(bwt []byte) {
	p.lens = make([]uint64, len(p.children))
	var count [256]uint64
	for _, c := range bwt {
		count[c]++
	}
	for c, n := range count {
		for _, id := range p.codes[c].path {
			p.lens[id] += n
		}
	}
	p.nodes = make([][]uint64, len(p.children))
	for i, l := range p.lens {
		p.nodes[i] = make([]uint64, (l+63)/64)
	}
	cursor := make([]uint64, len(p.children))
	for _, c := range bwt {
		cd := &p.codes[c]
		for lvl, id := range cd.path {
			if cd.bits>>(uint(cd.length)-1-uint(lvl))&1 == 1 {
				p.nodes[id][cursor[id]/64] |= 1 << (cursor[id] % 64)
			}
			cursor[id]++
		}
	}
}

// popcount is the set bits of words.
func popcount(words []uint64) uint64 {
	var n int
	for _, w := range words {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}
