package lancefile

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

// page is one decoded 2.1 page of a leaf column: rep/def level entries and
// the visible value slots.
type page struct {
	rows    int
	entries int
	rep     []uint16 // nil: no repetition
	def     []uint16 // nil: see defFill
	// defFill is the def level of every entry when def is nil (0: valid).
	defFill uint16
	layers  []enc21pb.RepDefLayer
	vals    values
	maxRep  int
	// rowStart[r] is the entry index where row r starts (len rows+1); nil when
	// there is no repetition (entry r is row r).
	rowStart []int32
	// visBefore[r] is the number of visible values before row r (len rows+1);
	// nil when every entry is visible.
	visBefore []int32
}

func layerDefLevels(l enc21pb.RepDefLayer) int {
	switch l {
	case enc21pb.RepDefLayer_REPDEF_NULLABLE_ITEM, enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST, enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST:
		return 1
	case enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
		return 2
	}
	return 0
}

func isListLayer(l enc21pb.RepDefLayer) bool {
	switch l {
	case enc21pb.RepDefLayer_REPDEF_ALL_VALID_LIST, enc21pb.RepDefLayer_REPDEF_NULLABLE_LIST,
		enc21pb.RepDefLayer_REPDEF_EMPTYABLE_LIST, enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
		return true
	}
	return false
}

func checkLayers(ls []enc21pb.RepDefLayer) error {
	if len(ls) == 0 {
		return fmt.Errorf("%w: page has no rep/def layers", ErrCorrupt)
	}
	for _, l := range ls {
		if l < enc21pb.RepDefLayer_REPDEF_ALL_VALID_ITEM || l > enc21pb.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST {
			return fmt.Errorf("%w: rep/def layer %v", ErrUnsupportedEncoding, l)
		}
	}
	return nil
}

// maxVisibleDef is the sum of def levels of the layers inside the innermost
// list: entries with def above it own no value slot.
func maxVisibleDef(ls []enc21pb.RepDefLayer) int {
	m := 0
	for _, l := range ls {
		if isListLayer(l) {
			break
		}
		m += layerDefLevels(l)
	}
	return m
}

// hasUnknown reports unknown protobuf fields anywhere in m (a newer format).
func hasUnknown(m proto.Message) bool {
	found := false
	var walk func(r protoreflect.Message)
	walk = func(r protoreflect.Message) {
		if len(r.GetUnknown()) > 0 {
			found = true
			return
		}
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				walk(v.Message())
			}
			return !found
		})
	}
	walk(m.ProtoReflect())
	return found
}

// decodePage21 reads and decodes page pi of column ci.
func (f *File) decodePage21(ci, pi int) (*page, error) {
	p, err := f.decodePage21Inner(ci, pi)
	if err != nil {
		return nil, fmt.Errorf("%s: column %d page %d: %w", f.name, ci, pi, wrapCorrupt(err))
	}
	return p, nil
}

// wrapCorrupt makes codec errors match ErrCorrupt too.
func wrapCorrupt(err error) error {
	if errors.Is(err, codec.ErrCorrupt) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

func (f *File) pageLayout(ci, pi int) (*enc21pb.PageLayout, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	a, err := PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, err
	}
	if anyTypeName(a) != typeURLPageLayout21 {
		return nil, fmt.Errorf("%w: page encoding %q in a 2.1 file", ErrUnsupportedEncoding, a.GetTypeUrl())
	}
	pl := &enc21pb.PageLayout{}
	if err := proto.Unmarshal(a.GetValue(), pl); err != nil {
		return nil, fmt.Errorf("%w: decode page layout: %v", ErrCorrupt, err)
	}
	if hasUnknown(pl) {
		return nil, fmt.Errorf("%w: page layout has fields unknown to format 2.1", ErrUnsupportedEncoding)
	}
	return pl, nil
}

func (f *File) decodePage21Inner(ci, pi int) (*page, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	pl, err := f.pageLayout(ci, pi)
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(pg.GetBufferOffsets()))
	for i, b := range PageBuffers(pg) {
		if bufs[i], err = f.ReadBuffer(b); err != nil {
			return nil, err
		}
	}
	if pg.GetLength() > 1<<31 {
		return nil, fmt.Errorf("%w: page of %d rows", ErrCorrupt, pg.GetLength())
	}
	rows := int(pg.GetLength())
	var p *page
	switch l := pl.GetLayout().(type) {
	case *enc21pb.PageLayout_MiniBlockLayout:
		p, err = decodeMiniBlock(l.MiniBlockLayout, bufs)
	case *enc21pb.PageLayout_FullZipLayout:
		p, err = decodeFullZip(l.FullZipLayout, bufs, rows)
	case *enc21pb.PageLayout_AllNullLayout:
		p, err = decodeAllNull(l.AllNullLayout, bufs, rows)
	case *enc21pb.PageLayout_BlobLayout:
		return nil, fmt.Errorf("%w: blob layout", ErrUnsupportedEncoding)
	default:
		return nil, fmt.Errorf("%w: page layout %T", ErrUnsupportedEncoding, pl.GetLayout())
	}
	if err != nil {
		return nil, err
	}
	p.rows = rows
	return p, p.index()
}

// index validates counts and builds rowStart/visBefore.
func (p *page) index() error {
	if err := checkLayers(p.layers); err != nil {
		return err
	}
	for _, l := range p.layers {
		if isListLayer(l) {
			p.maxRep++
		}
	}
	if p.rep != nil && len(p.rep) != p.entries || p.def != nil && len(p.def) != p.entries {
		return fmt.Errorf("%w: %d entries but %d rep / %d def levels", ErrCorrupt, p.entries, len(p.rep), len(p.def))
	}
	maxDef := 0
	for _, l := range p.layers {
		maxDef += layerDefLevels(l)
	}
	for i, d := range p.def {
		if int(d) > maxDef {
			return fmt.Errorf("%w: def level %d at entry %d exceeds max %d", ErrCorrupt, d, i, maxDef)
		}
	}
	if p.maxRep == 0 {
		if p.rep != nil {
			for _, r := range p.rep {
				if r != 0 {
					return fmt.Errorf("%w: repetition levels without list layers", ErrCorrupt)
				}
			}
			p.rep = nil
		}
		if p.entries != p.rows || p.vals.n != p.rows {
			return fmt.Errorf("%w: %d rows but %d entries / %d values", ErrCorrupt, p.rows, p.entries, p.vals.n)
		}
		return nil
	}
	if p.rep == nil {
		return fmt.Errorf("%w: list layers without repetition levels", ErrCorrupt)
	}
	mvd := maxVisibleDef(p.layers)
	p.rowStart = make([]int32, 0, p.rows+1)
	p.visBefore = make([]int32, 0, p.rows+1)
	vis := int32(0)
	for i, r := range p.rep {
		if int(r) > p.maxRep {
			return fmt.Errorf("%w: rep level %d at entry %d exceeds max %d", ErrCorrupt, r, i, p.maxRep)
		}
		if int(r) == p.maxRep {
			p.rowStart = append(p.rowStart, int32(i))
			p.visBefore = append(p.visBefore, vis)
		} else if i == 0 {
			return fmt.Errorf("%w: first entry has rep level %d, want %d", ErrCorrupt, r, p.maxRep)
		}
		if p.def == nil || int(p.def[i]) <= mvd {
			vis++
		}
	}
	p.rowStart = append(p.rowStart, int32(p.entries))
	p.visBefore = append(p.visBefore, vis)
	if len(p.rowStart)-1 != p.rows {
		return fmt.Errorf("%w: repetition levels hold %d rows, page length is %d", ErrCorrupt, len(p.rowStart)-1, p.rows)
	}
	if int(vis) != p.vals.n {
		return fmt.Errorf("%w: %d visible entries but %d values", ErrCorrupt, vis, p.vals.n)
	}
	return nil
}

func decodeMiniBlock(l *enc21pb.MiniBlockLayout, bufs [][]byte) (*page, error) {
	p := &page{layers: l.GetLayers()}
	hasRep, hasDef := l.GetRepCompression() != nil, l.GetDefCompression() != nil
	want := 2
	if l.GetDictionary() != nil {
		want++
	}
	if l.GetRepetitionIndexDepth() > 0 {
		want++
	}
	if len(bufs) != want {
		return nil, fmt.Errorf("%w: mini-block page has %d buffers, want %d", ErrCorrupt, len(bufs), want)
	}
	if l.GetValueCompression() == nil {
		return nil, fmt.Errorf("%w: mini-block page without value compression", ErrCorrupt)
	}
	nb := int(l.GetNumBuffers())
	if nb < 1 || nb > 64 {
		return nil, fmt.Errorf("%w: mini-block with %d value buffers", ErrCorrupt, nb)
	}
	meta, data := bufs[0], bufs[1]
	if len(meta)%2 != 0 {
		return nil, fmt.Errorf("%w: chunk table of %d bytes", ErrCorrupt, len(meta))
	}
	nchunks := len(meta) / 2
	numItems := l.GetNumItems()
	if numItems > 1<<31 {
		return nil, fmt.Errorf("%w: mini-block with %d items", ErrCorrupt, numItems)
	}
	var dict *values
	var idx values
	target := &p.vals
	if l.GetDictionary() != nil {
		dict = &values{}
		if l.GetNumDictionaryItems() > 1<<31 {
			return nil, fmt.Errorf("%w: dictionary of %d items", ErrCorrupt, l.GetNumDictionaryItems())
		}
		if err := decodeBlock(l.GetDictionary(), bufs[2], int(l.GetNumDictionaryItems()), dict); err != nil {
			return nil, fmt.Errorf("dictionary: %w", err)
		}
		if dict.n != int(l.GetNumDictionaryItems()) {
			return nil, fmt.Errorf("%w: dictionary decoded %d items, want %d", ErrCorrupt, dict.n, l.GetNumDictionaryItems())
		}
		target = &idx
	}
	var rep, def values
	off, seen := 0, uint64(0)
	chunkBufs := make([][]byte, nb)
	for c := 0; c < nchunks; c++ {
		w := binary.LittleEndian.Uint16(meta[2*c:])
		nbytes := (int(w>>4) + 1) * 8
		var nvals uint64
		if c < nchunks-1 {
			nvals = 1 << (w & 0xF)
		} else {
			if numItems < seen {
				return nil, fmt.Errorf("%w: chunks hold more than num_items=%d values", ErrCorrupt, numItems)
			}
			nvals = numItems - seen
		}
		if nvals > 1<<16 {
			return nil, fmt.Errorf("%w: chunk %d of %d values", ErrCorrupt, c, nvals)
		}
		seen += nvals
		if off+nbytes > len(data) {
			return nil, fmt.Errorf("%w: chunk %d [%d,+%d) beyond data buffer of %d bytes", ErrCorrupt, c, off, nbytes, len(data))
		}
		chunk := data[off : off+nbytes]
		off += nbytes
		// Header: u16 num_levels, [u16 rep bytes], [u16 def bytes], u16 × nb.
		h := 2 + 2*nb
		if hasRep {
			h += 2
		}
		if hasDef {
			h += 2
		}
		if h > len(chunk) {
			return nil, fmt.Errorf("%w: chunk %d header beyond chunk", ErrCorrupt, c)
		}
		le := binary.LittleEndian
		numLevels := int(le.Uint16(chunk))
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
		sizes := make([]int, nb)
		for i := range sizes {
			sizes[i] = int(le.Uint16(chunk[o:]))
			o += 2
		}
		pad8 := func(x int) int { return (x + 7) &^ 7 }
		o = pad8(o)
		take := func(sz int, what string) ([]byte, error) {
			if o+sz > len(chunk) {
				return nil, fmt.Errorf("%w: chunk %d %s [%d,+%d) beyond chunk of %d bytes", ErrCorrupt, c, what, o, sz, len(chunk))
			}
			b := chunk[o : o+sz]
			o = pad8(o + sz)
			return b, nil
		}
		if hasRep {
			b, err := take(repSize, "rep levels")
			if err != nil {
				return nil, err
			}
			if err := decodeBlock(l.GetRepCompression(), b, numLevels, &rep); err != nil {
				return nil, fmt.Errorf("chunk %d rep levels: %w", c, err)
			}
		}
		if hasDef {
			b, err := take(defSize, "def levels")
			if err != nil {
				return nil, err
			}
			if err := decodeBlock(l.GetDefCompression(), b, numLevels, &def); err != nil {
				return nil, fmt.Errorf("chunk %d def levels: %w", c, err)
			}
		}
		for i, sz := range sizes {
			b, err := take(sz, "value buffer")
			if err != nil {
				return nil, err
			}
			chunkBufs[i] = b
		}
		if err := decodeMiniBlockValues(l.GetValueCompression(), chunkBufs, int(nvals), target); err != nil {
			return nil, fmt.Errorf("chunk %d values: %w", c, err)
		}
		if c == 0 && nchunks > 1 {
			target.reserve(int(numItems) - target.n)
		}
		if target.n != int(seen) {
			return nil, fmt.Errorf("%w: chunk %d decoded %d values in total, want %d", ErrCorrupt, c, target.n, seen)
		}
		if hasRep || hasDef {
			p.entries += numLevels
		}
	}
	if off != len(data) {
		return nil, fmt.Errorf("%w: chunks cover %d of %d data bytes", ErrCorrupt, off, len(data))
	}
	if seen != numItems {
		return nil, fmt.Errorf("%w: chunks hold %d values, num_items=%d", ErrCorrupt, seen, numItems)
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
		p.entries = int(numItems)
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
	get := func(i int) uint64 {
		b := idx.data[i*idx.width:]
		switch idx.width {
		case 1:
			return uint64(b[0])
		case 2:
			return uint64(binary.LittleEndian.Uint16(b))
		case 4:
			return uint64(binary.LittleEndian.Uint32(b))
		}
		return binary.LittleEndian.Uint64(b)
	}
	if idx.width > 8 {
		return fmt.Errorf("%w: dictionary indices of %d bytes", ErrCorrupt, idx.width)
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

func bytesForBits(bits uint32) int {
	switch {
	case bits == 0:
		return 0
	case bits <= 8:
		return 1
	case bits <= 16:
		return 2
	}
	return 4
}

func decodeFullZip(l *enc21pb.FullZipLayout, bufs [][]byte, rows int) (*page, error) {
	p := &page{layers: l.GetLayers()}
	if len(bufs) < 1 || len(bufs) > 2 {
		return nil, fmt.Errorf("%w: full-zip page has %d buffers", ErrCorrupt, len(bufs))
	}
	data := bufs[0]
	bitsRep, bitsDef := l.GetBitsRep(), l.GetBitsDef()
	if bitsRep > 16 || bitsDef > 16 {
		return nil, fmt.Errorf("%w: full-zip control word of %d+%d bits", ErrCorrupt, bitsRep, bitsDef)
	}
	cw := bytesForBits(bitsRep + bitsDef)
	n := int(l.GetNumItems())
	mvd := maxVisibleDef(p.layers)
	hasList := false
	for _, ly := range p.layers {
		hasList = hasList || isListLayer(ly)
	}
	if bitsRep > 0 {
		p.rep = make([]uint16, 0, min(n, len(data)))
	}
	if bitsDef > 0 {
		p.def = make([]uint16, 0, min(n, len(data)))
	}
	venc := l.GetValueCompression()
	var fixedBytes, offBytes int
	switch d := l.GetDetails().(type) {
	case *enc21pb.FullZipLayout_BitsPerValue:
		if d.BitsPerValue == 0 || d.BitsPerValue%8 != 0 {
			return nil, fmt.Errorf("%w: full-zip fixed values of %d bits", ErrUnsupportedEncoding, d.BitsPerValue)
		}
		fixedBytes = int(d.BitsPerValue / 8)
	case *enc21pb.FullZipLayout_BitsPerOffset:
		if d.BitsPerOffset != 32 && d.BitsPerOffset != 64 {
			return nil, fmt.Errorf("%w: full-zip offsets of %d bits", ErrUnsupportedEncoding, d.BitsPerOffset)
		}
		offBytes = int(d.BitsPerOffset / 8)
	default:
		return nil, fmt.Errorf("%w: full-zip layout without value width", ErrCorrupt)
	}
	pv, err := newPerValue(venc, fixedBytes > 0)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	o := 0
	repMask := uint32(1)<<bitsDef - 1
	for i := 0; i < n; i++ {
		var r, d uint32
		if cw > 0 {
			if o+cw > len(data) {
				return nil, fmt.Errorf("%w: full-zip entry %d beyond buffer", ErrCorrupt, i)
			}
			var word uint32
			switch cw {
			case 1:
				word = uint32(data[o])
			case 2:
				word = uint32(le.Uint16(data[o:]))
			default:
				word = le.Uint32(data[o:])
			}
			o += cw
			d = word & repMask
			r = word >> bitsDef
			if bitsRep > 0 {
				p.rep = append(p.rep, uint16(r))
			}
			if bitsDef > 0 {
				p.def = append(p.def, uint16(d))
			}
		}
		visible := !hasList || int(d) <= mvd
		if !visible {
			continue
		}
		if fixedBytes > 0 {
			if o+fixedBytes > len(data) {
				return nil, fmt.Errorf("%w: full-zip value %d beyond buffer", ErrCorrupt, i)
			}
			if err := pv.add(data[o:o+fixedBytes], &p.vals); err != nil {
				return nil, err
			}
			o += fixedBytes
			continue
		}
		if d != 0 {
			if err := pv.addNull(&p.vals); err != nil {
				return nil, err
			}
			continue
		}
		if o+offBytes > len(data) {
			return nil, fmt.Errorf("%w: full-zip length %d beyond buffer", ErrCorrupt, i)
		}
		var ln uint64
		if offBytes == 4 {
			ln = uint64(le.Uint32(data[o:]))
		} else {
			ln = le.Uint64(data[o:])
		}
		o += offBytes
		if ln > uint64(len(data)-o) {
			return nil, fmt.Errorf("%w: full-zip value %d of %d bytes beyond buffer", ErrCorrupt, i, ln)
		}
		if err := pv.add(data[o:o+int(ln)], &p.vals); err != nil {
			return nil, err
		}
		o += int(ln)
	}
	if o != len(data) {
		return nil, fmt.Errorf("%w: full-zip entries cover %d of %d bytes", ErrCorrupt, o, len(data))
	}
	if p.vals.n != int(l.GetNumVisibleItems()) && l.GetNumVisibleItems() != 0 {
		return nil, fmt.Errorf("%w: full-zip decoded %d visible values, layout says %d", ErrCorrupt, p.vals.n, l.GetNumVisibleItems())
	}
	p.entries = n
	if cw == 0 && n != rows {
		return nil, fmt.Errorf("%w: full-zip page of %d rows has %d items without levels", ErrCorrupt, rows, n)
	}
	return p, nil
}

// perValue decodes full-zip values one at a time.
type perValue struct {
	enc   *enc21pb.CompressiveEncoding
	fsst  *codec.FSSTDecoder
	fixed bool
}

func newPerValue(enc *enc21pb.CompressiveEncoding, fixed bool) (*perValue, error) {
	pv := &perValue{enc: enc, fixed: fixed}
	switch c := enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat, *enc21pb.CompressiveEncoding_FixedSizeList:
		if !fixed {
			return nil, fmt.Errorf("%w: variable full-zip with fixed compression %T", ErrUnsupportedEncoding, c)
		}
	case *enc21pb.CompressiveEncoding_Variable:
	case *enc21pb.CompressiveEncoding_Fsst:
		d, err := codec.NewFSSTDecoder(c.Fsst.GetSymbolTable())
		if err != nil {
			return nil, err
		}
		pv.fsst = d
	case *enc21pb.CompressiveEncoding_General:
		switch c.General.GetValues().GetCompression().(type) {
		case *enc21pb.CompressiveEncoding_Variable, nil:
		default:
			return nil, fmt.Errorf("%w: per-value general over %T", ErrUnsupportedEncoding, c.General.GetValues().GetCompression())
		}
	default:
		return nil, fmt.Errorf("%w: per-value compression %T", ErrUnsupportedEncoding, enc.GetCompression())
	}
	return pv, nil
}

func (pv *perValue) addNull(out *values) error {
	if err := out.setKind(kindVariable, 0); err != nil {
		return err
	}
	out.offs = append(out.offs, int64(len(out.data)))
	out.n++
	return nil
}

func (pv *perValue) add(b []byte, out *values) error {
	switch c := pv.enc.GetCompression().(type) {
	case *enc21pb.CompressiveEncoding_Flat:
		return appendFlat(c.Flat, b, 1, out)
	case *enc21pb.CompressiveEncoding_FixedSizeList:
		return appendFSL(c.FixedSizeList, [][]byte{b}, 1, out, true)
	case *enc21pb.CompressiveEncoding_Variable:
		return out.appendVar(b)
	case *enc21pb.CompressiveEncoding_Fsst:
		if err := out.setKind(kindVariable, 0); err != nil {
			return err
		}
		var err error
		if out.data, err = pv.fsst.Decode(out.data, b); err != nil {
			return err
		}
		out.offs = append(out.offs, int64(len(out.data)))
		out.n++
		return nil
	case *enc21pb.CompressiveEncoding_General:
		raw, err := codec.Decompress(codec.Scheme(c.General.GetCompression().GetScheme()), b)
		if err != nil {
			return err
		}
		return out.appendVar(raw)
	}
	return fmt.Errorf("%w: per-value compression %T", ErrUnsupportedEncoding, pv.enc.GetCompression())
}

func decodeAllNull(l *enc21pb.AllNullLayout, bufs [][]byte, rows int) (*page, error) {
	p := &page{layers: l.GetLayers()}
	if len(bufs) == 0 {
		p.entries = rows
		if len(p.layers) > 0 {
			p.defFill = 1
		}
		p.vals = values{allNull: true, n: rows}
		return p, nil
	}
	if len(bufs) != 2 {
		return nil, fmt.Errorf("%w: all-null page has %d buffers, want 0 or 2", ErrCorrupt, len(bufs))
	}
	if len(bufs[0])%2 != 0 || len(bufs[1])%2 != 0 {
		return nil, fmt.Errorf("%w: all-null level buffers of odd size", ErrCorrupt)
	}
	if len(bufs[0]) > 0 {
		p.rep = append([]uint16(nil), codec.AsWords[uint16](bufs[0])...)
	}
	if len(bufs[1]) > 0 {
		p.def = append([]uint16(nil), codec.AsWords[uint16](bufs[1])...)
	}
	p.entries = max(len(p.rep), len(p.def))
	// Visible slots (nulls inside the innermost list) hold no data.
	mvd := maxVisibleDef(p.layers)
	n := 0
	for i := 0; i < p.entries; i++ {
		if p.def == nil || int(p.def[i]) <= mvd {
			n++
		}
	}
	hasList := false
	for _, ly := range p.layers {
		hasList = hasList || isListLayer(ly)
	}
	if !hasList {
		n = p.entries
	}
	p.vals = values{allNull: true, n: n}
	return p, nil
}
