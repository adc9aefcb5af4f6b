package vector

import (
	"context"
	"fmt"

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

// Remap implements index.Remapper: index.idx and auxiliary.idx of the old
// segment are read partition by partition and written under the new one.
func (remapper) Remap(ctx context.Context, req index.RemapRequest) (index.RemapResult, error) {
	var res index.RemapResult
	xf, err := index.OpenSegmentFile(ctx, req.Old, IndexFileName)
	if err != nil {
		return res, err
	}
	sf, err := index.OpenSegmentFile(ctx, req.Old, AuxiliaryFileName)
	if err != nil {
		return res, err
	}
	x, err := OpenIndexFile(xf)
	if err != nil {
		return res, index.NoRemapperIf(err, ErrUnsupported)
	}
	s, err := OpenStorageFile(sf)
	if err != nil {
		return res, index.NoRemapperIf(err, ErrUnsupported)
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
