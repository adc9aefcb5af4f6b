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

// oneSegmentCatchUp is a catch-up that replaces an index's one segment by
// a new one (scalar and FTS indices: Lance keeps one segment each): the
// new segment's writer, its output and the rows it adds.
type oneSegmentCatchUp struct {
	b       *store.Bucket
	t       *job.CatchUpTask
	in      *catchUpInput
	old     *tablepb.IndexMetadata
	fieldID int32
	col     string
	id      uuid.UUID
	w       *segmentWriter
	out     *job.CatchUpOutput
	added   uint64 // rows the catch-up adds (Rows: what it indexed)
}

// newOneSegmentCatchUp refuses an index of several segments unless
// several (what names what the catch-up does to the one segment) and
// opens the new segment's writer, which hits failpoint (if set) after each
// file.
func newOneSegmentCatchUp(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, several bool, what, failpoint string) (*oneSegmentCatchUp, error) {
	if len(in.segs) != 1 && !several {
		return nil, fmt.Errorf("catch-up of %q: %d segments (lanced %s, as Lance keeps them): %w", t.Index, len(in.segs), what, job.ErrUnsupported)
	}
	c := &oneSegmentCatchUp{b: b, t: t, in: in, old: in.model(), id: uuid.New(), out: &job.CatchUpOutput{CatchUp: t}}
	c.fieldID = c.old.GetFields()[0]
	var err error
	if c.col, err = indexColumn(t, in.m.PB, c.fieldID); err != nil {
		return nil, err
	}
	c.w = &segmentWriter{ctx: ctx, b: b, dir: path.Join(format.IndicesDir, c.id.String()), failpoint: failpoint}
	return c, nil
}

// runOneSegmentCatchUp starts a one-segment catch-up
// (newOneSegmentCatchUp) and has build write its output; when build fails,
// the files written so far are deleted and there is no output.
func runOneSegmentCatchUp(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, several bool, what, failpoint string, build func(context.Context, *oneSegmentCatchUp, *job.CatchUpTask, *catchUpInput) error) (*job.CatchUpOutput, error) {
	c, err := newOneSegmentCatchUp(ctx, b, t, in, several, what, failpoint)
	if err != nil {
		return nil, err
	}
	if err := build(ctx, c, t, in); err != nil {
		c.abort(ctx)
		return nil, err
	}
	return c.out, nil
}

// abort deletes the files written so far (the catch-up failed).
func (c *oneSegmentCatchUp) abort(ctx context.Context) {
	deleteKeys(context.WithoutCancel(ctx), c.b, c.w.keys)
}

// rows streams the live rows of the task's fragments; count says how many
// rows of a batch the catch-up adds.
func (c *oneSegmentCatchUp) rows(count func(values arrow.Array, ids []uint64) uint64) func(context.Context, func(arrow.Array, []uint64) error) error {
	return func(ctx context.Context, fn func(values arrow.Array, ids []uint64) error) error {
		for _, f := range c.in.frags {
			read, err := scanColumnRows(ctx, c.b, c.in.m.PB, f, c.fieldID, c.col, func(values arrow.Array, ids []uint64) error {
				c.added += count(values, ids)
				return fn(values, ids)
			})
			c.out.BytesRead += read
			if err != nil {
				return err
			}
			c.out.Base = append(c.out.Base, proto.Clone(f).(*tablepb.DataFragment))
		}
		return nil
	}
}

// oldReader reads the old segment's files.
func (c *oneSegmentCatchUp) oldReader() *segmentReader {
	return c.reader(c.old)
}

// reader reads a segment's files.
func (c *oneSegmentCatchUp) reader(seg *tablepb.IndexMetadata) *segmentReader {
	return &segmentReader{b: c.b, dir: path.Join(format.IndicesDir, (&index.Segment{Meta: seg}).UUID()), seg: seg}
}

// otherReaders read the index's segments after the first (several
// segments merged into one).
func (c *oneSegmentCatchUp) otherReaders() []index.SegmentReader {
	var out []index.SegmentReader
	for _, sg := range c.in.segs[1:] {
		out = append(out, c.reader(sg))
	}
	return out
}

// written records the written segment in the output and returns its
// files' sizes and sorted names.
func (c *oneSegmentCatchUp) written() (map[string]int64, []string) {
	for _, sg := range c.in.segs {
		for _, f := range sg.GetFiles() {
			c.out.BytesRead += int64(f.GetSizeBytes())
		}
	}
	c.out.Outputs, c.out.Rows = c.w.keys, c.added
	sizes := map[string]int64{}
	var names []string
	for _, f := range c.w.files {
		sizes[f.Name] = f.Size
		names = append(names, f.Name)
		c.out.BytesWritten += f.Size
	}
	slices.Sort(names)
	c.out.Removed = nil
	for _, sg := range c.in.segs {
		c.out.Removed = append(c.out.Removed, proto.Clone(sg).(*tablepb.IndexMetadata))
	}
	return sizes, names
}

// catchUpScalar adds the live rows of the task's fragments to a btree,
// bitmap or labelList index as lance 8.0.0's optimize_indices does: the
// index's one segment and the new rows merged into one new segment
// (scalar.CatchUp) that replaces it, covering the old segment's fragments
// and the task's. Lance keeps no scalar deltas, so a catch-up always
// removes the segment it read. An index of several segments (none of
// Lance's own writers leaves one; a distributed build can) is merged: the
// other segments' rows join the new rows, and the one new segment replaces
// them all.
// Memory: the new rows (bounded by MaxScalarCatchUpBytes) plus the merge's
// page or key batch.
func catchUpScalar(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (*job.CatchUpOutput, error) {
	return runOneSegmentCatchUp(ctx, b, t, in, true, "merges a scalar index of one segment", "", buildScalarCatchUp)
}

// buildScalarCatchUp writes the merged scalar segment of catchUpScalar
// into c.out.
func buildScalarCatchUp(ctx context.Context, c *oneSegmentCatchUp, t *job.CatchUpTask, in *catchUpInput) error {
	old := c.old
	rows := c.rows(func(_ arrow.Array, ids []uint64) uint64 { return uint64(len(ids)) })
	res, err := scalar.CatchUp(ctx, old, c.oldReader(), c.otherReaders(), c.w, rows, MaxScalarCatchUpBytes)
	if err != nil {
		if errors.Is(err, scalar.ErrTooLarge) || errors.Is(err, scalar.ErrUnsupported) || errors.Is(err, index.ErrNoRemapper) {
			err = fmt.Errorf("%w: %w", job.ErrUnsupported, err)
		}
		return fmt.Errorf("catch-up of %q (%s): %w", t.Index, index.Detect(old), err)
	}
	if res.Rows < c.added {
		return fmt.Errorf("catch-up of %q: the merged segment holds %d rows, fewer than the %d added", t.Index, res.Rows, c.added)
	}
	sizes, names := c.written()
	if len(old.GetFiles()) > 0 && len(old.GetFiles()) != len(names) {
		return fmt.Errorf("catch-up of %q: the merge wrote files %v, the old segment lists %d: %w", t.Index, names, len(old.GetFiles()), job.ErrUnsupported)
	}
	if c.out.Segment, err = catchUpSegment(t, in, c.id, in.segs, names, sizes); err != nil {
		return err
	}
	c.out.Merged = "lance keeps one segment per scalar index: the new rows are merged into it"
	if len(in.segs) > 1 {
		c.out.Merged = fmt.Sprintf("lance keeps one segment per scalar index: its %d segments and the new rows are merged into one", len(in.segs))
	}
	return nil
}
