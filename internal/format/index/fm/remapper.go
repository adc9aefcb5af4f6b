package fm

import (
	"context"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// DefaultBuildBytes bounds a partition's text when the builder is given
// no bound (the same figure as the policy's index.fm_max_bytes default).
const DefaultBuildBytes = 256 << 20

// remapper is the index.Remapper of the FM index. Lance 8.0.0 does not
// remap FM segments (FMIndex::can_remap is false): its compaction leaves
// the segment on the old fragments, and optimize_indices rebuilds it from
// the column. lanced rebuilds it in the rewrite's own commit instead: the
// new segment is built from the column's rows after the rewrite
// (RemapRequest.Rows, new addresses), so the index never covers a
// fragment the table no longer has. Memory: one partition.
type remapper struct{}

func init() { index.RegisterRemapper(index.KindFM, remapper{}) }

// Check accepts FM segments of lance 8.0.0's index version.
func (remapper) Check(seg *tablepb.IndexMetadata) error {
	if k := index.Detect(seg); k != index.KindFM {
		return fmt.Errorf("%w: %s is not an FM index", index.ErrNoRemapper, k)
	}
	if v := seg.GetIndexVersion(); v != IndexVersion {
		return fmt.Errorf("%w: FM index version %d (lanced builds version %d, lance 8.0.0's)", index.ErrNoRemapper, v, IndexVersion)
	}
	return nil
}

// Remap rebuilds the segment from req.Rows.
func (r remapper) Remap(ctx context.Context, req index.RemapRequest) (index.RemapResult, error) {
	var out index.RemapResult
	if err := r.Check(req.Segment); err != nil {
		return out, err
	}
	if req.Rows == nil {
		return out, fmt.Errorf("%w: the FM index is rebuilt from the column, and no rows were given", index.ErrNoRemapper)
	}
	b := NewBuilder(ctx, req.New, req.BuildBytes)
	if err := req.Rows(ctx, b.AddColumn); err != nil {
		return out, err
	}
	res, err := b.Finish()
	if err != nil {
		return out, err
	}
	out.Rows = res.Docs
	return out, nil
}
