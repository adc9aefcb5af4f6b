package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/fm"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// catchUpFM catches up an FM index as lance 8.0.0's optimize_indices does:
// FM segments cannot take a delta, so the index is rebuilt from the column
// over every fragment it covers and the task's fragments (the live rows of
// the read version, in row address order, fm.Builder), one segment under
// a new uuid that replaces all of the index's segments and covers exactly
// the fragments read. On a table with stable row ids the documents carry
// their stable row ids, as lance's FM queries read the stored ids (lance
// 8.0.0's own build stores addresses there). Memory: one FM partition
// (10,000 documents), bounded by the task's FMMaxBytes.
func catchUpFM(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (*job.CatchUpOutput, error) {
	covered := roaring.New()
	for _, sg := range in.segs {
		bm, err := index.DecodeBitmap(sg.GetFragmentBitmap())
		if err != nil || bm == nil {
			return nil, fmt.Errorf("catch-up of %q (fm): segment without a readable fragment bitmap: %w", t.Index, job.ErrUnsupported)
		}
		covered.Or(bm)
	}
	for _, f := range in.frags {
		covered.Add(uint32(f.GetId()))
	}
	var read []*tablepb.DataFragment
	for _, f := range in.m.PB.GetFragments() {
		if covered.Contains(uint32(f.GetId())) {
			read = append(read, f)
		}
	}
	slices.SortFunc(read, func(a, b *tablepb.DataFragment) int { return int(a.GetId()) - int(b.GetId()) })
	all := &catchUpInput{m: in.m, segs: in.segs, frags: read}
	maxBytes := int64(t.FMMaxBytes) // 0: fm.DefaultBuildBytes
	return runOneSegmentCatchUp(ctx, b, t, all, true, "rebuilds an FM index", "catchup.file", func(ctx context.Context, c *oneSegmentCatchUp, t *job.CatchUpTask, in *catchUpInput) error {
		bld := fm.NewBuilder(ctx, c.w, maxBytes)
		if format.StableRowIDs(in.m.PB) {
			bld.StableRowIDs()
		}
		rows := c.rows(func(values arrow.Array, _ []uint64) uint64 { return uint64(values.Len() - values.NullN()) })
		if err := rows(ctx, bld.AddColumn); err != nil {
			return fmt.Errorf("catch-up of %q (fm): %w", t.Index, fmErr(err))
		}
		res, err := bld.Finish()
		if err != nil {
			return fmt.Errorf("catch-up of %q (fm): %w", t.Index, fmErr(err))
		}
		if res.Docs != c.added {
			return fmt.Errorf("catch-up of %q: the segment holds %d documents, %d were read", t.Index, res.Docs, c.added)
		}
		sizes, _ := c.written()
		seg, err := fmSegment(c.old, c.id[:], t.ReadVersion, read, res.Files, sizes)
		if err != nil {
			return err
		}
		c.out.Segment = seg
		c.out.Merged = fmt.Sprintf("lance rebuilds an FM index from the column when it optimizes: %d segment(s) replaced by one over %d fragments (%d documents, %d partitions)",
			len(in.segs), len(read), res.Docs, len(res.Files))
		return nil
	})
}

// fmErr marks the builder's refusals unsupported for the engine (the
// task is skipped with the reason, not retried).
func fmErr(err error) error {
	if errors.Is(err, fm.ErrTooLarge) || errors.Is(err, fm.ErrUnsupported) {
		return fmt.Errorf("%w: %w", job.ErrUnsupported, err)
	}
	return err
}

// fmSegment is a rebuilt FM segment's index entry: old's with the new
// uuid, the version it was built on, the fragments read and its files in
// partition order (as lance lists them).
func fmSegment(old *tablepb.IndexMetadata, id []byte, version uint64, read []*tablepb.DataFragment, files []string, sizes map[string]int64) (*tablepb.IndexMetadata, error) {
	seg := proto.Clone(old).(*tablepb.IndexMetadata)
	seg.Uuid = &tablepb.UUID{Uuid: slices.Clone(id)}
	seg.DatasetVersion = version
	bm := roaring.New()
	for _, f := range read {
		bm.Add(uint32(f.GetId()))
	}
	var err error
	if seg.FragmentBitmap, err = index.EncodeBitmap(bm); err != nil {
		return nil, err
	}
	now := uint64(time.Now().UnixMilli())
	seg.CreatedAt = &now
	v := int32(fm.IndexVersion)
	seg.IndexVersion = &v
	seg.Files = nil
	for _, n := range files {
		size, ok := sizes[n]
		if !ok {
			return nil, fmt.Errorf("fm segment: file %s was not written", n)
		}
		seg.Files = append(seg.Files, &tablepb.IndexFile{Path: n, SizeBytes: uint64(size)})
	}
	return seg, nil
}
