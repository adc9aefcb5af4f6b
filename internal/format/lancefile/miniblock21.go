package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// Mini-block layout: a chunk table (u16 per chunk), chunks of ≤ 2^k values
// with their own rep/def levels and value buffers, an optional dictionary
// and an optional repetition index (not needed for whole-page decoding).

// chunkRef locates one mini-block chunk inside the page's data buffer.
type chunkRef struct {
	off, nbytes int // byte range in buffer 1
	first       int // values (visible items) before this chunk
	nvals       int
}

// checkMiniBlock validates the layout and the number of page buffers.
func checkMiniBlock(l *enc21pb.MiniBlockLayout, nbufs int) error {
	want := 2
	if l.GetDictionary() != nil {
		want++
	}
	if l.GetRepetitionIndexDepth() > 0 {
		want++
	}
	if nbufs != want {
		return fmt.Errorf("%w: mini-block page has %d buffers, want %d", ErrCorrupt, nbufs, want)
	}
	if l.GetValueCompression() == nil {
		return fmt.Errorf("%w: mini-block page without value compression", ErrCorrupt)
	}
	if nb := l.GetNumBuffers(); nb < 1 || nb > 64 {
		return fmt.Errorf("%w: mini-block with %d value buffers", ErrCorrupt, nb)
	}
	if l.GetNumItems() > 1<<31 || l.GetNumDictionaryItems() > 1<<31 {
		return fmt.Errorf("%w: mini-block with %d items, %d dictionary items", ErrCorrupt, l.GetNumItems(), l.GetNumDictionaryItems())
	}
	return nil
}

// miniBlockChunks parses the chunk table (one u16 per chunk) against a data
// buffer of dataLen bytes.
func miniBlockChunks(l *enc21pb.MiniBlockLayout, meta []byte, dataLen int) ([]chunkRef, error) {
	if len(meta)%2 != 0 {
		return nil, fmt.Errorf("%w: chunk table of %d bytes", ErrCorrupt, len(meta))
	}
	nchunks := len(meta) / 2
	numItems := int(l.GetNumItems())
	chunks := make([]chunkRef, nchunks)
	off, seen := 0, 0
	for c := range chunks {
		w := binary.LittleEndian.Uint16(meta[2*c:])
		nbytes := (int(w>>4) + 1) * 8
		nvals := 1 << (w & 0xF)
		if c == nchunks-1 {
			if numItems < seen {
				return nil, fmt.Errorf("%w: chunks hold more than num_items=%d values", ErrCorrupt, numItems)
			}
			nvals = numItems - seen
		}
		if nvals > 1<<16 {
			return nil, fmt.Errorf("%w: chunk %d of %d values", ErrCorrupt, c, nvals)
		}
		if off+nbytes > dataLen {
			return nil, fmt.Errorf("%w: chunk %d [%d,+%d) beyond data buffer of %d bytes", ErrCorrupt, c, off, nbytes, dataLen)
		}
		chunks[c] = chunkRef{off: off, nbytes: nbytes, first: seen, nvals: nvals}
		off += nbytes
		seen += nvals
	}
	if off != dataLen {
		return nil, fmt.Errorf("%w: chunks cover %d of %d data bytes", ErrCorrupt, off, dataLen)
	}
	if seen != numItems {
		return nil, fmt.Errorf("%w: chunks hold %d values, num_items=%d", ErrCorrupt, seen, numItems)
	}
	return chunks, nil
}

func decodeDictionary(l *enc21pb.MiniBlockLayout, b []byte) (*values, error) {
	dict := &values{}
	if err := decodeBlock(l.GetDictionary(), b, int(l.GetNumDictionaryItems()), dict); err != nil {
		return nil, fmt.Errorf("dictionary: %w", err)
	}
	if dict.n != int(l.GetNumDictionaryItems()) {
		return nil, fmt.Errorf("%w: dictionary decoded %d items, want %d", ErrCorrupt, dict.n, l.GetNumDictionaryItems())
	}
	return dict, nil
}

func decodeMiniBlock(l *enc21pb.MiniBlockLayout, bufs [][]byte) (*page, error) {
	if err := checkMiniBlock(l, len(bufs)); err != nil {
		return nil, err
	}
	chunks, err := miniBlockChunks(l, bufs[0], len(bufs[1]))
	if err != nil {
		return nil, err
	}
	var dict *values
	if l.GetDictionary() != nil {
		if dict, err = decodeDictionary(l, bufs[2]); err != nil {
			return nil, err
		}
	}
	return decodeChunks(l, chunks, bufs[1], 0, dict)
}

// decodeChunks decodes the given chunks; data holds their bytes starting at
// chunk offset base.
func decodeChunks(l *enc21pb.MiniBlockLayout, chunks []chunkRef, data []byte, base int, dict *values) (*page, error) {
	p := &page{layers: l.GetLayers()}
	hasRep, hasDef := l.GetRepCompression() != nil, l.GetDefCompression() != nil
	total := 0
	for _, ch := range chunks {
		total += ch.nvals
	}
	var idx values
	target := &p.vals
	if dict != nil {
		target = &idx
	}
	var rep, def values
	seen := 0
	for ci, ch := range chunks {
		c := ci
		if ch.off-base < 0 || ch.off-base+ch.nbytes > len(data) {
			return nil, fmt.Errorf("%w: chunk at %d outside the bytes read", ErrCorrupt, ch.off)
		}
		parts, err := SplitMiniBlockChunk(l, data[ch.off-base:ch.off-base+ch.nbytes])
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c, err)
		}
		seen += ch.nvals
		numLevels := parts.NumLevels
		if hasRep {
			if err := decodeBlock(l.GetRepCompression(), parts.Rep, numLevels, &rep); err != nil {
				return nil, fmt.Errorf("chunk %d rep levels: %w", c, err)
			}
		}
		if hasDef {
			if err := decodeBlock(l.GetDefCompression(), parts.Def, numLevels, &def); err != nil {
				return nil, fmt.Errorf("chunk %d def levels: %w", c, err)
			}
		}
		chunkBufs := parts.Values
		if err := decodeMiniBlockValues(l.GetValueCompression(), chunkBufs, ch.nvals, target); err != nil {
			return nil, fmt.Errorf("chunk %d values: %w", c, err)
		}
		if ci == 0 && len(chunks) > 1 {
			target.reserve(total - target.n)
		}
		if target.n != seen {
			return nil, fmt.Errorf("%w: chunk %d decoded %d values in total, want %d", ErrCorrupt, c, target.n, seen)
		}
		if hasRep || hasDef {
			p.entries += numLevels
		}
	}
	var err error
	if hasRep {
		if p.rep, err = levelsFrom(&rep, p.entries); err != nil {
			return nil, err
		}
	}
	if hasDef {
		if p.def, err = levelsFrom(&def, p.entries); err != nil {
			return nil, err
		}
	}
	if !hasRep && !hasDef {
		p.entries = total
	}
	if dict != nil {
		if err := applyDictionary(&idx, dict, &p.vals); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// applyDictionary maps decoded indices through the dictionary into out.
func applyDictionary(idx, dict, out *values) error {
	if idx.kind != kindFixed {
		return fmt.Errorf("%w: dictionary indices are not integers", ErrCorrupt)
	}
	get, err := dictIndex(idx)
	if err != nil {
		return err
	}
	if dict.kind == kindVariable && dict.n > 0 && len(dict.offs) > dict.n {
		// size the output once: the values' bytes are known from the indices
		total := 0
		for i := 0; i < idx.n; i++ {
			if k := get(i); k < uint64(dict.n) {
				if d := dict.offs[k+1] - dict.offs[k]; d > 0 {
					total += int(d)
				}
			}
		}
		out.data = slices.Grow(out.data, total)
		out.offs = slices.Grow(out.offs, idx.n)
	}
	for i := 0; i < idx.n; i++ {
		k := get(i)
		if k >= uint64(dict.n) {
			// Null slots may carry any index; only a valid one must be in range.
			k = 0
			if dict.n == 0 {
				if err := out.setKind(dict.kind, dict.width); err != nil {
					return err
				}
				if dict.kind == kindVariable {
					out.offs = append(out.offs, int64(len(out.data)))
				} else {
					out.data = append(out.data, make([]byte, max(dict.width, 1))...)
				}
				out.n++
				continue
			}
		}
		switch dict.kind {
		case kindVariable:
			if err := out.appendVar(dict.value(int(k))); err != nil {
				return err
			}
		case kindFixed:
			if err := out.appendFixed(dict.fixedAt(int(k)), dict.width, 1); err != nil {
				return err
			}
		case kindBool:
			if err := out.setKind(kindBool, 1); err != nil {
				return err
			}
			out.data = append(out.data, dict.data[k])
			out.n++
		default:
			return fmt.Errorf("%w: empty dictionary", ErrCorrupt)
		}
	}
	return nil
}

// MiniBlockChunk locates one chunk of a mini-block page: its byte range in
// the page's data buffer, the values before it in the page and its values.
type MiniBlockChunk struct {
	Off, Size     int
	First, Values int
}

// MiniBlockChunks parses a mini-block page's chunk table (its first buffer)
// against a data buffer (its second) of dataLen bytes.
func MiniBlockChunks(l *enc21pb.MiniBlockLayout, meta []byte, dataLen int) ([]MiniBlockChunk, error) {
	refs, err := miniBlockChunks(l, meta, dataLen)
	if err != nil {
		return nil, err
	}
	out := make([]MiniBlockChunk, len(refs))
	for i, r := range refs {
		out[i] = MiniBlockChunk{Off: r.off, Size: r.nbytes, First: r.first, Values: r.nvals}
	}
	return out, nil
}

// ChunkParts are the stored pieces of one mini-block chunk, each still
// encoded: its number of level entries, the rep and def level bytes (nil
// when the layout has none) and its value buffers.
type ChunkParts struct {
	NumLevels int
	Rep, Def  []byte
	Values    [][]byte
}

// SplitMiniBlockChunk cuts one chunk into its parts. A chunk is a header
// (u16 number of levels, u16 rep bytes if the layout has rep levels, u16
// def bytes if it has def levels, u16 per value buffer) padded to 8 bytes,
// then the rep levels, the def levels and the value buffers, each padded
// to 8 bytes.
func SplitMiniBlockChunk(l *enc21pb.MiniBlockLayout, chunk []byte) (ChunkParts, error) {
	hasRep, hasDef := l.GetRepCompression() != nil, l.GetDefCompression() != nil
	nb := int(l.GetNumBuffers())
	h := 2 + 2*nb
	if hasRep {
		h += 2
	}
	if hasDef {
		h += 2
	}
	if h > len(chunk) {
		return ChunkParts{}, fmt.Errorf("%w: chunk header beyond chunk", ErrCorrupt)
	}
	le := binary.LittleEndian
	p := ChunkParts{NumLevels: int(le.Uint16(chunk)), Values: make([][]byte, nb)}
	o := 2
	var repSize, defSize int
	if hasRep {
		repSize = int(le.Uint16(chunk[o:]))
		o += 2
	}
	if hasDef {
		defSize = int(le.Uint16(chunk[o:]))
		o += 2
	}
	sizesAt := o
	o += 2 * nb
	pad8 := func(x int) int { return (x + 7) &^ 7 }
	o = pad8(o)
	take := func(sz int, what string) ([]byte, error) {
		if o+sz > len(chunk) {
			return nil, fmt.Errorf("%w: chunk %s [%d,+%d) beyond chunk of %d bytes", ErrCorrupt, what, o, sz, len(chunk))
		}
		b := chunk[o : o+sz]
		o = pad8(o + sz)
		return b, nil
	}
	var err error
	if hasRep {
		if p.Rep, err = take(repSize, "rep levels"); err != nil {
			return ChunkParts{}, err
		}
	}
	if hasDef {
		if p.Def, err = take(defSize, "def levels"); err != nil {
			return ChunkParts{}, err
		}
	}
	for i := range p.Values {
		if p.Values[i], err = take(int(le.Uint16(chunk[sizesAt+2*i:])), "value buffer"); err != nil {
			return ChunkParts{}, err
		}
	}
	return p, nil
}

// DictionaryIndices decodes a mini-block page whose values are indices into
// a dictionary of variable-width values (strings, binaries) without
// applying the dictionary: its entries and, per value, the entry's index.
// bufs are the page's buffers. ok is false, with nothing decoded, for any
// other page: no dictionary, repetition or definition levels (every value
// must be present), a dictionary of another kind.
func DictionaryIndices(l *enc21pb.MiniBlockLayout, bufs [][]byte) (entries [][]byte, idx []uint32, ok bool, err error) {
	if l.GetDictionary() == nil || l.GetRepCompression() != nil || l.GetDefCompression() != nil || l.GetRepetitionIndexDepth() > 0 {
		return nil, nil, false, nil
	}
	if err := checkMiniBlock(l, len(bufs)); err != nil {
		return nil, nil, false, err
	}
	dict, err := decodeDictionary(l, bufs[2])
	if err != nil {
		return nil, nil, false, err
	}
	if dict.kind != kindVariable {
		return nil, nil, false, nil
	}
	chunks, err := miniBlockChunks(l, bufs[0], len(bufs[1]))
	if err != nil {
		return nil, nil, false, err
	}
	p, err := decodeChunks(l, chunks, bufs[1], 0, nil)
	if err != nil {
		return nil, nil, false, err
	}
	v := &p.vals
	if v.kind != kindFixed || len(v.data) < v.n*v.width {
		return nil, nil, false, fmt.Errorf("%w: dictionary indices are not integers", ErrCorrupt)
	}
	get, err := dictIndex(v)
	if err != nil {
		return nil, nil, false, err
	}
	entries = make([][]byte, dict.n)
	for i := range entries {
		entries[i] = dict.value(i)
	}
	idx = make([]uint32, v.n)
	for i := range idx {
		k := get(i)
		if k >= uint64(dict.n) {
			return nil, nil, false, fmt.Errorf("%w: dictionary index %d of %d entries", ErrCorrupt, k, dict.n)
		}
		idx[i] = uint32(k)
	}
	return entries, idx, true, nil
}

// dictIndex returns the reader of decoded dictionary indices (fixed-width
// little-endian integers of 1, 2, 4 or 8 bytes).
func dictIndex(idx *values) (func(i int) uint64, error) {
	switch idx.width {
	case 1:
		return func(i int) uint64 { return uint64(idx.data[i]) }, nil
	case 2:
		return func(i int) uint64 { return uint64(binary.LittleEndian.Uint16(idx.data[2*i:])) }, nil
	case 4:
		return func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(idx.data[4*i:])) }, nil
	case 8:
		return func(i int) uint64 { return binary.LittleEndian.Uint64(idx.data[8*i:]) }, nil
	}
	return nil, fmt.Errorf("%w: dictionary indices of %d bytes", ErrCorrupt, idx.width)
}
