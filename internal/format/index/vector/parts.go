package vector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A segment remapped in parts: each part remaps a range of IVF partitions
// into pieces (RemapPart), and a join concatenates the pieces by page copy
// into the segment's two files (JoinParts). Both files hold their rows
// partition after partition (auxiliary.idx the stored rows, index.idx an
// HNSW sub-index's graph rows), located by the IVF protobuf's per-partition
// offsets and lengths, so the rows of consecutive partition ranges placed
// back to back are the file's rows; only the metadata that describes the
// whole file is written by the join: the IVF global buffer with every
// partition's offset and length, an HNSW index's per-partition graph
// metadata (schema metadata "lance:hnsw"), and the other global buffers
// and schema metadata entries copied from the old segment's files, as a
// one-task remap writes them.

// keyPart is the schema metadata entry of a piece: the partitions it
// holds and their row counts (partMeta as JSON). Pieces carry no global
// buffer.
const keyPart = "lanced:ivf_part"

// partMeta describes a piece.
type partMeta struct {
	// Partitions is the segment's partition count; the piece holds
	// partitions First .. First+len(Lengths)-1.
	Partitions int      `json:"partitions"`
	First      int      `json:"first"`
	Lengths    []uint32 `json:"lengths"`
	// SubIndex is, in an HNSW index piece, each partition's graph
	// metadata ("" for an empty partition).
	SubIndex []string `json:"sub_index,omitempty"`
}

// PartitionLengths returns the stored rows of each IVF partition of the
// storage file: the sizes a remap in parts is balanced by.
func (s *StorageFile) PartitionLengths() []uint64 {
	out := make([]uint64, s.NumPartitions())
	for i, l := range s.IVF.GetLengths() {
		out[i] = uint64(l)
	}
	return out
}

// RemapPart writes partitions r of the remapped segment as pieces: to
// storageOut their stored rows, as RemapStorage writes them, and for an
// HNSW sub-index to indexOut their graphs, as Remap builds them (the same
// graphs for the same seed: each partition's level draw is seeded by the
// seed and the partition). A FLAT sub-index has no index piece (indexOut
// is not written; the join copies index.idx). Each piece is a Lance file
// in the schema and file version of the segment file it is a piece of,
// with no global buffer; its schema metadata says which partitions it
// holds. Memory: one partition.
func RemapPart(ctx context.Context, x *IndexFile, s *StorageFile, m index.Mapping, r index.PartRange, storageOut, indexOut io.Writer, seed uint64) (Result, error) {
	var res Result
	np := s.NumPartitions()
	if len(x.IVF.GetLengths()) != np {
		return res, errorf(x.File, ErrCorrupt, "index has %d partitions, storage %s %d", len(x.IVF.GetLengths()), s.File.Name(), np)
	}
	if r.Lo < 0 || r.Hi > np || r.Lo >= r.Hi {
		return res, fmt.Errorf("vector: part of partitions [%d,%d) of a segment with %d", r.Lo, r.Hi, np)
	}
	var hb *hnswRebuild
	var keep func(int, arrow.RecordBatch, []int) error
	switch x.SubIndex {
	case "FLAT":
	case "HNSW":
		var err error
		if hb, err = newHNSWRebuild(x, s, indexOut, seed, map[string][]byte{}); err != nil {
			return res, err
		}
		keep = hb.partition
	default:
		return res, errorf(x.File, ErrUnsupported, "sub-index %s", x.SubIndex)
	}
	wr, err := newFileWriter(s.File, storageOut, map[string][]byte{})
	if err != nil {
		return res, err
	}
	if res.Storage, err = s.remapPartitions(ctx, m, wr, keep, r); err != nil {
		return res, err
	}
	if res.Storage.Size, err = closePiece(wr, partMeta{Partitions: np, First: r.Lo, Lengths: res.Storage.Lengths}); err != nil {
		return res, err
	}
	if hb != nil {
		res.IndexSize, err = closePiece(hb.w, partMeta{Partitions: np, First: r.Lo, Lengths: hb.lengths, SubIndex: hb.meta})
	}
	return res, err
}

func closePiece(wr *lancewrite.Writer, pm partMeta) (int64, error) {
	b, err := json.Marshal(pm)
	if err != nil {
		return 0, err
	}
	wr.SetSchemaMetadata(keyPart, b)
	out, err := wr.Close()
	return out.Size, err
}

// PartPieces are the pieces RemapPart wrote for one range, opened.
type PartPieces struct {
	Storage *lancefile.File
	// Index is the graph piece of an HNSW sub-index (nil for FLAT).
	Index *lancefile.File
}

// JoinParts writes the remapped segment from the pieces of every range of
// its partitions, in partition order: auxiliary.idx to storageOut (the
// storage pieces' pages copied back to back, then the old storage file's
// global buffers with the IVF offsets and lengths of every partition, and
// its schema metadata) and index.idx to indexOut (FLAT: the old index.idx,
// which does not depend on row ids; HNSW: the graph pieces' pages, the old
// index.idx's global buffers with the graph rows' offsets and lengths, and
// its schema metadata with every partition's graph metadata). No page is
// decoded. The pieces must tile the partitions: a missing, repeated or
// foreign piece is refused (ErrCorrupt).
func JoinParts(ctx context.Context, x *IndexFile, s *StorageFile, parts []PartPieces, storageOut, indexOut io.Writer) (Result, error) {
	var res Result
	np := s.NumPartitions()
	if len(x.IVF.GetLengths()) != np {
		return res, errorf(x.File, ErrCorrupt, "index has %d partitions, storage %s %d", len(x.IVF.GetLengths()), s.File.Name(), np)
	}
	storage := make([]*lancefile.File, len(parts))
	for i, p := range parts {
		storage[i] = p.Storage
	}
	lengths, _, err := tilePieces(storage, np, false)
	if err != nil {
		return res, err
	}
	res.Storage.Lengths = lengths
	for _, l := range lengths {
		res.Storage.Rows += uint64(l)
	}
	ivf := withLengths(s.IVF, lengths)
	if res.Storage.Size, err = concatPieces(ctx, s.File, s.IVFBuffer, ivf, maps.Clone(meta(s.File)), storage, storageOut); err != nil {
		return res, err
	}
	switch x.SubIndex {
	case "FLAT":
		if err := CopyIndexFile(x, indexOut); err != nil {
			return res, err
		}
		res.IndexSize = x.File.Size()
		return res, nil
	case "HNSW":
	default:
		return res, errorf(x.File, ErrUnsupported, "sub-index %s", x.SubIndex)
	}
	graphs := make([]*lancefile.File, len(parts))
	for i, p := range parts {
		if p.Index == nil {
			return res, fmt.Errorf("vector: %w: part %d of an HNSW segment has no index piece", ErrCorrupt, i)
		}
		graphs[i] = p.Index
	}
	glens, sub, err := tilePieces(graphs, np, true)
	if err != nil {
		return res, err
	}
	for p := range np {
		if (lengths[p] == 0) != (glens[p] == 0) {
			return res, fmt.Errorf("vector: %w: partition %d holds %d stored rows but %d graph rows", ErrCorrupt, p, lengths[p], glens[p])
		}
	}
	md := maps.Clone(meta(x.File))
	if md[keyHNSW], err = json.Marshal(sub); err != nil {
		return res, err
	}
	res.IndexSize, err = concatPieces(ctx, x.File, x.IVFBuffer, withLengths(x.IVF, glens), md, graphs, indexOut)
	return res, err
}

// tilePieces reads each piece's partMeta and checks that the pieces hold
// partitions 0..np-1 in order, each piece as many rows as its lengths
// say; it returns every partition's length and (graph pieces) its
// sub-index metadata.
func tilePieces(pieces []*lancefile.File, np int, graph bool) ([]uint32, []string, error) {
	var lengths []uint32
	var sub []string
	for i, f := range pieces {
		raw, ok := meta(f)[keyPart]
		if !ok {
			return nil, nil, errorf(f, ErrCorrupt, "piece %d has no %q metadata", i, keyPart)
		}
		var pm partMeta
		if err := json.Unmarshal(raw, &pm); err != nil {
			return nil, nil, errorf(f, ErrCorrupt, "piece %d: %s: %v", i, keyPart, err)
		}
		if pm.Partitions != np || pm.First != len(lengths) || len(pm.Lengths) == 0 || pm.First+len(pm.Lengths) > np {
			return nil, nil, errorf(f, ErrCorrupt, "piece %d holds partitions [%d,%d) of %d, expected the ones from %d of %d", i, pm.First, pm.First+len(pm.Lengths), pm.Partitions, len(lengths), np)
		}
		var rows uint64
		for _, l := range pm.Lengths {
			rows += uint64(l)
		}
		if rows != f.NumRows() {
			return nil, nil, errorf(f, ErrCorrupt, "piece %d: partitions hold %d rows, the file %d", i, rows, f.NumRows())
		}
		if graph && len(pm.SubIndex) != len(pm.Lengths) {
			return nil, nil, errorf(f, ErrCorrupt, "piece %d: %d partitions but %d graph metadata entries", i, len(pm.Lengths), len(pm.SubIndex))
		}
		lengths = append(lengths, pm.Lengths...)
		sub = append(sub, pm.SubIndex...)
	}
	if len(lengths) != np {
		return nil, nil, fmt.Errorf("vector: %w: the pieces hold %d of %d partitions", ErrCorrupt, len(lengths), np)
	}
	return lengths, sub, nil
}

// concatPieces writes the pieces' rows back to back (page copy), then the
// global buffers of old (the IVF one, at ivfPos, from ivf) and schema
// metadata md. Pieces without rows are left out; with none left the file
// is written with no rows.
func concatPieces(ctx context.Context, old *lancefile.File, ivfPos int, ivf *indexpb.IVF, md map[string][]byte, pieces []*lancefile.File, out io.Writer) (int64, error) {
	bufs := make([][]byte, 0, len(old.GlobalBuffers))
	for i := 1; i < len(old.GlobalBuffers); i++ {
		b, err := globalBuffer(old, i, ivfPos, ivf)
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, b)
	}
	var srcs []lancewrite.CopySource
	for _, f := range pieces {
		if f.Format != old.Format {
			return 0, errorf(f, ErrCorrupt, "piece in file format %v, the segment's file %v", f.Format, old.Format)
		}
		if f.NumRows() > 0 {
			// One DataFile entry for all: ConcatRows needs the pieces'
			// field-to-column maps to agree, and they are the same
			// writer's.
			srcs = append(srcs, lancewrite.CopySource{R: f.ReaderAt(), Size: f.Size(), Name: f.Name(), File: &tablepb.DataFile{}})
		}
	}
	if len(srcs) > 0 {
		res, err := lancewrite.ConcatRowsWith(ctx, out, lancewrite.ConcatOptions{SchemaMetadata: md, GlobalBuffers: bufs}, srcs...)
		return res.Size, err
	}
	wr, err := newFileWriter(old, out, md)
	if err != nil {
		return 0, err
	}
	for _, b := range bufs {
		if _, err := wr.AddGlobalBuffer(b); err != nil {
			return 0, err
		}
	}
	res, err := wr.Close()
	return res.Size, err
}
