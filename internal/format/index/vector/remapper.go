package vector

import (
	"context"
	"fmt"
	"io"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// remapper is the index.Remapper of the IVF vector indices.
type remapper struct{}

func init() {
	for _, k := range []index.Kind{index.KindIVFFlat, index.KindIVFPQ, index.KindIVFRQ, index.KindHNSWSQ, index.KindHNSWPQ} {
		index.RegisterRemapper(k, remapper{})
	}
}

// Check accepts the vector kinds registered; the files decide the rest
// (an HNSW over a distance other than l2/cosine is refused by Remap).
func (remapper) Check(seg *tablepb.IndexMetadata) error {
	switch k := index.Detect(seg); k {
	case index.KindIVFFlat, index.KindIVFPQ, index.KindIVFRQ, index.KindHNSWSQ, index.KindHNSWPQ:
		return nil
	default:
		return fmt.Errorf("%w: vector kind %s", index.ErrNoRemapper, k)
	}
}

// openSegment opens a segment's index.idx and auxiliary.idx (metadata).
func openSegment(ctx context.Context, seg index.SegmentReader) (*IndexFile, *StorageFile, error) {
	xf, err := index.OpenSegmentFile(ctx, seg, IndexFileName)
	if err != nil {
		return nil, nil, err
	}
	sf, err := index.OpenSegmentFile(ctx, seg, AuxiliaryFileName)
	if err != nil {
		return nil, nil, err
	}
	x, err := OpenIndexFile(xf)
	if err != nil {
		return nil, nil, index.NoRemapperIf(err, ErrUnsupported)
	}
	s, err := OpenStorageFile(sf)
	if err != nil {
		return nil, nil, index.NoRemapperIf(err, ErrUnsupported)
	}
	return x, s, nil
}

// Parts implements index.PartRemapper: the IVF partitions, balanced by
// their stored rows.
func (remapper) Parts(ctx context.Context, old index.SegmentReader, n int) ([]index.PartRange, error) {
	sf, err := index.OpenSegmentFile(ctx, old, AuxiliaryFileName)
	if err != nil {
		return nil, err
	}
	s, err := OpenStorageFile(sf)
	if err != nil {
		return nil, index.NoRemapperIf(err, ErrUnsupported)
	}
	return index.CutRanges(s.PartitionLengths(), n), nil
}

// pieceNames are the files a part writes: the storage piece, and the
// graph piece of an HNSW sub-index.
func pieceNames(x *IndexFile) []string {
	if x.SubIndex == "HNSW" {
		return []string{AuxiliaryFileName, IndexFileName}
	}
	return []string{AuxiliaryFileName}
}

// RemapPart implements index.PartRemapper (RemapPart): the pieces are
// named like the segment's files.
func (remapper) RemapPart(ctx context.Context, req index.RemapRequest, r index.PartRange) (index.RemapResult, error) {
	var res index.RemapResult
	x, s, err := openSegment(ctx, req.Old)
	if err != nil {
		return res, err
	}
	err = index.WriteFiles(ctx, req.New, pieceNames(x), func(ws []io.Writer) error {
		ws = append(ws, nil)
		out, err := RemapPart(ctx, x, s, req.Mapping, r, ws[0], ws[1], req.Seed)
		res.Rows, res.Dropped = out.Storage.Rows, out.Storage.Dropped
		return index.NoRemapperIf(err, ErrUnsupported)
	})
	return res, err
}

// JoinParts implements index.PartRemapper (JoinParts).
func (remapper) JoinParts(ctx context.Context, req index.RemapRequest, parts []index.SegmentReader) (index.RemapResult, error) {
	var res index.RemapResult
	x, s, err := openSegment(ctx, req.Old)
	if err != nil {
		return res, err
	}
	pieces := make([]PartPieces, len(parts))
	for i, p := range parts {
		if pieces[i].Storage, err = index.OpenSegmentFile(ctx, p, AuxiliaryFileName); err != nil {
			return res, fmt.Errorf("part %d: %w", i, err)
		}
		if x.SubIndex == "HNSW" {
			if pieces[i].Index, err = index.OpenSegmentFile(ctx, p, IndexFileName); err != nil {
				return res, fmt.Errorf("part %d: %w", i, err)
			}
		}
	}
	err = index.WriteFiles(ctx, req.New, []string{AuxiliaryFileName, IndexFileName}, func(ws []io.Writer) error {
		out, err := JoinParts(ctx, x, s, pieces, ws[0], ws[1])
		res.Rows = out.Storage.Rows
		return err
	})
	return res, err
}

// Remap implements index.Remapper: index.idx and auxiliary.idx of the old
// segment are read partition by partition and written under the new one.
func (remapper) Remap(ctx context.Context, req index.RemapRequest) (index.RemapResult, error) {
	var res index.RemapResult
	x, s, err := openSegment(ctx, req.Old)
	if err != nil {
		return res, err
	}
	aux, err := req.New.Create(ctx, AuxiliaryFileName)
	if err != nil {
		return res, err
	}
	defer aux.Close()
	idx, err := req.New.Create(ctx, IndexFileName)
	if err != nil {
		return res, err
	}
	defer idx.Close()
	r, err := Remap(ctx, x, s, req.Mapping, aux, idx, req.Seed)
	if err != nil {
		return res, index.NoRemapperIf(err, ErrUnsupported)
	}
	if err := aux.Close(); err != nil {
		return res, err
	}
	if err := idx.Close(); err != nil {
		return res, err
	}
	res.Rows, res.Dropped = r.Storage.Rows, r.Storage.Dropped
	return res, nil
}

var _ index.PartRemapper = remapper{}
