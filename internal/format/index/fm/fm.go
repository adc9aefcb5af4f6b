package fm

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// IndexVersion is the index_version lance 8.0.0 records for an FM segment
// (FMINDEX_INDEX_VERSION in rust/lance-index/src/scalar/fmindex.rs).
const IndexVersion = 10

// Layout constants of lance 8.0.0's FM index.
const (
	// PartitionDocs is how many documents (non-null rows) one partition
	// file holds: lance starts a new partition, an FM index of its own,
	// after each PartitionDocs documents, in row order.
	PartitionDocs = 10_000
	// SASampleRate: every SASampleRate-th suffix array entry is stored.
	SASampleRate = 32
	// BlockWords is how many 64-bit words of a bit vector (or suffix
	// array samples) one row of the file holds.
	BlockWords = 4096
	// AlphabetSize is the alphabet_size lance records (bytes).
	AlphabetSize = 256
	// separator ends every document in the concatenated text; terminator
	// ends the text. Both are replaced by a space inside documents.
	separator  = 0xFF
	terminator = 0x00
)

// SANodeID is the node_id of the rows holding suffix array samples.
const SANodeID = ^uint32(0)

// Column names of a partition file.
const (
	ColNodeID     = "node_id"
	ColBlockID    = "block_id"
	ColWords      = "words"
	ColPrefixRank = "prefix_rank"
	ColBitLen     = "bit_len"
)

// Schema metadata keys of a partition file.
const (
	KeyNumBWTNodes       = "num_bwt_nodes"
	KeyBWTLen            = "bwt_len"
	KeyNumSABlocks       = "num_sa_blocks"
	KeySASamplesLen      = "sa_samples_len"
	KeyTotalWaveletRows  = "total_wavelet_rows"
	KeySASampleRate      = "sa_sample_rate"
	KeyAlphabetSize      = "alphabet_size"
	KeyCTable            = "c_table"
	KeyHuffmanCodes      = "huffman_codes"
	KeyTreeTopology      = "tree_topology"
	KeyRowIDs            = "row_ids"
	KeyDocStartPositions = "doc_start_positions"
)

// PartitionFileName names partition p's file.
func PartitionFileName(p uint64) string { return fmt.Sprintf("part_%d_fm.lance", p) }

// ParsePartitionFileName returns the partition id of a partition file
// name (false for other names), as lance lists them when it loads.
func ParsePartitionFileName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "part_")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "_fm.lance")
	if !ok {
		return 0, false
	}
	p, err := strconv.ParseUint(num, 10, 64)
	return p, err == nil
}

var (
	// ErrUnsupported marks a segment or column this package does not
	// build or read (another index version, a column type lance does not
	// index either).
	ErrUnsupported = errors.New("fm index: unsupported")
	// ErrTooLarge marks a partition whose text passes the build's byte
	// bound (index.fm_max_bytes).
	ErrTooLarge = errors.New("fm index: partition too large")
	// ErrCorrupt marks a partition file that contradicts itself.
	ErrCorrupt = errors.New("fm index: corrupt")
)

// code is a symbol's Huffman code in the wavelet tree: bits (most
// significant first, length of them) and the internal nodes from the
// root down to the leaf's parent.
type code struct {
	bits   uint32
	length uint8
	path   []uint32
}

// child is a wavelet tree node's child: a leaf (a symbol) or a node id.
type child struct {
	leaf bool
	v    uint32
}

// hexU64s renders vs as lance does: lowercase hex of the little-endian
// bytes.
func hexU64s(vs []uint64) []byte {
	raw := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(raw[8*i:], v)
	}
	out := make([]byte, hex.EncodedLen(len(raw)))
	hex.Encode(out, raw)
	return out
}

// encodeCodes is lance's serialize_huffman_codes: per byte value, bits
// (u32), length (u8), the path's length (u16) and its node ids (u32).
func encodeCodes(codes *[256]code) []byte {
	var b []byte
	for i := range codes {
		c := &codes[i]
		b = binary.LittleEndian.AppendUint32(b, c.bits)
		b = append(b, c.length)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(c.path)))
		for _, id := range c.path {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
	}
	return b
}

// decodeCodes reverses encodeCodes.
func decodeCodes(b []byte) (*[256]code, error) {
	var codes [256]code
	for i := range codes {
		if len(b) < 7 {
			return nil, fmt.Errorf("%w: huffman_codes ends inside code %d", ErrCorrupt, i)
		}
		c := &codes[i]
		c.bits = binary.LittleEndian.Uint32(b)
		c.length = b[4]
		n := int(binary.LittleEndian.Uint16(b[5:]))
		b = b[7:]
		if len(b) < 4*n || n != int(c.length) {
			return nil, fmt.Errorf("%w: huffman code %d: length %d, path of %d", ErrCorrupt, i, c.length, n)
		}
		for j := 0; j < n; j++ {
			c.path = append(c.path, binary.LittleEndian.Uint32(b[4*j:]))
		}
		b = b[4*n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the huffman codes", ErrCorrupt, len(b))
	}
	return &codes, nil
}

// encodeTopology is lance's serialize_tree_topology: the node count
// (u32), then per node its left and right child, each a tag (0 node, 1
// leaf) and a u32 (node id or symbol).
func encodeTopology(children [][2]child) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(children)))
	for _, cs := range children {
		for _, c := range cs {
			tag := byte(0)
			if c.leaf {
				tag = 1
			}
			b = append(b, tag)
			b = binary.LittleEndian.AppendUint32(b, c.v)
		}
	}
	return b
}

// decodeTopology reverses encodeTopology.
func decodeTopology(b []byte) ([][2]child, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: tree_topology of %d bytes", ErrCorrupt, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if len(b) != 10*n {
		return nil, fmt.Errorf("%w: tree_topology of %d nodes in %d bytes", ErrCorrupt, n, len(b))
	}
	out := make([][2]child, n)
	for i := range out {
		for j := 0; j < 2; j++ {
			tag, v := b[0], binary.LittleEndian.Uint32(b[1:])
			if tag > 1 || tag == 0 && int(v) >= n || tag == 1 && v > 255 {
				return nil, fmt.Errorf("%w: tree_topology node %d child %d: tag %d value %d", ErrCorrupt, i, j, tag, v)
			}
			out[i][j] = child{leaf: tag == 1, v: v}
			b = b[5:]
		}
	}
	return out, nil
}
