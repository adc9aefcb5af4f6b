package scalar

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// remapper is the index.Remapper of the btree, bitmap and labelList indices.
type remapper struct{}

func init() {
	index.RegisterRemapper(index.KindBTree, btreeRemapper{})
	for _, k := range []index.Kind{index.KindBitmap, index.KindLabelList} {
		index.RegisterRemapper(k, remapper{})
	}
}

// maxIndexVersion is the newest index_version of each kind whose files this
// package has been checked against (lance 8.0.0 writes btree 0, bitmap 0,
// labelList 1: the null-list buffer); a newer one may mean a layout this
// package does not know.
var maxIndexVersion = map[index.Kind]int32{
	index.KindBTree:     0,
	index.KindBitmap:    0,
	index.KindLabelList: 1,
}

// Check accepts the scalar kinds at the index versions this package knows.
func (remapper) Check(seg *tablepb.IndexMetadata) error {
	k := index.Detect(seg)
	maxV, ok := maxIndexVersion[k]
	if !ok {
		return fmt.Errorf("%w: scalar kind %s", index.ErrNoRemapper, k)
	}
	if v := seg.GetIndexVersion(); v > maxV {
		return fmt.Errorf("%w: %s index version %d (lanced knows up to %d)", index.ErrNoRemapper, k, v, maxV)
	}
	return nil
}

// Remap implements index.Remapper: a btree page by page, a bitmap or
// labelList one batch of keys at a time.
func (r remapper) Remap(ctx context.Context, req index.RemapRequest) (index.RemapResult, error) {
	var out index.RemapResult
	if err := r.Check(req.Segment); err != nil {
		return out, err
	}
	names, remap, err := openRemap(ctx, req)
	if err != nil {
		return out, noRemapper(err)
	}
	var res RemapResult
	err = index.WriteFiles(ctx, req.New, names, func(w []io.Writer) error {
		var err error
		res, err = remap(w)
		return err
	})
	if err != nil {
		return out, noRemapper(err)
	}
	out.Rows, out.Dropped = res.Rows, res.Dropped
	return out, nil
}

// openRemap opens the old segment of req as its kind and returns the
// names of the new segment's files and the remap that writes them, in
// that order.
func openRemap(ctx context.Context, req index.RemapRequest) ([]string, func([]io.Writer) (RemapResult, error), error) {
	switch req.Kind {
	case index.KindBTree:
		bt, err := openBTreeSegment(ctx, req.Old)
		if err != nil {
			return nil, nil, err
		}
		return []string{BTreeDataFileName, BTreeLookupFileName}, func(w []io.Writer) (RemapResult, error) {
			return RemapBTree(ctx, bt, req.Mapping, w[0], w[1])
		}, nil
	case index.KindBitmap, index.KindLabelList:
		f, err := index.OpenSegmentFile(ctx, req.Old, BitmapFileName)
		if err != nil {
			return nil, nil, err
		}
		bm, err := OpenBitmap(f)
		if err != nil {
			return nil, nil, err
		}
		return []string{BitmapFileName}, func(w []io.Writer) (RemapResult, error) {
			return RemapBitmap(ctx, bm, req.Mapping, w[0])
		}, nil
	}
	return nil, nil, fmt.Errorf("%w: scalar kind %s", index.ErrNoRemapper, req.Kind)
}

// openBTreeSegment opens a btree segment's two files.
func openBTreeSegment(ctx context.Context, seg index.SegmentReader) (*BTree, error) {
	lf, err := index.OpenSegmentFile(ctx, seg, BTreeLookupFileName)
	if err != nil {
		return nil, err
	}
	df, err := index.OpenSegmentFile(ctx, seg, BTreeDataFileName)
	if err != nil {
		return nil, err
	}
	return OpenBTree(lf, df)
}

// noRemapper marks the layouts this package, the Lance file reader or the
// writer do not handle (an index file in a legacy file version, a value
// type lancewrite cannot encode) as ErrNoRemapper, so the engine keeps the
// segment's fragments.
func noRemapper(err error) error {
	for _, u := range []error{ErrUnsupported, lancefile.ErrUnsupportedVersion, lancefile.ErrUnsupportedEncoding, lancewrite.ErrUnsupportedType} {
		if errors.Is(err, u) {
			return index.NoRemapperIf(err, u)
		}
	}
	return err
}
