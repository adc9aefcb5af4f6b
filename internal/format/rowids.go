package format

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

// Stable row ids (https://github.com/lancedb/lance/blob/main/docs/src/format/table/row_id_lineage.md): a fragment rewrite on a table
// with stable row ids must carry each kept row's id and its created / last
// updated versions into the new fragments, in the order the rows are written:
// old fragments in group order, rows ascending, deleted rows skipped.

// ErrExternalRowMeta is returned for fragments whose row ids or version
// sequences live in external files; lanced does not rewrite them.
var ErrExternalRowMeta = errors.New("format: external row-id or version sequences are not supported")

// RowMeta is the per-row Lineage of one fragment, decoded.
type RowMeta struct {
	IDs         []uint64 // nil when the table has no stable row ids
	Created     []uint64
	LastUpdated []uint64
}

// HasRowIDs reports whether the fragment carries row-id metadata.
func HasRowIDs(f *tablepb.DataFragment) bool { return f.GetRowIdSequence() != nil }

// DecodeRowIDs expands a fragment's inline row-id sequence: the stable row
// id of each physical row, in offset order (8 bytes per physical row).
func DecodeRowIDs(f *tablepb.DataFragment) ([]uint64, error) {
	if f.GetExternalRowIds() != nil {
		return nil, fmt.Errorf("fragment %d: %w", f.GetId(), ErrExternalRowMeta)
	}
	var seq tablepb.RowIdSequence
	if err := proto.Unmarshal(f.GetInlineRowIds(), &seq); err != nil {
		return nil, fmt.Errorf("fragment %d: row IDs: %w", f.GetId(), err)
	}
	var ids []uint64
	for _, s := range seq.GetSegments() {
		vals, err := segmentValues(s)
		if err != nil {
			return nil, fmt.Errorf("fragment %d: row IDs: %w", f.GetId(), err)
		}
		ids = append(ids, vals...)
	}
	if uint64(len(ids)) != f.GetPhysicalRows() {
		return nil, fmt.Errorf("fragment %d: %d row ids for %d physical rows", f.GetId(), len(ids), f.GetPhysicalRows())
	}
	return ids, nil
}

// DecodeRowMeta expands a fragment's row-id and version sequences.
func DecodeRowMeta(f *tablepb.DataFragment) (*RowMeta, error) {
	if f.GetExternalRowIds() != nil || f.GetExternalCreatedAtVersions() != nil || f.GetExternalLastUpdatedAtVersions() != nil {
		return nil, fmt.Errorf("fragment %d: %w", f.GetId(), ErrExternalRowMeta)
	}
	n := f.GetPhysicalRows()
	m := &RowMeta{}
	var err error
	if m.IDs, err = DecodeRowIDs(f); err != nil {
		return nil, err
	}
	if b := f.GetInlineCreatedAtVersions(); b != nil {
		if m.Created, err = decodeVersions(b, n); err != nil {
			return nil, fmt.Errorf("fragment %d: created-at versions: %w", f.GetId(), err)
		}
	} else {
		m.Created = fill(n, 1) // Lance's default when absent
	}
	if b := f.GetInlineLastUpdatedAtVersions(); b != nil {
		if m.LastUpdated, err = decodeVersions(b, n); err != nil {
			return nil, fmt.Errorf("fragment %d: last-updated versions: %w", f.GetId(), err)
		}
	} else {
		m.LastUpdated = append([]uint64(nil), m.Created...)
	}
	return m, nil
}

func fill(n, v uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func decodeVersions(b []byte, n uint64) ([]uint64, error) {
	var seq tablepb.RowDatasetVersionSequence
	if err := proto.Unmarshal(b, &seq); err != nil {
		return nil, err
	}
	out := make([]uint64, 0, n)
	for _, r := range seq.GetRuns() {
		vals, err := segmentValues(r.GetSpan())
		if err != nil {
			return nil, err
		}
		for range vals {
			out = append(out, r.GetVersion())
		}
	}
	if uint64(len(out)) != n {
		return nil, fmt.Errorf("%d versions for %d physical rows", len(out), n)
	}
	return out, nil
}

func segmentValues(s *tablepb.U64Segment) ([]uint64, error) {
	switch seg := s.GetSegment().(type) {
	case *tablepb.U64Segment_Range_:
		r := seg.Range
		if r.GetEnd() < r.GetStart() {
			return nil, fmt.Errorf("range %d..%d", r.GetStart(), r.GetEnd())
		}
		out := make([]uint64, 0, r.GetEnd()-r.GetStart())
		for v := r.GetStart(); v < r.GetEnd(); v++ {
			out = append(out, v)
		}
		return out, nil
	case *tablepb.U64Segment_RangeWithHoles_:
		r := seg.RangeWithHoles
		holes, err := arrayValues(r.GetHoles())
		if err != nil {
			return nil, err
		}
		hs := make(map[uint64]bool, len(holes))
		for _, h := range holes {
			hs[h] = true
		}
		var out []uint64
		for v := r.GetStart(); v < r.GetEnd(); v++ {
			if !hs[v] {
				out = append(out, v)
			}
		}
		return out, nil
	case *tablepb.U64Segment_RangeWithBitmap_:
		r := seg.RangeWithBitmap
		bm := r.GetBitmap()
		var out []uint64
		for v := r.GetStart(); v < r.GetEnd(); v++ {
			k := v - r.GetStart()
			if k/8 >= uint64(len(bm)) {
				return nil, fmt.Errorf("range bitmap too short")
			}
			if bm[k/8]&(1<<(k%8)) != 0 { // LSB first (verified on 8.0.0)
				out = append(out, v)
			}
		}
		return out, nil
	case *tablepb.U64Segment_SortedArray:
		return arrayValues(seg.SortedArray)
	case *tablepb.U64Segment_Array:
		return arrayValues(seg.Array)
	}
	return nil, fmt.Errorf("unknown row-id segment")
}

func arrayValues(a *tablepb.EncodedU64Array) ([]uint64, error) {
	switch arr := a.GetArray().(type) {
	case *tablepb.EncodedU64Array_U16Array_:
		b := arr.U16Array.GetOffsets()
		if len(b)%2 != 0 {
			return nil, fmt.Errorf("u16 array of %d bytes", len(b))
		}
		out := make([]uint64, len(b)/2)
		for i := range out {
			out[i] = arr.U16Array.GetBase() + uint64(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, nil
	case *tablepb.EncodedU64Array_U32Array_:
		b := arr.U32Array.GetOffsets()
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("u32 array of %d bytes", len(b))
		}
		out := make([]uint64, len(b)/4)
		for i := range out {
			out[i] = arr.U32Array.GetBase() + uint64(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	case *tablepb.EncodedU64Array_U64Array_:
		b := arr.U64Array.GetValues()
		if len(b)%8 != 0 {
			return nil, fmt.Errorf("u64 array of %d bytes", len(b))
		}
		out := make([]uint64, len(b)/8)
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown encoded array")
}

// encodeArray encodes values in the smallest of Lance's array encodings.
func encodeArray(vals []uint64) *tablepb.EncodedU64Array {
	if len(vals) == 0 {
		return &tablepb.EncodedU64Array{Array: &tablepb.EncodedU64Array_U16Array_{U16Array: &tablepb.EncodedU64Array_U16Array{}}}
	}
	lo, hi := vals[0], vals[0]
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	switch {
	case hi-lo <= 0xffff:
		b := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v-lo))
		}
		return &tablepb.EncodedU64Array{Array: &tablepb.EncodedU64Array_U16Array_{U16Array: &tablepb.EncodedU64Array_U16Array{Base: lo, Offsets: b}}}
	case hi-lo <= 0xffffffff:
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v-lo))
		}
		return &tablepb.EncodedU64Array{Array: &tablepb.EncodedU64Array_U32Array_{U32Array: &tablepb.EncodedU64Array_U32Array{Base: lo, Offsets: b}}}
	}
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return &tablepb.EncodedU64Array{Array: &tablepb.EncodedU64Array_U64Array_{U64Array: &tablepb.EncodedU64Array_U64Array{Values: b}}}
}

// encodeSorted encodes one strictly ascending run, choosing among range,
// range with holes, range with bitmap and sorted array by Lance's size
// estimates (segment.rs), ties in that order.
func encodeSorted(run []uint64) *tablepb.U64Segment {
	start, end := run[0], run[len(run)-1]+1
	slots := end - start
	n := uint64(len(run))
	if slots == n {
		return &tablepb.U64Segment{Segment: &tablepb.U64Segment_Range_{Range: &tablepb.U64Segment_Range{Start: start, End: end}}}
	}
	holesCost := 24 + 4*(slots-n)
	bitmapCost := 24 + (slots+7)/8
	arrayCost := 24 + 2*n
	switch {
	case holesCost <= bitmapCost && holesCost <= arrayCost:
		holes := make([]uint64, 0, slots-n)
		j := 0
		for v := start; v < end; v++ {
			if j < len(run) && run[j] == v {
				j++
				continue
			}
			holes = append(holes, v)
		}
		return &tablepb.U64Segment{Segment: &tablepb.U64Segment_RangeWithHoles_{RangeWithHoles: &tablepb.U64Segment_RangeWithHoles{Start: start, End: end, Holes: encodeArray(holes)}}}
	case bitmapCost <= arrayCost:
		bm := make([]byte, (slots+7)/8)
		for _, v := range run {
			k := v - start
			bm[k/8] |= 1 << (k % 8)
		}
		return &tablepb.U64Segment{Segment: &tablepb.U64Segment_RangeWithBitmap_{RangeWithBitmap: &tablepb.U64Segment_RangeWithBitmap{Start: start, End: end, Bitmap: bm}}}
	}
	return &tablepb.U64Segment{Segment: &tablepb.U64Segment_SortedArray{SortedArray: encodeArray(run)}}
}

// EncodeRowIDs encodes a fragment's row IDs: each maximal ascending run
// becomes one segment.
func EncodeRowIDs(ids []uint64) ([]byte, error) {
	var seq tablepb.RowIdSequence
	for i := 0; i < len(ids); {
		j := i + 1
		for j < len(ids) && ids[j] > ids[j-1] {
			j++
		}
		seq.Segments = append(seq.Segments, encodeSorted(ids[i:j]))
		i = j
	}
	return proto.Marshal(&seq)
}

// EncodeVersions encodes per-row versions as runs over positions.
func EncodeVersions(vs []uint64) ([]byte, error) {
	var seq tablepb.RowDatasetVersionSequence
	for i := 0; i < len(vs); {
		j := i + 1
		for j < len(vs) && vs[j] == vs[i] {
			j++
		}
		seq.Runs = append(seq.Runs, &tablepb.RowDatasetVersionRun{
			Span:    &tablepb.U64Segment{Segment: &tablepb.U64Segment_Range_{Range: &tablepb.U64Segment_Range{Start: uint64(i), End: uint64(j)}}},
			Version: vs[i],
		})
		i = j
	}
	return proto.Marshal(&seq)
}

// Lineage collects the row metadata of the rows a rewrite keeps, in write
// order, and hands it out to the new fragments in chunks of their row counts
// (Lance's mask + concatenate + rechunk).
type Lineage struct {
	ids, created, lastUpdated []uint64
}

// keep appends the kept rows of one old fragment; deleted may be nil.
func (l *Lineage) Keep(m *RowMeta, deleted *roaring.Bitmap) {
	for i := range m.IDs {
		if deleted != nil && deleted.Contains(uint32(i)) {
			continue
		}
		l.ids = append(l.ids, m.IDs[i])
		l.created = append(l.created, m.Created[i])
		l.lastUpdated = append(l.lastUpdated, m.LastUpdated[i])
	}
}

// assign sets the next n rows' metadata on a new fragment.
func (l *Lineage) Assign(f *tablepb.DataFragment, n uint64) error {
	if uint64(len(l.ids)) < n {
		return fmt.Errorf("row lineage: %d rows written but only %d row ids kept", n, len(l.ids))
	}
	ids, err := EncodeRowIDs(l.ids[:n])
	if err != nil {
		return err
	}
	cr, err := EncodeVersions(l.created[:n])
	if err != nil {
		return err
	}
	lu, err := EncodeVersions(l.lastUpdated[:n])
	if err != nil {
		return err
	}
	f.RowIdSequence = &tablepb.DataFragment_InlineRowIds{InlineRowIds: ids}
	f.CreatedAtVersionSequence = &tablepb.DataFragment_InlineCreatedAtVersions{InlineCreatedAtVersions: cr}
	f.LastUpdatedAtVersionSequence = &tablepb.DataFragment_InlineLastUpdatedAtVersions{InlineLastUpdatedAtVersions: lu}
	l.ids, l.created, l.lastUpdated = l.ids[n:], l.created[n:], l.lastUpdated[n:]
	return nil
}

// Left is the number of kept rows not yet assigned to a fragment.
func (l *Lineage) Left() int { return len(l.ids) }
