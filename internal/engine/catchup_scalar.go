package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// MaxScalarCatchUpBytes bounds the added rows one scalar catch-up task
// holds (btree: the values and row addresses it sorts; bitmap and
// labelList: the added rows' bitmaps); the planner's row bound per task
// (plan.CatchUpMaxRows) keeps tasks of fixed-width values far under it.
const MaxScalarCatchUpBytes = 256 << 20

// isScalarCatchUp reports whether the catch-up of an index of kind k runs
// through executeScalarCatchUp.
func isScalarCatchUp(k index.Kind) bool {
	return k == index.KindBTree || k == index.KindBitmap || k == index.KindLabelList
}

// catchUpScalar adds the live rows of the task's fragments to a btree,
// bitmap or labelList index as lance 8.0.0's optimize_indices does: the
// index's one segment and the new rows merged into one new segment
// (scalar.CatchUp) that replaces it, covering the old segment's fragments
// and the task's. Lance keeps no scalar deltas, so a catch-up always
// removes the segment it read; an index of several segments is refused.
// Memory: the new rows (bounded by MaxScalarCatchUpBytes) plus the merge's
// page or key batch.
func catchUpScalar(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (out *job.CatchUpOutput, err error) {
	if len(in.segs) != 1 {
		return nil, fmt.Errorf("catch-up of %q: %d segments (lanced merges a scalar index of one segment, as Lance keeps them): %w", t.Index, len(in.segs), job.ErrUnsupported)
	}
	old := in.model()
	fieldID := old.GetFields()[0]
	col, err := indexColumn(t, in.m.PB, fieldID)
	if err != nil {
		return nil, err
	}
	id := uuid.New()
	w := &segmentWriter{ctx: ctx, b: b, dir: path.Join(format.IndicesDir, id.String())}
	out = &job.CatchUpOutput{CatchUp: t}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, w.keys)
			out = nil
		}
	}()
	var added uint64 // rows the catch-up adds (Rows: what it indexed)
	rows := func(ctx context.Context, fn func(values arrow.Array, ids []uint64) error) error {
		count := func(values arrow.Array, ids []uint64) error {
			added += uint64(len(ids))
			return fn(values, ids)
		}
		for _, f := range in.frags {
			read, err := scanColumnRows(ctx, b, in.m.PB, f, fieldID, col, count)
			out.BytesRead += read
			if err != nil {
				return err
			}
			out.Base = append(out.Base, proto.Clone(f).(*tablepb.DataFragment))
		}
		return nil
	}
	oldDir := path.Join(format.IndicesDir, (&index.Segment{Meta: old}).UUID())
	res, err := scalar.CatchUp(ctx, old, &segmentReader{b: b, dir: oldDir, seg: old}, w, rows, MaxScalarCatchUpBytes)
	if err != nil {
		if errors.Is(err, scalar.ErrTooLarge) || errors.Is(err, scalar.ErrUnsupported) || errors.Is(err, index.ErrNoRemapper) {
			err = fmt.Errorf("%w: %w", job.ErrUnsupported, err)
		}
		return out, fmt.Errorf("catch-up of %q (%s): %w", t.Index, index.Detect(old), err)
	}
	for _, f := range old.GetFiles() {
		out.BytesRead += int64(f.GetSizeBytes())
	}
	if res.Rows < added {
		return out, fmt.Errorf("catch-up of %q: the merged segment holds %d rows, fewer than the %d added", t.Index, res.Rows, added)
	}
	out.Outputs, out.Rows = w.keys, added
	sizes := map[string]int64{}
	var names []string
	for _, f := range w.files {
		sizes[f.Name] = f.Size
		names = append(names, f.Name)
		out.BytesWritten += f.Size
	}
	slices.Sort(names)
	if len(old.GetFiles()) > 0 && len(old.GetFiles()) != len(names) {
		return out, fmt.Errorf("catch-up of %q: the merge wrote files %v, the old segment lists %d: %w", t.Index, names, len(old.GetFiles()), job.ErrUnsupported)
	}
	if out.Segment, err = catchUpSegment(t, in, id, in.segs, names, sizes); err != nil {
		return out, err
	}
	out.Removed = []*tablepb.IndexMetadata{proto.Clone(old).(*tablepb.IndexMetadata)}
	out.Merged = "lance keeps one segment per scalar index: the new rows are merged into it"
	return out, nil
}
