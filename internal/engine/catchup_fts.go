package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// MaxFTSCatchUpBytes bounds the postings (and positions) of the documents
// one FTS catch-up task tokenizes before it writes its partition.
const MaxFTSCatchUpBytes = 256 << 20

// catchUpFTS adds the live rows of the task's fragments to an FTS index as
// lance 8.0.0's optimize_indices does (text.CatchUp): a new segment with
// the old segment's partitions copied and one new partition of the new
// rows, tokenized with the index's own params, replacing the old segment
// and covering its fragments and the task's. Lance keeps one segment per
// FTS index; an index of several segments (a distributed build's shape) is
// merged: every segment's partitions are copied into the one new segment,
// which replaces them all. Memory: the new rows' postings (bounded by
// MaxFTSCatchUpBytes) plus one copy buffer.
func catchUpFTS(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (*job.CatchUpOutput, error) {
	return runOneSegmentCatchUp(ctx, b, t, in, true, "merges an FTS index into one segment", "catchup.file", buildFTSCatchUp)
}

// buildFTSCatchUp writes the new FTS segment of catchUpFTS into c.out.
func buildFTSCatchUp(ctx context.Context, c *oneSegmentCatchUp, t *job.CatchUpTask, in *catchUpInput) error {
	old := c.old
	rows := c.rows(func(values arrow.Array, _ []uint64) uint64 { return uint64(values.Len() - values.NullN()) })
	res, err := text.CatchUp(ctx, old, c.oldReader(), c.otherReaders(), c.w, rows, MaxFTSCatchUpBytes)
	if err != nil {
		if errors.Is(err, text.ErrTooLarge) || errors.Is(err, text.ErrUnsupported) {
			err = fmt.Errorf("%w: %w", job.ErrUnsupported, err)
		}
		return fmt.Errorf("catch-up of %q (fts): %w", t.Index, err)
	}
	if res.Docs != c.added {
		return fmt.Errorf("catch-up of %q: the new partition holds %d documents, %d rows were read", t.Index, res.Docs, c.added)
	}
	sizes, names := c.written()
	// Lance lists the partitions' files in partition order (invert, tokens,
	// docs each), then metadata.lance.
	var order []string
	for _, p := range res.Partitions {
		order = append(order, text.InvertFileName(p), text.TokensFileName(p), text.DocsFileName(p))
	}
	order = append(order, text.MetadataFileName)
	if len(order) != len(names) {
		return fmt.Errorf("catch-up of %q: wrote files %v, want %v", t.Index, names, order)
	}
	// The entry lists the new segment's files in that order (the old
	// entry lists only the old partitions'), or none if the old listed none.
	model := &catchUpInput{m: in.m, segs: []*tablepb.IndexMetadata{withoutFiles(old)}, frags: in.frags}
	seg, err := catchUpSegment(t, model, c.id, in.segs, order, sizes)
	if err != nil {
		return err
	}
	if len(old.GetFiles()) == 0 {
		seg.Files = nil
	}
	c.out.Segment = seg
	c.out.Merged = "lance keeps one segment per FTS index: the new rows are a new partition of it"
	if len(in.segs) > 1 {
		c.out.Merged = fmt.Sprintf("lance keeps one segment per FTS index: %d segments' partitions and the new rows' one merged into one segment", len(in.segs))
	}
	return nil
}

// withoutFiles is seg without its file list.
func withoutFiles(seg *tablepb.IndexMetadata) *tablepb.IndexMetadata {
	c := proto.Clone(seg).(*tablepb.IndexMetadata)
	c.Files = nil
	return c
}
