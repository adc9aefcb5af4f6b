package lancefile

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// Random access in 2.1 without decoding whole pages, where the layout
// allows it: mini-block pages without repetition (a chunk of n values holds
// rows [first, first+n)) and full-zip fixed-width pages without repetition
// (row r sits at r × row size). Other pages are decoded whole.

// partialMaxRows is the largest row range served by partial reads.
const partialMaxRows = 256

// pageMeta is what a partial read needs from a page besides its chunks.
type pageMeta struct {
	pi     int
	layout *enc21pb.PageLayout
	chunks []chunkRef
	dict   *values
	// With repetition (lists): per chunk, rows starting before it, rows
	// starting in it, and whether its last row continues into the next chunk.
	repIndexed  bool
	rowBefore   []int
	rowsStarted []int
	trailer     []bool
	// win holds the mini-block data bytes [winFrom, winFrom+len(win)) a
	// chunk read (ReadOptions.ChunkReads) fetched ahead.
	win     []byte
	winFrom int
}

// chunkReadWindow is how many bytes of a mini-block page's data a chunk
// read fetches at once: batches that follow each other are served from
// it, so an object store sees one range request per MiB, not per batch.
const chunkReadWindow = 1 << 20

// chunkBytes returns mini-block data bytes holding [from,to) of data
// buffer b and the data offset of their first byte: exactly those bytes,
// or with c.window a window of at least that many bytes kept for the
// next read.
func (c *column21) chunkBytes(pm *pageMeta, b Buffer, from, to int) ([]byte, int, error) {
	if c.window <= 0 {
		data, err := c.f.ReadBuffer(Buffer{b.Offset + uint64(from), uint64(to - from)})
		return data, from, err
	}
	if pm.win != nil && from >= pm.winFrom && to <= pm.winFrom+len(pm.win) {
		return pm.win, pm.winFrom, nil
	}
	end := min(max(to, from+c.window), int(b.Size))
	data, err := c.f.ReadBuffer(Buffer{b.Offset + uint64(from), uint64(end - from)})
	if err != nil {
		return nil, 0, err
	}
	pm.win, pm.winFrom = data, from
	return data, from, nil
}

func (c *column21) meta(pi int) (*pageMeta, error) {
	if c.pm != nil && c.pm.pi == pi {
		return c.pm, nil
	}
	pl, err := c.f.pageLayout(c.ci, pi)
	if err != nil {
		return nil, err
	}
	pm := &pageMeta{pi: pi, layout: pl}
	bufs := PageBuffers(c.f.Columns[c.ci].Meta.GetPages()[pi])
	if mb := pl.GetMiniBlockLayout(); mb != nil && (mb.GetRepCompression() == nil && mb.GetRepetitionIndexDepth() == 0 || mb.GetRepCompression() != nil && mb.GetRepetitionIndexDepth() == 1) {
		if err := checkMiniBlock(mb, len(bufs)); err != nil {
			return nil, err
		}
		meta, err := c.f.ReadBuffer(bufs[0])
		if err != nil {
			return nil, err
		}
		if pm.chunks, err = miniBlockChunks(mb, meta, int(bufs[1].Size)); err != nil {
			return nil, err
		}
		if mb.GetDictionary() != nil {
			db, err := c.f.ReadBuffer(bufs[2])
			if err != nil {
				return nil, err
			}
			if pm.dict, err = decodeDictionary(mb, db); err != nil {
				return nil, err
			}
		}
		if mb.GetRepetitionIndexDepth() == 1 {
			if err := pm.loadRepIndex(c, bufs[len(bufs)-1]); err != nil {
				return nil, err
			}
		}
	}
	c.pm = pm
	return pm, nil
}

// partial decodes a part of page pi holding rows [lo,hi) (page-relative).
// It returns the decoded rows and the page row of the first of them, or
// ok=false when the layout needs a whole-page decode.
func (c *column21) partial(pi, lo, hi int) (p *page, first int, ok bool, err error) {
	pm, err := c.meta(pi)
	if err != nil {
		return nil, 0, false, err
	}
	bufs := PageBuffers(c.f.Columns[c.ci].Meta.GetPages()[pi])
	switch {
	case pm.repIndexed:
		return c.partialRepeated(pm, bufs, lo, hi)
	case pm.chunks != nil:
		mb := pm.layout.GetMiniBlockLayout()
		i0, i1 := -1, -1
		for i, ch := range pm.chunks {
			if i0 < 0 && ch.first+ch.nvals > lo {
				i0 = i
			}
			if ch.first < hi {
				i1 = i
			}
		}
		if i0 < 0 || i1 < i0 {
			return nil, 0, false, fmt.Errorf("%w: rows [%d,%d) not in the chunk table", ErrCorrupt, lo, hi)
		}
		from, to := pm.chunks[i0].off, pm.chunks[i1].off+pm.chunks[i1].nbytes
		data, base, err := c.chunkBytes(pm, bufs[1], from, to)
		if err != nil {
			return nil, 0, false, err
		}
		p, err := decodeChunks(mb, pm.chunks[i0:i1+1], data, base, pm.dict)
		if err != nil {
			return nil, 0, false, err
		}
		p.rows = pm.chunks[i1].first + pm.chunks[i1].nvals - pm.chunks[i0].first
		if err := p.index(); err != nil {
			return nil, 0, false, err
		}
		return p, pm.chunks[i0].first, true, nil
	case pm.layout.GetFullZipLayout() != nil:
		fz := pm.layout.GetFullZipLayout()
		repeated := fz.GetBitsRep() != 0
		var data []byte
		switch {
		case !repeated && fz.GetBitsPerValue() != 0 && len(bufs) == 1:
			rowSize := bytesForBits(fz.GetBitsDef()) + int(fz.GetBitsPerValue()/8)
			if data, err = c.f.ReadBuffer(Buffer{bufs[0].Offset + uint64(lo*rowSize), uint64((hi - lo) * rowSize)}); err != nil {
				return nil, 0, false, err
			}
		case (repeated || fz.GetBitsPerOffset() != 0) && len(bufs) == 2:
			// Variable width or repeated: the repetition index holds
			// rows+1 byte offsets into buffer 0, 1/2/4/8 bytes each.
			rows := c.pageStart[pi+1] - c.pageStart[pi]
			w := bufs[1].Size / (rows + 1)
			if w*(rows+1) != bufs[1].Size || (w != 1 && w != 2 && w != 4 && w != 8) {
				if repeated {
					return nil, 0, false, nil // an index this reader does not know: decode the page whole
				}
				return nil, 0, false, fmt.Errorf("%w: full-zip repetition index of %d bytes for %d rows", ErrCorrupt, bufs[1].Size, rows)
			}
			ix, err := c.f.ReadBuffer(Buffer{bufs[1].Offset + uint64(lo)*w, uint64(hi-lo+1) * w})
			if err != nil {
				return nil, 0, false, err
			}
			from, to := leUint(ix[:w]), leUint(ix[uint64(hi-lo)*w:])
			if from > to || to > bufs[0].Size {
				return nil, 0, false, fmt.Errorf("%w: full-zip repetition index range [%d,%d) outside %d bytes", ErrCorrupt, from, to, bufs[0].Size)
			}
			if data, err = c.f.ReadBuffer(Buffer{bufs[0].Offset + from, to - from}); err != nil {
				return nil, 0, false, err
			}
		default:
			return nil, 0, false, nil
		}
		sub := proto.Clone(fz).(*enc21pb.FullZipLayout)
		sub.NumItems = uint32(hi - lo)
		sub.NumVisibleItems = 0
		items := hi - lo
		if repeated {
			items = -1 // as many entries as the rows' bytes hold
		}
		p, err := decodeFullZipItems(sub, [][]byte{data}, hi-lo, items)
		if err != nil {
			return nil, 0, false, err
		}
		p.rows = hi - lo
		if err := p.index(); err != nil {
			return nil, 0, false, err
		}
		return p, lo, true, nil
	}
	return nil, 0, false, nil
}

// loadRepIndex reads the mini-block repetition index: per chunk (depth 1)
// u64 rows finished in the chunk and u64 trailing level entries of a row
// that continues into the next chunk.
func (pm *pageMeta) loadRepIndex(c *column21, b Buffer) error {
	n := len(pm.chunks)
	if b.Size != uint64(16*n) {
		return fmt.Errorf("%w: repetition index of %d bytes for %d chunks", ErrCorrupt, b.Size, n)
	}
	ix, err := c.f.ReadBuffer(b)
	if err != nil {
		return err
	}
	pm.rowBefore = make([]int, n+1)
	pm.rowsStarted = make([]int, n)
	pm.trailer = make([]bool, n)
	for k := 0; k < n; k++ {
		finished := leUint(ix[16*k : 16*k+8])
		partial := leUint(ix[16*k+8 : 16*k+16])
		if finished > 1<<31 {
			return fmt.Errorf("%w: repetition index chunk %d finishes %d rows", ErrCorrupt, k, finished)
		}
		pm.trailer[k] = partial > 0
		started := int(finished)
		if pm.trailer[k] {
			started++
		}
		if k > 0 && pm.trailer[k-1] {
			started--
		}
		if started < 0 {
			return fmt.Errorf("%w: repetition index chunk %d starts %d rows", ErrCorrupt, k, started)
		}
		pm.rowsStarted[k] = started
		pm.rowBefore[k+1] = pm.rowBefore[k] + started
	}
	pm.repIndexed = true
	return nil
}

// partialRepeated decodes the chunks holding rows [lo,hi) of a mini-block
// page with lists: from the chunk where row lo starts through the chunk where
// row hi-1 ends, dropping a leading continuation of an earlier row.
func (c *column21) partialRepeated(pm *pageMeta, bufs []Buffer, lo, hi int) (*page, int, bool, error) {
	n := len(pm.chunks)
	if pm.rowBefore[n] != int(c.pageStart[pm.pi+1]-c.pageStart[pm.pi]) {
		return nil, 0, false, nil // index disagrees with the page: decode it whole
	}
	i0, i1 := -1, -1
	for k := 0; k < n; k++ {
		if pm.rowsStarted[k] == 0 {
			continue
		}
		if i0 < 0 && pm.rowBefore[k+1] > lo {
			i0 = k
		}
		if pm.rowBefore[k] < hi {
			i1 = k
		}
	}
	if i0 < 0 || i1 < i0 {
		return nil, 0, false, fmt.Errorf("%w: rows [%d,%d) not in the repetition index", ErrCorrupt, lo, hi)
	}
	// Read on to the chunk where row hi-1 ends: while chunk i1's last row
	// is row hi-1 (no later row starts in it, rowBefore) and it continues
	// into the next chunk. A chunk that starts a row ends the continuation
	// before it; the rows from hi on that the last chunk starts are
	// decoded but not returned.
	for i1 < n-1 && pm.trailer[i1] && pm.rowBefore[i1+1] <= hi {
		i1++
		if pm.rowsStarted[i1] > 0 {
			break
		}
	}
	from, to := pm.chunks[i0].off, pm.chunks[i1].off+pm.chunks[i1].nbytes
	data, err := c.f.ReadBuffer(Buffer{bufs[1].Offset + uint64(from), uint64(to - from)})
	if err != nil {
		return nil, 0, false, err
	}
	p, err := decodeChunks(pm.layout.GetMiniBlockLayout(), pm.chunks[i0:i1+1], data, from, pm.dict)
	if err != nil {
		return nil, 0, false, err
	}
	if err := p.dropPreamble(); err != nil {
		return nil, 0, false, err
	}
	if err := p.index(); err != nil {
		return nil, 0, false, err
	}
	return p, pm.rowBefore[i0], true, nil
}

// dropPreamble removes the level entries (and their values) before the
// first row start, and sets rows to the number of rows started.
func (p *page) dropPreamble() error {
	maxRep := 0
	for _, l := range p.layers {
		if isListLayer(l) {
			maxRep++
		}
	}
	if maxRep == 0 || p.rep == nil {
		return fmt.Errorf("%w: repetition index on a page without lists", ErrCorrupt)
	}
	j := 0
	for j < len(p.rep) && int(p.rep[j]) != maxRep {
		j++
	}
	mvd := maxVisibleDef(p.layers)
	vis := 0
	for i := 0; i < j; i++ {
		if p.def == nil || int(p.def[i]) <= mvd {
			vis++
		}
	}
	p.rep = p.rep[j:]
	if p.def != nil {
		p.def = p.def[j:]
	}
	p.entries -= j
	if vis > p.vals.n {
		return fmt.Errorf("%w: preamble holds %d values of %d", ErrCorrupt, vis, p.vals.n)
	}
	v := &p.vals
	switch {
	case v.allNull:
	case v.kind == kindFixed:
		v.data = v.data[vis*v.width:]
	case v.kind == kindBool:
		v.data = v.data[vis:]
	case v.kind == kindVariable:
		v.offs = v.offs[vis:]
	}
	cum := 1
	for li, d := range v.fslDims {
		cum *= d
		if v.fslValid[li] != nil {
			v.fslValid[li] = v.fslValid[li][vis*cum:]
		}
	}
	v.n -= vis
	p.rows = 0
	for _, r := range p.rep {
		if int(r) == maxRep {
			p.rows++
		}
	}
	return nil
}
