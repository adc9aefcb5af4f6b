package lancefile

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/pb/enc20pb"
)

// Format 2.0: one column per field in pre-order (struct header columns,
// list offset columns, leaves); page encodings are lance.encodings.ArrayEncoding
// trees (Nullable, Flat, Binary, Dictionary, FixedSizeList, List, SimpleStruct).

func (f *File) arrayEncoding(ci, pi int) (*enc20pb.ArrayEncoding, error) {
	pg := f.Columns[ci].Meta.GetPages()[pi]
	a, err := PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, err
	}
	if anyTypeName(a) != typeURLArrayEnc20 {
		return nil, fmt.Errorf("%w: page encoding %q in a 2.0 file", ErrUnsupportedEncoding, a.GetTypeUrl())
	}
	ae := &enc20pb.ArrayEncoding{}
	if err := proto.Unmarshal(a.GetValue(), ae); err != nil {
		return nil, fmt.Errorf("%w: decode array encoding: %v", ErrCorrupt, err)
	}
	return ae, nil
}

// page20 is a decoded 2.0 leaf page.
type page20 struct {
	vals  values
	valid []byte // one byte per value, nil = all valid
}

type dec20 struct {
	f       *File
	ci      int
	pageBuf [][]byte
}

func (d *dec20) buffer(b *enc20pb.Buffer) ([]byte, error) {
	i := int(b.GetBufferIndex())
	switch b.GetBufferType() {
	case enc20pb.Buffer_page:
		if i >= len(d.pageBuf) {
			return nil, fmt.Errorf("%w: page buffer %d of %d", ErrCorrupt, i, len(d.pageBuf))
		}
		return d.pageBuf[i], nil
	case enc20pb.Buffer_column:
		cm := d.f.Columns[d.ci].Meta
		if i >= len(cm.GetBufferOffsets()) {
			return nil, fmt.Errorf("%w: column buffer %d of %d", ErrCorrupt, i, len(cm.GetBufferOffsets()))
		}
		return d.f.ReadBuffer(Buffer{cm.GetBufferOffsets()[i], cm.GetBufferSizes()[i]})
	}
	return nil, fmt.Errorf("%w: buffer type %v", ErrUnsupportedEncoding, b.GetBufferType())
}

// decode decodes n values of an ArrayEncoding into a value store and an
// optional validity (one byte per value).
func (d *dec20) decode(ae *enc20pb.ArrayEncoding, n int) (*page20, error) {
	switch e := ae.GetArrayEncoding().(type) {
	case *enc20pb.ArrayEncoding_Nullable:
		return d.nullable(e.Nullable, n)
	case *enc20pb.ArrayEncoding_Flat:
		return d.flat(e.Flat, n)
	case *enc20pb.ArrayEncoding_FixedSizeList:
		return d.fixedSizeList(e.FixedSizeList, n)
	case *enc20pb.ArrayEncoding_Binary:
		return d.binary(e.Binary, n)
	case *enc20pb.ArrayEncoding_Dictionary:
		return d.dictionary(e.Dictionary, n)
	case *enc20pb.ArrayEncoding_Fsst:
		return d.fsst(e.Fsst, n)
	}
	return nil, fmt.Errorf("%w: 2.0 array encoding %T", ErrUnsupportedEncoding, ae.GetArrayEncoding())
}

// nullable decodes values with no nulls, all nulls, or a validity bitmap.
func (d *dec20) nullable(e *enc20pb.Nullable, n int) (*page20, error) {
	switch nn := e.GetNullability().(type) {
	case *enc20pb.Nullable_NoNulls:
		return d.decode(nn.NoNulls.GetValues(), n)
	case *enc20pb.Nullable_AllNulls:
		return &page20{vals: values{allNull: true, n: n}}, nil
	case *enc20pb.Nullable_SomeNulls:
		v, err := d.decode(nn.SomeNulls.GetValidity(), n)
		if err != nil {
			return nil, fmt.Errorf("validity: %w", err)
		}
		if v.vals.kind != kindBool {
			return nil, fmt.Errorf("%w: validity is not a bitmap", ErrCorrupt)
		}
		p, err := d.decode(nn.SomeNulls.GetValues(), n)
		if err != nil {
			return nil, err
		}
		p.valid = v.vals.data
		return p, nil
	}
	return nil, fmt.Errorf("%w: nullable without nullability", ErrCorrupt)
}

// flat decodes uncompressed bits (1 bit or whole bytes per value).
func (d *dec20) flat(fl *enc20pb.Flat, n int) (*page20, error) {
	if c := fl.GetCompression(); c != nil && c.GetScheme() != "" {
		return nil, fmt.Errorf("%w: 2.0 flat compression %q", ErrUnsupportedEncoding, c.GetScheme())
	}
	b, err := d.buffer(fl.GetBuffer())
	if err != nil {
		return nil, err
	}
	p := &page20{}
	bits := fl.GetBitsPerValue()
	switch {
	case bits == 1:
		err = p.vals.appendBits(b, n)
	case bits > 0 && bits%8 == 0:
		err = p.vals.appendFixed(b, int(bits/8), n)
	default:
		err = fmt.Errorf("%w: flat of %d bits", ErrUnsupportedEncoding, bits)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// fixedSizeList decodes n lists of dim items each as n fixed-width values.
func (d *dec20) fixedSizeList(e *enc20pb.FixedSizeList, n int) (*page20, error) {
	dim := int(e.GetDimension())
	if dim <= 0 || dim > 1<<20 {
		return nil, fmt.Errorf("%w: fixed size list of %d items", ErrCorrupt, dim)
	}
	items, err := d.decode(e.GetItems(), n*dim)
	if err != nil {
		return nil, err
	}
	if items.vals.allNull {
		return nil, fmt.Errorf("%w: all-null fixed size list items", ErrUnsupportedEncoding)
	}
	p := &page20{}
	p.vals = items.vals
	p.vals.fslDims = []int{dim}
	p.vals.fslValid = [][]byte{items.valid}
	p.vals.n = n
	if items.vals.kind == kindBool {
		p.vals.kind, p.vals.width = kindFixed, dim
	} else {
		p.vals.width *= dim
	}
	return p, nil
}

// dictionary decodes indices into the dictionary's items and materializes
// them; index 0 is null.
func (d *dec20) dictionary(e *enc20pb.Dictionary, n int) (*page20, error) {
	idx, err := d.decode(e.GetIndices(), n)
	if err != nil {
		return nil, fmt.Errorf("dictionary indices: %w", err)
	}
	items, err := d.decode(e.GetItems(), int(e.GetNumDictionaryItems()))
	if err != nil {
		return nil, fmt.Errorf("dictionary items: %w", err)
	}
	if idx.vals.kind != kindFixed || idx.vals.width > 8 {
		return nil, fmt.Errorf("%w: dictionary indices are not integers", ErrCorrupt)
	}
	p := &page20{valid: make([]byte, n)}
	for i := 0; i < n; i++ {
		k := leUint(idx.vals.fixedAt(i))
		if k == 0 || (idx.valid != nil && idx.valid[i] == 0) {
			if err := p.vals.setKind(items.vals.kind, items.vals.width); err != nil {
				return nil, err
			}
			if items.vals.kind == kindVariable {
				p.vals.offs = append(p.vals.offs, int64(len(p.vals.data)))
			} else {
				p.vals.data = append(p.vals.data, make([]byte, max(items.vals.width, 1))...)
			}
			p.vals.n++
			continue
		}
		k--
		if k >= uint64(items.vals.n) {
			return nil, fmt.Errorf("%w: dictionary index %d of %d items", ErrCorrupt, k+1, items.vals.n)
		}
		p.valid[i] = 1
		if items.valid != nil && items.valid[k] == 0 {
			p.valid[i] = 0
		}
		if items.vals.kind == kindVariable {
			err = p.vals.appendVar(items.vals.value(int(k)))
		} else {
			err = p.vals.appendFixed(items.vals.fixedAt(int(k)), items.vals.width, 1)
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// fsst decodes FSST-compressed variable-width values.
func (d *dec20) fsst(e *enc20pb.Fsst, n int) (*page20, error) {
	dec, err := codec.NewFSSTDecoder(e.GetSymbolTable())
	if err != nil {
		return nil, err
	}
	inner, err := d.decode(e.GetBinary(), n)
	if err != nil {
		return nil, err
	}
	if inner.vals.kind != kindVariable {
		return inner, nil
	}
	p := &page20{valid: inner.valid}
	for i := 0; i < n; i++ {
		b, err := dec.Decode(nil, inner.vals.value(i))
		if err != nil {
			return nil, err
		}
		if err := p.vals.appendVar(b); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func leUint(b []byte) uint64 {
	var x [8]byte
	copy(x[:], b)
	return binary.LittleEndian.Uint64(x[:])
}

// binary decodes u64 end offsets (null: end + null_adjustment) and bytes.
func (d *dec20) binary(b *enc20pb.Binary, n int) (*page20, error) {
	idx, err := d.decode(b.GetIndices(), n)
	if err != nil {
		return nil, fmt.Errorf("binary indices: %w", err)
	}
	if idx.vals.kind != kindFixed || idx.vals.width > 8 {
		return nil, fmt.Errorf("%w: binary indices are not integers", ErrCorrupt)
	}
	fl := b.GetBytes().GetFlat()
	if fl == nil {
		return nil, fmt.Errorf("%w: binary bytes encoded as %T", ErrUnsupportedEncoding, b.GetBytes().GetArrayEncoding())
	}
	data, err := d.buffer(fl.GetBuffer())
	if err != nil {
		return nil, err
	}
	adj := b.GetNullAdjustment()
	p := &page20{}
	start := uint64(0)
	if err := p.vals.setKind(kindVariable, 0); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		e := leUint(idx.vals.fixedAt(i))
		null := adj > 0 && e >= adj
		if null {
			e -= adj
			if p.valid == nil {
				p.valid = ones(n)
			}
			p.valid[i] = 0
		}
		if e < start || e > uint64(len(data)) {
			return nil, fmt.Errorf("%w: binary offset %d = %d out of range (start %d, %d bytes)", ErrCorrupt, i, e, start, len(data))
		}
		if !null {
			p.vals.data = append(p.vals.data, data[start:e]...)
		}
		p.vals.offs = append(p.vals.offs, int64(len(p.vals.data)))
		p.vals.n++
		start = e
	}
	return p, nil
}
