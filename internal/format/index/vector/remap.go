package vector

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
)

// ReadPartition reads partition p of the storage file (all columns, one
// record: _rowid and the codes in storage layout). Memory is one partition:
// the unit lance itself loads.
func (s *StorageFile) ReadPartition(ctx context.Context, p int) (arrow.RecordBatch, error) {
	return readPartition(ctx, s.File, s.IVF, p)
}

// ReadPartition reads partition p's sub-index rows of index.idx: for HNSW
// the graph (__vector_id, __neighbors, _distance, level by level as
// PartitionMeta[p]'s level_offsets say); FLAT partitions have no rows.
func (x *IndexFile) ReadPartition(ctx context.Context, p int) (arrow.RecordBatch, error) {
	return readPartition(ctx, x.File, x.IVF, p)
}

func readPartition(ctx context.Context, f *lancefile.File, ivf *indexpb.IVF, p int) (arrow.RecordBatch, error) {
	if p < 0 || p >= len(ivf.GetLengths()) {
		return nil, fmt.Errorf("vector: %s: partition %d of %d", f.Name(), p, len(ivf.GetLengths()))
	}
	off, n := ivf.GetOffsets()[p], uint64(ivf.GetLengths()[p])
	r, err := f.NewReader(ctx, lancefile.ReadOptions{Offset: off, Limit: n, BatchRows: int(max(n, 1)), ChunkReads: true})
	if err != nil {
		return nil, err
	}
	defer r.Release()
	if n == 0 || !r.Next() {
		if err := r.Err(); err != nil {
			return nil, err
		}
		return array.NewRecordBatch(r.Schema(), emptyColumns(r.Schema()), 0), nil
	}
	rec := r.RecordBatch()
	rec.Retain()
	if uint64(rec.NumRows()) != n {
		rec.Release()
		return nil, errorf(f, ErrCorrupt, "partition %d: read %d rows, IVF says %d", p, rec.NumRows(), n)
	}
	return rec, nil
}

func emptyColumns(sc *arrow.Schema) []arrow.Array {
	cols := make([]arrow.Array, sc.NumFields())
	for i, f := range sc.Fields() {
		cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
	}
	return cols
}

// StorageResult describes a remapped storage file.
type StorageResult struct {
	// Lengths is the new row count per partition (same partitions, same order).
	Lengths []uint32
	// Rows is the total rows written; Dropped the rows the mapping deleted.
	Rows, Dropped uint64
	Size          int64
}

// RemapStorage writes a copy of the storage file to w with every row id
// passed through m: deleted rows are dropped, kept rows keep their
// partition, their order and their codes (re-laid out for PQ's transposed and
// RQ's packed partitions). The IVF buffer gets the new offsets and lengths;
// every other global buffer (PQ codebook, RQ rotation) and every schema
// metadata entry is copied byte for byte, at the same buffer index. This is
// lance's remap of the quantizer storage (QuantizerStorage::remap and its PQ
// and RaBitQ overrides, written out as in IvfIndexBuilder::merge_partitions):
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/vector/builder.rs
//
// keep, when not nil, is called per partition with the indices (into the
// partition as read) of the rows kept, before they are written: an HNSW
// remap rebuilds each partition's graph from them.
//
// Lance additionally joins the smallest partition into its neighbours when it
// falls under a quarter of the target partition size (which needs the raw
// vectors from the table); this remap keeps every partition, which is also a
// valid index (the centroids are unchanged).
func RemapStorage(ctx context.Context, s *StorageFile, m index.Mapping, w io.Writer, keep func(p int, rec arrow.RecordBatch, kept []int) error) (StorageResult, error) {
	wr, err := newFileWriter(s.File, w, maps.Clone(meta(s.File)))
	if err != nil {
		return StorageResult{}, err
	}
	res, err := s.remapPartitions(ctx, m, wr, keep, index.PartRange{Lo: 0, Hi: s.NumPartitions()})
	if err != nil {
		return res, err
	}
	res.Size, err = s.finish(wr, res.Lengths)
	return res, err
}

// newFileWriter starts a file with f's fields, in f's file version, with
// schema metadata md.
func newFileWriter(f *lancefile.File, w io.Writer, md map[string][]byte) (*lancewrite.Writer, error) {
	ver := lancewrite.V2_1
	if f.Format == lancefile.Format20 {
		ver = lancewrite.V2_0
	}
	return lancewrite.NewWriter(w, f.Fields(), lancewrite.Options{PageBytes: index.FilePageBytes, Version: ver, SchemaMetadata: md})
}

// remapPartitions writes the remapped rows of partitions r to wr, in
// order, one partition in memory at a time.
func (s *StorageFile) remapPartitions(ctx context.Context, m index.Mapping, wr *lancewrite.Writer, keep func(int, arrow.RecordBatch, []int) error, r index.PartRange) (StorageResult, error) {
	var res StorageResult
	ps, err := s.newPartitionStream(ctx, r, 0)
	if err != nil {
		return res, err
	}
	defer ps.release()
	for p := r.Lo; p < r.Hi; p++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n, dropped, err := s.remapPartition(ctx, p, m, wr, keep, ps)
		if err != nil {
			return res, err
		}
		res.Lengths = append(res.Lengths, uint32(n))
		res.Rows += n
		res.Dropped += dropped
	}
	return res, nil
}

// finish writes the storage file's global buffers, with the IVF offsets
// and lengths of the partitions written, and closes it.
func (s *StorageFile) finish(wr *lancewrite.Writer, lengths []uint32) (int64, error) {
	if err := copyGlobalBuffers(s.File, s.IVFBuffer, withLengths(s.IVF, lengths), wr); err != nil {
		return 0, err
	}
	out, err := wr.Close()
	if err != nil {
		return 0, err
	}
	return out.Size, nil
}

// withLengths returns a copy of ivf with the offsets and lengths of
// partitions of the given lengths, back to back.
func withLengths(ivf *indexpb.IVF, lengths []uint32) *indexpb.IVF {
	out := proto.Clone(ivf).(*indexpb.IVF)
	out.Offsets, out.Lengths = make([]uint64, len(lengths)), lengths
	var off uint64
	for i, l := range lengths {
		out.Offsets[i] = off
		off += uint64(l)
	}
	return out
}

// globalBuffer returns global buffer i of f, the IVF one (at ivfPos)
// re-encoded from ivf.
func globalBuffer(f *lancefile.File, i, ivfPos int, ivf *indexpb.IVF) ([]byte, error) {
	if i == ivfPos {
		return proto.MarshalOptions{Deterministic: true}.Marshal(ivf)
	}
	return f.ReadBuffer(f.GlobalBuffers[i])
}

// copyGlobalBuffers writes the file's global buffers 1.. in order, the IVF
// one re-encoded, so every index stored in schema metadata stays valid.
func copyGlobalBuffers(f *lancefile.File, ivfPos int, ivf *indexpb.IVF, wr *lancewrite.Writer) error {
	for i := 1; i < len(f.GlobalBuffers); i++ {
		b, err := globalBuffer(f, i, ivfPos, ivf)
		if err != nil {
			return err
		}
		got, err := wr.AddGlobalBuffer(b)
		if err != nil {
			return err
		}
		if got != i {
			return fmt.Errorf("vector: internal: global buffer %d written as %d", i, got)
		}
	}
	wr.SetSchemaMetadata(keyIVF, []byte(strconv.Itoa(ivfPos)))
	return nil
}

// partitionStream hands out a storage file's partitions in file order
// through one sequential reader that decodes only the chunks holding each
// partition (ChunkReads: memory is a partition, not the Lance page of up
// to a million rows around it; a chunk shared by two partitions is decoded
// twice). A partition out of file order is read on its own.
type partitionStream struct {
	s    *StorageFile
	r    *lancefile.Reader
	next uint64 // row the reader is at
}

// newPartitionStream reads partitions r (the rows from partition r.Lo's
// first to partition r.Hi-1's last), fetching window bytes ahead per
// column (0: the reader's default).
func (s *StorageFile) newPartitionStream(ctx context.Context, r index.PartRange, window int) (*partitionStream, error) {
	lo, hi := partitionRows(s.IVF, r)
	rd, err := s.File.NewReader(ctx, lancefile.ReadOptions{Offset: lo, Limit: hi - lo, ChunkReads: true, ChunkWindow: window})
	if err != nil {
		return nil, err
	}
	return &partitionStream{s: s, r: rd, next: lo}, nil
}

// partitionRows is the file rows [lo, hi) of partitions r.
func partitionRows(ivf *indexpb.IVF, r index.PartRange) (lo, hi uint64) {
	if r.Hi <= r.Lo {
		return 0, 0
	}
	lo = ivf.GetOffsets()[r.Lo]
	hi = ivf.GetOffsets()[r.Hi-1] + uint64(ivf.GetLengths()[r.Hi-1])
	return lo, hi
}

func (ps *partitionStream) release() { ps.r.Release() }

func (ps *partitionStream) read(ctx context.Context, p int) (arrow.RecordBatch, error) {
	off, n := ps.s.IVF.GetOffsets()[p], uint64(ps.s.IVF.GetLengths()[p])
	if off != ps.next {
		return ps.s.ReadPartition(ctx, p)
	}
	if !ps.r.NextRows(n) {
		if err := ps.r.Err(); err != nil {
			return nil, err
		}
		return nil, errorf(ps.s.File, ErrCorrupt, "partition %d: rows %d..%d past the file's end", p, off, off+n)
	}
	rec := ps.r.RecordBatch()
	if uint64(rec.NumRows()) != n {
		return nil, errorf(ps.s.File, ErrCorrupt, "partition %d: read %d rows, IVF says %d", p, rec.NumRows(), n)
	}
	rec.Retain()
	ps.next += n
	return rec, nil
}

func (s *StorageFile) remapPartition(ctx context.Context, p int, m index.Mapping, wr *lancewrite.Writer, keep func(int, arrow.RecordBatch, []int) error, ps *partitionStream) (uint64, uint64, error) {
	if s.IVF.GetLengths()[p] == 0 {
		if keep != nil {
			rec, err := s.ReadPartition(ctx, p)
			if err != nil {
				return 0, 0, err
			}
			defer rec.Release()
			return 0, 0, keep(p, rec, nil)
		}
		return 0, 0, nil
	}
	rec, err := ps.read(ctx, p)
	if err != nil {
		return 0, 0, err
	}
	defer rec.Release()
	sc := rec.Schema()
	n := int(rec.NumRows())
	var ids []uint64
	kept := make([]int, 0, n)
	var newIDs []uint64
	for ci, f := range sc.Fields() {
		if f.Name != RowIDColumn {
			continue
		}
		col, ok := rec.Column(ci).(*array.Uint64)
		if !ok || col.NullN() > 0 {
			return 0, 0, errorf(s.File, ErrUnsupported, "partition %d: %s is %s with %d nulls, want non-null uint64", p, RowIDColumn, rec.Column(ci).DataType(), rec.Column(ci).NullN())
		}
		ids = col.Uint64Values()
	}
	if ids == nil {
		return 0, 0, errorf(s.File, ErrCorrupt, "partition %d: no %s column read", p, RowIDColumn)
	}
	for i, id := range ids {
		if nid, ok := m.Map(id); ok {
			kept = append(kept, i)
			newIDs = append(newIDs, nid)
		}
	}
	if keep != nil {
		if err := keep(p, rec, kept); err != nil {
			return 0, 0, err
		}
	}
	dropped := uint64(n - len(kept))
	if len(kept) == 0 {
		return 0, dropped, nil
	}
	cols := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for ci, f := range sc.Fields() {
		if f.Name == RowIDColumn {
			cols[ci] = array.NewUint64Data(array.NewData(arrow.PrimitiveTypes.Uint64, len(newIDs), []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Uint64Traits.CastToBytes(newIDs))}, nil, 0, 0))
			continue
		}
		layout := layoutRows
		if f.Name == s.codeColumnName() {
			switch {
			case s.Quantization == QuantPQ && s.PQTransposed:
				layout = layoutTransposed
			case s.Quantization == QuantRQ && s.RQPacked:
				layout = layoutPacked
			}
		}
		c, err := gather(rec.Column(ci), n, kept, layout)
		if err != nil {
			return 0, 0, errorf(s.File, ErrUnsupported, "partition %d column %s: %v", p, f.Name, err)
		}
		cols[ci] = c
	}
	out := array.NewRecordBatch(sc, cols, int64(len(kept)))
	defer out.Release()
	if err := wr.Write(out); err != nil {
		return 0, 0, err
	}
	return uint64(len(kept)), dropped, nil
}

func (s *StorageFile) codeColumnName() string {
	if f := s.File.Field(s.CodeField); f != nil {
		return f.GetName()
	}
	return ""
}

type layout int

const (
	layoutRows       layout = iota // row-major
	layoutTransposed               // byte j of row i at j*n+i
	layoutPacked                   // RQ 32-row blocks + transposed tail
)

// fixedBytes returns the value bytes of a non-null fixed-width column (a
// primitive or a fixed-size list of primitives) and the bytes per row.
func fixedBytes(a arrow.Array) (data []byte, width int, elem arrow.DataType, err error) {
	if a.NullN() > 0 {
		return nil, 0, nil, fmt.Errorf("has %d nulls", a.NullN())
	}
	d := a.Data()
	switch t := a.DataType().(type) {
	case *arrow.FixedSizeListType:
		ch := d.Children()[0]
		fw, ok := t.Elem().(arrow.FixedWidthDataType)
		if !ok || fw.BitWidth()%8 != 0 || ch.NullN() > 0 {
			return nil, 0, nil, fmt.Errorf("fixed-size list of %s is not a non-null byte-aligned fixed-width list", t.Elem())
		}
		ew := fw.BitWidth() / 8
		width = ew * int(t.Len())
		start := (ch.Offset() + d.Offset()*int(t.Len())) * ew
		return ch.Buffers()[1].Bytes()[start : start+d.Len()*width], width, t.Elem(), nil
	case arrow.FixedWidthDataType:
		if t.BitWidth()%8 != 0 {
			return nil, 0, nil, fmt.Errorf("type %s is not byte-aligned", t)
		}
		width = t.BitWidth() / 8
		start := d.Offset() * width
		return d.Buffers()[1].Bytes()[start : start+d.Len()*width], width, nil, nil
	default:
		return nil, 0, nil, fmt.Errorf("type %s is not fixed-width", a.DataType())
	}
}

// gather returns the kept rows of a fixed-width column of n rows.
func gather(a arrow.Array, n int, kept []int, lay layout) (arrow.Array, error) {
	src, w, elem, err := fixedBytes(a)
	if err != nil {
		return nil, err
	}
	rows := src
	if lay != layoutRows {
		rows = make([]byte, n*w)
		if lay == layoutTransposed {
			untranspose(rows, src, n, w)
		} else {
			rqUnpack(rows, src, n, w)
		}
	}
	m := len(kept)
	picked := make([]byte, m*w)
	for k, i := range kept {
		copy(picked[k*w:(k+1)*w], rows[i*w:(i+1)*w])
	}
	out := picked
	switch lay {
	case layoutTransposed:
		out = make([]byte, m*w)
		transpose(out, picked, m, w)
	case layoutPacked:
		out = make([]byte, m*w)
		rqPack(out, picked, m, w)
	}
	buf := memory.NewBufferBytes(out)
	if t, ok := a.DataType().(*arrow.FixedSizeListType); ok {
		ch := array.NewData(elem, m*int(t.Len()), []*memory.Buffer{nil, buf}, nil, 0, 0)
		defer ch.Release()
		d := array.NewData(t, m, []*memory.Buffer{nil}, []arrow.ArrayData{ch}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d), nil
	}
	d := array.NewData(a.DataType(), m, []*memory.Buffer{nil, buf}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}
