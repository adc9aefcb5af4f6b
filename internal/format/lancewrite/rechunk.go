package lancewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
)

// Re-chunking a mini-block page. A mini-block page is a run of chunks, each
// holding 2^k values (any number for the last) with its own levels and value
// buffers; the page's value compression and dictionary are shared by all
// chunks. Removing rows from such a page only touches the chunks that held
// them: the others are kept byte for byte, a chunk that lost some rows is
// cut apart and its survivors encoded again in the page's own compression,
// a chunk that lost all of its rows is left out, and the dictionary (if
// any) is kept as it is.
//
// The survivors of a damaged chunk rarely number a power of two. Where the
// compression costs nothing per chunk (flat values, variable values with
// their offsets, FSST-coded variable values: all sliced without decoding)
// they are written as chunks of descending powers of two. Inline
// bit-packing pads every chunk to a block of 1024 values, so there a
// damaged chunk's survivors become the last chunk of an output page and the
// chunks after it start the next one; such a page is split at most
// maxRechunkSplits times (more: many chunks lost rows, and the page is
// re-encoded whole instead). A survivor chunk that would not fit a chunk's
// size limits sends the page to the re-encode path as well.
const maxRechunkSplits = 2

// errRechunkFit: a survivor chunk exceeds a chunk's limits (re-encode instead).
var errRechunkFit = errors.New("lancewrite: survivor chunk does not fit")

type rechunkKind int

const (
	rcFixed     rechunkKind = iota // flat values of a whole number of bytes
	rcVariable                     // Variable (offsets then bytes), also under FSST
	rcBitpacked                    // InlineBitpacking of 8/16/32/64-bit words
)

// rechunkable says how a mini-block page's values can be cut, and false
// when the page needs a decode: repetition, compressed value buffers,
// several value buffers per chunk, bit-wide flat values, def levels that
// are not out-of-line bit-packed 16-bit words.
func rechunkable(l *enc21pb.MiniBlockLayout) (rechunkKind, int, bool) {
	if l.GetRepCompression() != nil || l.GetRepetitionIndexDepth() != 0 || l.GetNumBuffers() != 1 {
		return 0, 0, false
	}
	if d := l.GetDefCompression(); d != nil {
		ool := d.GetOutOfLineBitpacking()
		if ool == nil || ool.GetUncompressedBitsPerValue() != 16 || ool.GetValues().GetFlat() == nil || ool.GetValues().GetFlat().GetData() != nil {
			return 0, 0, false
		}
	}
	variable := func(v *enc21pb.Variable) (rechunkKind, int, bool) {
		b := v.GetOffsets().GetFlat().GetBitsPerValue()
		if v.GetValues() != nil || v.GetOffsets().GetFlat().GetData() != nil || (b != 32 && b != 64) {
			return 0, 0, false
		}
		return rcVariable, int(b / 8), true
	}
	switch c := l.GetValueCompression().GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat:
		b := c.Flat.GetBitsPerValue()
		if c.Flat.GetData() != nil || b == 0 || b%8 != 0 {
			return 0, 0, false
		}
		return rcFixed, int(b / 8), true
	case *enc21pb.CompressiveEncoding_Variable:
		return variable(c.Variable)
	case *enc21pb.CompressiveEncoding_Fsst:
		if v := c.Fsst.GetValues().GetVariable(); v != nil {
			return variable(v)
		}
	case *enc21pb.CompressiveEncoding_InlineBitpacking:
		b := c.InlineBitpacking.GetUncompressedBitsPerValue()
		if c.InlineBitpacking.GetValues() != nil || (b != 8 && b != 16 && b != 32 && b != 64) {
			return 0, 0, false
		}
		return rcBitpacked, int(b / 8), true
	}
	return 0, 0, false
}

// rechunkPage cuts the deleted rows out of a mini-block page (rows [a, a+n)
// of the source, some deleted) chunk by chunk. It returns the output pages
// (more than one when a bit-packed page was split), or nil when the page
// needs a decode.
func rechunkPage(s *filterSrc, pg *file2pb.ColumnMetadata_Page, pl *enc21pb.PageLayout, a, n uint64) ([]*outPage, error) {
	mb := pl.GetMiniBlockLayout()
	if mb == nil || mb.GetNumItems() != n {
		return nil, nil
	}
	kind, width, ok := rechunkable(mb)
	if !ok {
		return nil, nil
	}
	bufs := lancefile.PageBuffers(pg)
	want := 2
	if mb.GetDictionary() != nil {
		want = 3
	}
	if len(bufs) != want {
		return nil, nil
	}
	meta, err := readBuffer(s, bufs[0])
	if err != nil {
		return nil, err
	}
	chunks, err := lancefile.MiniBlockChunks(mb, meta, int(bufs[1].Size))
	if err != nil {
		return nil, err
	}
	lastLive, ok := survivorsEnd(s, a, chunks, kind)
	if !ok {
		return nil, nil
	}
	pc := &pageCutter{s: s, mb: mb, rc: &rechunker{mb: mb, kind: kind, width: width}, lastLive: lastLive}
	if pc.data, err = readBuffer(s, bufs[1]); err != nil {
		return nil, err
	}
	if want == 3 {
		if pc.dict, err = readBuffer(s, bufs[2]); err != nil {
			return nil, err
		}
	}
	if d := mb.GetDefCompression(); d != nil {
		pc.rc.defW = int(d.GetOutOfLineBitpacking().GetValues().GetFlat().GetBitsPerValue())
		pc.rc.hasDef = true
	}
	for ci, c := range chunks {
		if ok, err := pc.chunk(ci, c, a+uint64(c.First)); !ok || err != nil {
			return nil, err
		}
	}
	if err := pc.finish(); err != nil {
		return nil, err
	}
	return pc.pages, nil
}

// readBuffer reads one page buffer of the source.
func readBuffer(s *filterSrc, b lancefile.Buffer) ([]byte, error) {
	out := make([]byte, b.Size)
	if _, err := s.R.ReadAt(out, int64(b.Offset)); err != nil {
		return nil, fmt.Errorf("lancewrite: read %s [%d,+%d): %w", s.Name, b.Offset, b.Size, err)
	}
	return out, nil
}

// survivorsEnd is the last chunk that keeps a row (chunks of the page
// starting at source row a); false when none does, or when a bit-packed
// page would split more than maxRechunkSplits times.
func survivorsEnd(s *filterSrc, a uint64, chunks []lancefile.MiniBlockChunk, kind rechunkKind) (int, bool) {
	lastLive := -1
	for ci, c := range chunks {
		lo := a + uint64(c.First)
		if s.deadIn(lo, lo+uint64(c.Values)) < uint64(c.Values) {
			lastLive = ci
		}
	}
	splits := 0
	for ci, c := range chunks {
		lo := a + uint64(c.First)
		dead := s.deadIn(lo, lo+uint64(c.Values))
		live := uint64(c.Values) - dead
		if kind == rcBitpacked && dead > 0 && live > 0 && ci < lastLive && bits.OnesCount64(live) != 1 {
			splits++
		}
	}
	return lastLive, lastLive >= 0 && (kind != rcBitpacked || splits <= maxRechunkSplits)
}

// pageCutter assembles the output pages of one re-chunked page.
type pageCutter struct {
	s          *filterSrc
	mb         *enc21pb.MiniBlockLayout
	rc         *rechunker
	data, dict []byte // the page's chunk data and dictionary (nil: none)
	lastLive   int    // the last chunk that keeps a row
	cur        pieceBuf
	pages      []*outPage
}

// chunk adds chunk ci (its first row is source row lo): kept byte for
// byte, left out, or cut apart. false (with a nil error) when a survivor
// chunk does not fit and the page must be re-encoded.
func (pc *pageCutter) chunk(ci int, c lancefile.MiniBlockChunk, lo uint64) (bool, error) {
	s, kind := pc.s, pc.rc.kind
	dead := s.deadIn(lo, lo+uint64(c.Values))
	if dead == uint64(c.Values) {
		return true, nil
	}
	if pc.cur.rows == 0 {
		pc.cur.start = lo
	}
	raw := pc.data[c.Off : c.Off+c.Size]
	if dead == 0 {
		pc.cur.add(raw, c.Values)
		return true, nil
	}
	keep := liveRuns(s, lo, uint64(c.Values))
	parts, err := lancefile.SplitMiniBlockChunk(pc.mb, raw)
	if err != nil {
		return false, fmt.Errorf("chunk %d: %w", ci, err)
	}
	live := c.Values - int(dead)
	vals, defs, err := pc.rc.survivors(parts, c.Values, keep, live)
	if err != nil {
		return false, fmt.Errorf("chunk %d: %w", ci, err)
	}
	whole := ci == pc.lastLive || bits.OnesCount(uint(live)) == 1 || kind == rcBitpacked
	for at := 0; at < live; {
		k := live - at
		if !whole {
			k = 1 << (bits.Len(uint(live-at)) - 1)
		}
		err := pc.rc.emit(&pc.cur, vals, defs, at, at+k)
		if errors.Is(err, errRechunkFit) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		at += k
	}
	if kind == rcBitpacked && ci != pc.lastLive && bits.OnesCount(uint(live)) != 1 {
		return true, pc.finish()
	}
	return true, nil
}

// finish closes the page being assembled (if it holds rows).
func (pc *pageCutter) finish() error {
	cur := pc.cur
	pc.cur = pieceBuf{}
	if cur.rows == 0 {
		return nil
	}
	// the last chunk's count comes from num_items: its log is 0, as a writer leaves it
	last := len(cur.meta) - 2
	binary.LittleEndian.PutUint16(cur.meta[last:], binary.LittleEndian.Uint16(cur.meta[last:])&^0xF)
	nl := proto.Clone(pc.mb).(*enc21pb.MiniBlockLayout)
	nl.NumItems = cur.rows
	lb, err := marshalOpts.Marshal(&enc21pb.PageLayout{Layout: &enc21pb.PageLayout_MiniBlockLayout{MiniBlockLayout: nl}})
	if err != nil {
		return fmt.Errorf("lancewrite: marshal page layout: %w", err)
	}
	out := [][]byte{cur.meta, cur.data}
	if pc.dict != nil {
		out = append(out, pc.dict)
	}
	var cost int64
	for _, b := range out {
		cost += int64(len(b))
	}
	pc.pages = append(pc.pages, &outPage{bufs: out, layout: mustAny(pageLayoutURL, lb), rows: cur.rows, priority: pc.s.outRow(cur.start), cost: cost})
	return nil
}

// pieceBuf is an output page being assembled: its chunk table and data.
type pieceBuf struct {
	meta, data []byte
	rows       uint64
	start      uint64 // source row of its first value
}

// add appends one encoded chunk of nvals values.
func (p *pieceBuf) add(chunk []byte, nvals int) {
	logN := bits.Len(uint(nvals)) - 1
	p.meta = binary.LittleEndian.AppendUint16(p.meta, uint16((len(chunk)/8-1)<<4|logN))
	p.data = append(p.data, chunk...)
	p.rows += uint64(nvals)
}

// liveRuns returns the live rows of source rows [lo, lo+n) as half-open
// runs relative to lo.
func liveRuns(s *filterSrc, lo, n uint64) [][2]uint64 {
	var runs [][2]uint64
	at := uint64(0)
	it := s.deleted.Iterator()
	it.AdvanceIfNeeded(uint32(lo))
	for it.HasNext() {
		d := uint64(it.Next())
		if d >= lo+n {
			break
		}
		if d-lo > at {
			runs = append(runs, [2]uint64{at, d - lo})
		}
		at = d - lo + 1
	}
	if at < n {
		runs = append(runs, [2]uint64{at, n})
	}
	return runs
}

// rechunker holds what one page's damaged chunks share.
type rechunker struct {
	mb     *enc21pb.MiniBlockLayout
	kind   rechunkKind
	width  int // value bytes (fixed, bit-packed words) or offset bytes (variable)
	hasDef bool
	defW   int
}

// chunkVals are a damaged chunk's surviving values, ready to be cut into
// chunks: fixed-width bytes (fixed, bit-packed: decoded words), or the
// variable values' bytes with their n+1 offsets.
type chunkVals struct {
	fixed []byte
	offs  []int
	vdata []byte
}

// survivors extracts the live values (and def levels) of one chunk.
func (r *rechunker) survivors(p lancefile.ChunkParts, nvals int, keep [][2]uint64, live int) (chunkVals, []uint16, error) {
	var cv chunkVals
	vb := p.Values[0]
	switch r.kind {
	case rcFixed:
		if len(vb) < nvals*r.width {
			return cv, nil, fmt.Errorf("%w: chunk of %d values has %d value bytes", lancefile.ErrCorrupt, nvals, len(vb))
		}
		cv.fixed = make([]byte, 0, live*r.width)
		for _, k := range keep {
			cv.fixed = append(cv.fixed, vb[int(k[0])*r.width:int(k[1])*r.width]...)
		}
	case rcBitpacked:
		raw, err := decodeInline(vb, nvals, r.width)
		if err != nil {
			return cv, nil, err
		}
		cv.fixed = make([]byte, 0, live*r.width)
		for _, k := range keep {
			cv.fixed = append(cv.fixed, raw[int(k[0])*r.width:int(k[1])*r.width]...)
		}
	case rcVariable:
		w := r.width
		if len(vb) < (nvals+1)*w {
			return cv, nil, fmt.Errorf("%w: variable chunk of %d bytes for %d offsets", lancefile.ErrCorrupt, len(vb), nvals+1)
		}
		off := func(i int) int {
			if w == 4 {
				return int(binary.LittleEndian.Uint32(vb[4*i:]))
			}
			return int(binary.LittleEndian.Uint64(vb[8*i:]))
		}
		cv.offs = make([]int, 1, live+1)
		for _, k := range keep {
			for i := int(k[0]); i < int(k[1]); i++ {
				b, e := off(i), off(i+1)
				if b > e || e > len(vb) {
					return cv, nil, fmt.Errorf("%w: variable offset %d out of range", lancefile.ErrCorrupt, i)
				}
				cv.vdata = append(cv.vdata, vb[b:e]...)
				cv.offs = append(cv.offs, len(cv.vdata))
			}
		}
	}
	if !r.hasDef {
		return cv, nil, nil
	}
	if p.NumLevels != nvals {
		return cv, nil, fmt.Errorf("%w: chunk of %d values has %d def levels", lancefile.ErrCorrupt, nvals, p.NumLevels)
	}
	all, err := codec.DecodeOutOfLineBitpacked[uint16](nil, p.Def, r.defW, nvals)
	if err != nil {
		return cv, nil, err
	}
	defs := make([]uint16, 0, live)
	for _, k := range keep {
		defs = append(defs, all[k[0]:k[1]]...)
	}
	return cv, defs, nil
}

// decodeInline decodes one InlineBitpacking chunk to little-endian words.
func decodeInline(b []byte, n, width int) ([]byte, error) {
	switch width {
	case 1:
		return codec.DecodeInlineBitpacked[uint8](nil, b, n)
	case 2:
		v, err := codec.DecodeInlineBitpacked[uint16](nil, b, n)
		return codec.AsBytes(v), err
	case 4:
		v, err := codec.DecodeInlineBitpacked[uint32](nil, b, n)
		return codec.AsBytes(v), err
	}
	v, err := codec.DecodeInlineBitpacked[uint64](nil, b, n)
	return codec.AsBytes(v), err
}

// emit encodes survivors [s, e) as one chunk appended to p.
func (r *rechunker) emit(p *pieceBuf, cv chunkVals, defs []uint16, s, e int) error {
	n := e - s
	var vb []byte
	switch r.kind {
	case rcFixed:
		vb = cv.fixed[s*r.width : e*r.width]
	case rcBitpacked:
		vb = inlineBitpack(cv.fixed[s*r.width:e*r.width], r.width)
	case rcVariable:
		w := r.width
		base := w*(n+1) - cv.offs[s]
		vb = make([]byte, 0, w*(n+1)+cv.offs[e]-cv.offs[s]+w)
		for i := s; i <= e; i++ {
			if w == 4 {
				vb = binary.LittleEndian.AppendUint32(vb, uint32(cv.offs[i]+base))
			} else {
				vb = binary.LittleEndian.AppendUint64(vb, uint64(cv.offs[i]+base))
			}
		}
		vb = pad(append(vb, cv.vdata[cv.offs[s]:cv.offs[e]]...), w, padByte)
	}
	var db []byte
	if r.hasDef {
		db = codec.AppendOutOfLineBitpacked(nil, defs[s:e], r.defW)
	}
	if len(vb) > maxU16 || len(db) > maxU16 {
		return errRechunkFit
	}
	chunk := binary.LittleEndian.AppendUint16(nil, 0)
	if r.hasDef {
		chunk[0], chunk[1] = byte(n), byte(n>>8)
		chunk = binary.LittleEndian.AppendUint16(chunk, uint16(len(db)))
	}
	chunk = binary.LittleEndian.AppendUint16(chunk, uint16(len(vb)))
	chunk = pad(chunk, 8, chunkFill)
	if db != nil {
		chunk = pad(append(chunk, db...), 8, chunkFill)
	}
	chunk = pad(append(chunk, vb...), 8, chunkFill)
	if len(chunk) > maxChunkBytes {
		return errRechunkFit
	}
	p.add(chunk, n)
	return nil
}
