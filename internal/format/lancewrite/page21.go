package lancewrite

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow/bitutil"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
)

const (
	// values of at least this many bytes go to full-zip pages (lance's is_narrow)
	wideValueBytes = 256
	// FSST is tried for string pages of at least this many bytes with
	// values of at least fsstMinMaxLen bytes (lance's FSST_LEAST_*).
	fsstMinBytes  = 32 * 1024
	fsstMinMaxLen = 5
	// dictionary encoding is tried from this many values on, and used when
	// it is below dictRatio of the plain size (lance's dict-size-ratio 0.8).
	dictMinValues = 100
	dictSample    = 1024 // values sampled before building a dictionary of a big page
	// pages with a value over this size compress every value with zstd
	// (lance's per-value General compression for full-zip)
	perValueZstdLen = 32 * 1024
	dictRatio       = 0.8
)

// encodePage21 encodes the buffered rows of a leaf as one 2.1 page.
func (l *leaf) encodePage21() ([][]byte, *enc21pb.PageLayout, error) {
	lv := l.buildLevels()
	if l.nvis == 0 {
		// no value slots at all (only null/empty lists): complex all-null
		return [][]byte{u16s(lv.rep), u16s(lv.def)}, &enc21pb.PageLayout{Layout: &enc21pb.PageLayout_AllNullLayout{
			AllNullLayout: &enc21pb.AllNullLayout{Layers: lv.layers}}}, nil
	}
	if l.nvalid == 0 && lv.rep == nil && len(lv.layers) == 1 && lv.def != nil {
		return nil, &enc21pb.PageLayout{Layout: &enc21pb.PageLayout_AllNullLayout{
			AllNullLayout: &enc21pb.AllNullLayout{Layers: lv.layers}}}, nil
	}
	n := l.n
	switch n.vk {
	case valNull:
		return nil, nil, fmt.Errorf("%w: field %q: null values inside lists or structs", ErrUnsupportedType, n.f.Name)
	case valFixed:
		if n.width >= wideValueBytes {
			return l.fullZipFixed(lv, n.width, false)
		}
		var vals mbValues = &flatValues{data: l.fixed, width: n.width}
		switch n.width {
		case 1, 2, 4, 8:
			// lance's order: RLE when runs are under half the values, else
			// bitpacking when it shrinks the data, else flat
			best := len(l.fixed) * 15 / 16
			if packed := bitpackedSize(l.fixed, n.width); packed < best {
				vals, best = &bitpackedValues{data: l.fixed, width: n.width}, packed
			}
			if runs := codec.RLERuns(l.fixed, n.width); runs < l.nvis/2 && runs*(n.width+1)+8*(l.nvis/maxChunkValues+1) < best {
				vals = &rleValues{data: l.fixed, width: n.width}
			}
		}
		return wrapMB(miniBlockPage(lv, l.nvis, vals, nil))
	case valBool:
		return wrapMB(miniBlockPage(lv, l.nvis, &boolValues{bits: l.bits}, nil))
	case valFSL:
		row := n.dim * n.width
		if row >= wideValueBytes {
			return l.fullZipFixed(lv, row, true)
		}
		v := &fslValues{data: l.fixed, dim: n.dim, width: n.width}
		if l.itemNulls {
			v.itemValid = l.itemValid
		}
		return wrapMB(miniBlockPage(lv, l.nvis, v, nil))
	case valVariable:
		if l.dict != nil {
			if d := l.mergedPage(); d != nil {
				return wrapMB(miniBlockPage(lv, l.nvis, d.indices, d))
			}
			l.undict()
		}
		if l.maxLen >= wideValueBytes {
			return l.fullZipVariable(lv)
		}
		if d := l.tryDictionary(); d != nil {
			return wrapMB(miniBlockPage(lv, l.nvis, d.indices, d))
		}
		return wrapMB(miniBlockPage(lv, l.nvis, l.stringValues(), nil))
	}
	return nil, nil, fmt.Errorf("%w: field %q", ErrUnsupportedType, n.f.Name)
}

func wrapMB(bufs [][]byte, mb *enc21pb.MiniBlockLayout, err error) ([][]byte, *enc21pb.PageLayout, error) {
	if err != nil {
		return nil, nil, err
	}
	return bufs, &enc21pb.PageLayout{Layout: &enc21pb.PageLayout_MiniBlockLayout{MiniBlockLayout: mb}}, nil
}

func u16s(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], x)
	}
	return out
}

// stringsOf returns the value slots of a variable leaf as byte slices.
func (l *leaf) stringsOf() [][]byte {
	out := make([][]byte, l.nvis)
	for i := range out {
		out[i] = l.data[l.offs[i]:l.offs[i+1]]
	}
	return out
}

// fsstCode FSST-codes the values if that is worth it (lance's rule: the
// page holds at least 32 KiB and values of at least 5 bytes, and the codes
// are smaller). It returns the symbol table and the coded values.
func fsstCode(strs [][]byte, total, maxLen int) (table []byte, offs []int64, data []byte, ok bool) {
	if total < fsstMinBytes || maxLen < fsstMinMaxLen {
		return nil, nil, nil, false
	}
	enc := codec.TrainFSST(strs)
	offs = make([]int64, 1, len(strs)+1)
	data = make([]byte, 0, total/2)
	for _, s := range strs {
		data = enc.AppendEncode(data, s)
		offs = append(offs, int64(len(data)))
	}
	if len(data)+codec.FSSTTableLen >= total*9/10 {
		return nil, nil, nil, false
	}
	return enc.Table(), offs, data, true
}

func (l *leaf) large() bool {
	return l.n.f.LogicalType == "large_string" || l.n.f.LogicalType == "large_binary"
}

func (l *leaf) stringValues() *varValues {
	if table, offs, data, ok := fsstCode(l.stringsOf(), len(l.data), l.maxLen); ok {
		return &varValues{offs: offs, data: data, fsst: table, large: l.large()}
	}
	return &varValues{offs: l.offs, data: l.data, large: l.large()}
}

// dictPage is a structural dictionary: indices per value, the distinct
// values in a Variable block buffer.
type dictPage struct {
	indices mbValues
	buf     []byte
	enc     *enc21pb.CompressiveEncoding
	n       int
}

func (l *leaf) tryDictionary() *dictPage {
	if l.nvis < dictMinValues {
		return nil
	}
	limit := l.nvis / 2
	if l.nvis >= 4*dictSample {
		// values nearly all distinct in a sample spread over the page: no
		// dictionary (saves filling a map with up to nvis/2 keys first)
		seen := make(map[string]struct{}, dictSample)
		step := l.nvis / dictSample
		for i := 0; i < dictSample; i++ {
			seen[string(l.data[l.offs[i*step]:l.offs[i*step+1]])] = struct{}{}
		}
		if len(seen) > dictSample*97/100 {
			return nil
		}
	}
	ids := make(map[string]uint32)
	var order [][]byte
	idx := make([]byte, 4*l.nvis)
	for i := 0; i < l.nvis; i++ {
		s := l.data[l.offs[i]:l.offs[i+1]]
		id, ok := ids[string(s)]
		if !ok {
			if len(order) >= limit {
				return nil
			}
			id = uint32(len(order))
			ids[string(s)] = id
			order = append(order, s)
		}
		binary.LittleEndian.PutUint32(idx[4*i:], id)
	}
	return dictionaryPage(order, idx, l.nvis, len(l.data), l.large())
}

// dictionaryPage is the dictionary page of nvis values given as indices
// (little-endian uint32, idx) into the distinct values order, the values
// holding plainBytes together; nil when the dictionary is not below
// dictRatio of the plain size.
func dictionaryPage(order [][]byte, idx []byte, nvis, plainBytes int, large bool) *dictPage {
	if len(order) == 0 {
		return nil
	}
	dictBytes := 0
	for _, s := range order {
		dictBytes += len(s)
	}
	w := bits.Len(uint(len(order) - 1))
	dictSize := dictBytes + 4*(len(order)+3) + (nvis*w+7)/8 + (nvis/1024+1)*4
	plain := plainBytes + 4*nvis
	if float64(dictSize) >= dictRatio*float64(plain) {
		return nil
	}
	ob := 4
	if large {
		ob = 8
	}
	buf := make([]byte, 0, 2*ob+ob*(len(order)+1)+dictBytes)
	put := func(v uint64) {
		if large {
			buf = binary.LittleEndian.AppendUint64(buf, v)
		} else {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(v))
		}
	}
	put(uint64(8 * ob))
	put(uint64(2*ob + ob*(len(order)+1)))
	var off uint64
	put(0)
	for _, s := range order {
		off += uint64(len(s))
		put(off)
	}
	for _, s := range order {
		buf = append(buf, s...)
	}
	return &dictPage{indices: &bitpackedValues{data: idx, width: 4}, buf: buf, enc: variableOf(large), n: len(order)}
}

// mergedDict holds the values of a flat variable-width leaf as indices into
// a dictionary merged from source pages' dictionaries (colRun.dictionaries):
// no value is decoded on the way.
type mergedDict struct {
	ids   map[string]uint32
	order [][]byte
	idx   []byte // little-endian uint32 per value slot
	bytes int    // the values' bytes
}

// addPage appends n values given by the indices idx into a source page's
// dictionary entries.
func (l *leaf) addDictPage(entries [][]byte, idx []uint32) {
	d := l.dict
	local := make([]uint32, len(entries))
	lens := make([]int, len(entries))
	for i, e := range entries {
		id, ok := d.ids[string(e)]
		if !ok {
			id = uint32(len(d.order))
			e = append([]byte(nil), e...)
			d.ids[string(e)] = id
			d.order = append(d.order, e)
			l.maxLen = max(l.maxLen, len(e))
		}
		local[i], lens[i] = id, len(e)
	}
	d.idx = grow(d.idx, 4*len(idx))
	for _, k := range idx {
		d.idx = binary.LittleEndian.AppendUint32(d.idx, local[k])
		d.bytes += lens[k]
	}
	l.rows += uint64(len(idx))
	l.nvis += len(idx)
	l.nvalid += len(idx)
}

// mergedPage is the leaf's merged dictionary as a dictionary page, or nil
// when lance's rules for a dictionary do not hold for it (as tryDictionary
// decides for decoded values).
func (l *leaf) mergedPage() *dictPage {
	d := l.dict
	if l.nvis < dictMinValues || len(d.order) > l.nvis/2 || l.maxLen >= wideValueBytes {
		return nil
	}
	return dictionaryPage(d.order, d.idx, l.nvis, d.bytes, l.large())
}

// undict turns the leaf's merged dictionary back into values.
func (l *leaf) undict() {
	d := l.dict
	l.dict = nil
	l.data = grow(l.data[:0], d.bytes)
	l.offs = grow(l.offs[:1], l.nvis)
	for i := 0; i < l.nvis; i++ {
		l.data = append(l.data, d.order[binary.LittleEndian.Uint32(d.idx[4*i:])]...)
		l.offs = append(l.offs, int64(len(l.data)))
	}
}

// fullZipFixed writes fixed-width values of rowBytes bytes (fsl: with the
// item validity bytes in front when items have nulls).
func (l *leaf) fullZipFixed(lv levels, rowBytes int, fsl bool) ([][]byte, *enc21pb.PageLayout, error) {
	n := l.n
	withValidity := fsl && l.itemNulls
	vbytes := 0
	if withValidity {
		vbytes = (n.dim + 7) / 8
	}
	return l.fullZip(lv, func(out []byte, slot int, valid bool) []byte {
		if withValidity {
			at := len(out)
			out = append(out, make([]byte, vbytes)...)
			for k := 0; k < n.dim; k++ {
				if bitutil.BitIsSet(l.itemValid, slot*n.dim+k) {
					bitutil.SetBit(out[at:], k)
				}
			}
		}
		return append(out, l.fixed[slot*rowBytes:(slot+1)*rowBytes]...)
	}, func(z *enc21pb.FullZipLayout) {
		z.Details = &enc21pb.FullZipLayout_BitsPerValue{BitsPerValue: uint32(8 * (rowBytes + vbytes))}
		if fsl {
			z.ValueCompression = &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_FixedSizeList{FixedSizeList: &enc21pb.FixedSizeList{
				ItemsPerValue: uint64(n.dim), HasValidity: withValidity, Values: flat(8 * n.width)}}}
		} else {
			z.ValueCompression = flat(8 * rowBytes)
		}
	}, false)
}

// fullZipVariable writes u32 length-prefixed values (FSST-coded when worth it).
func (l *leaf) fullZipVariable(lv levels) ([][]byte, *enc21pb.PageLayout, error) {
	offs, data := l.offs, l.data
	var table []byte
	var ok, zstd bool
	if l.maxLen > perValueZstdLen && len(l.data) >= perValueZstdLen {
		// lance compresses every value of such a page on its own with zstd
		zo, zd, err := zstdValues(l.stringsOf())
		if err != nil {
			return nil, nil, err
		}
		offs, data, zstd = zo, zd, true
	} else {
		var fo []int64
		var fd []byte
		if table, fo, fd, ok = fsstCode(l.stringsOf(), len(l.data), l.maxLen); ok {
			offs, data = fo, fd
		}
	}
	large := l.large()
	return l.fullZip(lv, func(out []byte, slot int, valid bool) []byte {
		if !valid {
			return out
		}
		v := data[offs[slot]:offs[slot+1]]
		if large {
			out = binary.LittleEndian.AppendUint64(out, uint64(len(v)))
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
		}
		return append(out, v...)
	}, func(z *enc21pb.FullZipLayout) {
		bitsOff := uint32(32)
		if large {
			bitsOff = 64
		}
		z.Details = &enc21pb.FullZipLayout_BitsPerOffset{BitsPerOffset: bitsOff}
		z.ValueCompression = variableOf(large)
		if zstd {
			z.ValueCompression = &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_General{General: &enc21pb.General{
				Compression: &enc21pb.BufferCompression{Scheme: enc21pb.CompressionScheme_COMPRESSION_ALGORITHM_ZSTD}, Values: variableOf(large)}}}
		} else if ok {
			z.ValueCompression = &enc21pb.CompressiveEncoding{Compression: &enc21pb.CompressiveEncoding_Fsst{Fsst: &enc21pb.Fsst{SymbolTable: table, Values: variableOf(large)}}}
		}
	}, true)
}

// fullZip zips control words and values entry by entry; the repetition
// index (byte offset of every row start, then the total) is written for
// pages with lists or variable-width values.
func (l *leaf) fullZip(lv levels, value func(out []byte, slot int, valid bool) []byte, describe func(*enc21pb.FullZipLayout), variable bool) ([][]byte, *enc21pb.PageLayout, error) {
	if lv.entries > int(^uint32(0)) {
		return nil, nil, fmt.Errorf("lancewrite: full-zip page of %d entries", lv.entries)
	}
	bitsRep, bitsDef := bitLen16(lv.maxRep), 0
	if lv.def != nil {
		bitsDef = bitLen16(lv.maxDef)
	}
	cw := 0
	switch t := bitsRep + bitsDef; {
	case t == 0:
	case t <= 8:
		cw = 1
	case t <= 16:
		cw = 2
	default:
		cw = 4
	}
	out := make([]byte, 0, cw*lv.entries+len(l.fixed)+len(l.data)+8*l.nvis)
	var starts []uint64
	slot := 0
	for i := 0; i < lv.entries; i++ {
		var rep, def uint16
		if lv.rep != nil {
			rep = lv.rep[i]
		}
		if lv.def != nil {
			def = lv.def[i]
		}
		if lv.rep == nil || rep == lv.maxRep {
			starts = append(starts, uint64(len(out)))
		}
		word := uint32(rep)<<bitsDef | uint32(def)
		switch cw {
		case 1:
			out = append(out, byte(word))
		case 2:
			out = binary.LittleEndian.AppendUint16(out, uint16(word))
		case 4:
			out = binary.LittleEndian.AppendUint32(out, word)
		}
		if lv.visible == nil || lv.visible[i] {
			out = value(out, slot, def == 0)
			slot++
		}
	}
	starts = append(starts, uint64(len(out)))
	z := &enc21pb.FullZipLayout{BitsRep: uint32(bitsRep), BitsDef: uint32(bitsDef),
		NumItems: uint32(lv.entries), NumVisibleItems: uint32(l.nvis), Layers: lv.layers}
	describe(z)
	bufs := [][]byte{out}
	if lv.rep != nil || variable {
		bufs = append(bufs, bytepacked(starts, uint64(len(out))))
	}
	return bufs, &enc21pb.PageLayout{Layout: &enc21pb.PageLayout_FullZipLayout{FullZipLayout: z}}, nil
}

// bytepacked stores values in the smallest of 1/2/4/8 bytes that holds max.
func bytepacked(vals []uint64, maxVal uint64) []byte {
	w := 8
	switch {
	case maxVal < 1<<8:
		w = 1
	case maxVal < 1<<16:
		w = 2
	case maxVal < 1<<32:
		w = 4
	}
	out := make([]byte, 0, w*len(vals))
	for _, v := range vals {
		switch w {
		case 1:
			out = append(out, byte(v))
		case 2:
			out = binary.LittleEndian.AppendUint16(out, uint16(v))
		case 4:
			out = binary.LittleEndian.AppendUint32(out, uint32(v))
		default:
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	}
	return out
}

// zstdValues compresses every value on its own (u64 size + zstd frame).
func zstdValues(strs [][]byte) ([]int64, []byte, error) {
	offs := make([]int64, 1, len(strs)+1)
	var data []byte
	for _, s := range strs {
		var err error
		if data, err = codec.AppendZstd(data, s); err != nil {
			return nil, nil, fmt.Errorf("lancewrite: zstd: %w", err)
		}
		offs = append(offs, int64(len(data)))
	}
	return offs, data, nil
}
