package engine

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
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
// FTS index; an index of several segments is refused. Memory: the new
// rows' postings (bounded by MaxFTSCatchUpBytes) plus one copy buffer.
func catchUpFTS(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (out *job.CatchUpOutput, err error) {
	if len(in.segs) != 1 {
		return nil, fmt.Errorf("catch-up of %q: %d segments (lanced adds a partition to an FTS index of one segment, as Lance keeps them): %w", t.Index, len(in.segs), job.ErrUnsupported)
	}
	old := in.model()
	fieldID := old.GetFields()[0]
	col, err := indexColumn(t, in.m.PB, fieldID)
	if err != nil {
		return nil, err
	}
	id := uuid.New()
	w := &segmentWriter{ctx: ctx, b: b, dir: path.Join(format.IndicesDir, id.String()), failpoint: "catchup.file"}
	out = &job.CatchUpOutput{CatchUp: t}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, w.keys)
			out = nil
		}
	}()
	var added uint64
	rows := func(ctx context.Context, fn func(values arrow.Array, ids []uint64) error) error {
		for _, f := range in.frags {
			read, err := scanColumnRows(ctx, b, in.m.PB, f, fieldID, col, func(values arrow.Array, ids []uint64) error {
				added += uint64(values.Len() - values.NullN())
				return fn(values, ids)
			})
			out.BytesRead += read
			if err != nil {
				return err
			}
			out.Base = append(out.Base, proto.Clone(f).(*tablepb.DataFragment))
		}
		return nil
	}
	oldDir := path.Join(format.IndicesDir, (&index.Segment{Meta: old}).UUID())
	res, err := text.CatchUp(ctx, old, &segmentReader{b: b, dir: oldDir, seg: old}, w, rows, MaxFTSCatchUpBytes)
	if err != nil {
		if errors.Is(err, text.ErrTooLarge) || errors.Is(err, text.ErrUnsupported) {
			err = fmt.Errorf("%w: %w", job.ErrUnsupported, err)
		}
		return out, fmt.Errorf("catch-up of %q (fts): %w", t.Index, err)
	}
	for _, f := range old.GetFiles() {
		out.BytesRead += int64(f.GetSizeBytes())
	}
	if res.Docs != added {
		return out, fmt.Errorf("catch-up of %q: the new partition holds %d documents, %d rows were read", t.Index, res.Docs, added)
	}
	out.Outputs, out.Rows = w.keys, added
	sizes := map[string]int64{}
	var names []string
	for _, f := range w.files {
		sizes[f.Name] = f.Size
		names = append(names, f.Name)
		out.BytesWritten += f.Size
	}
	// Lance lists the partitions' files in partition order (tokens, invert,
	// docs each), then metadata.lance.
	var order []string
	for _, p := range res.Partitions {
		order = append(order, text.InvertFileName(p), text.TokensFileName(p), text.DocsFileName(p))
	}
	order = append(order, text.MetadataFileName)
	if len(order) != len(names) {
		return out, fmt.Errorf("catch-up of %q: wrote files %v, want %v", t.Index, names, order)
	}
	// The entry lists the new segment's files in that order (the old
	// entry lists only the old partitions'), or none if the old listed none.
	model := &catchUpInput{m: in.m, segs: []*tablepb.IndexMetadata{withoutFiles(old)}, frags: in.frags}
	seg, err := catchUpSegment(t, model, id, in.segs, order, sizes)
	if err != nil {
		return out, err
	}
	if len(old.GetFiles()) == 0 {
		seg.Files = nil
	}
	out.Segment = seg
	out.Removed = []*tablepb.IndexMetadata{proto.Clone(old).(*tablepb.IndexMetadata)}
	out.Merged = "lance keeps one segment per FTS index: the new rows are a new partition of it"
	return out, nil
}

// withoutFiles is seg without its file list.
func withoutFiles(seg *tablepb.IndexMetadata) *tablepb.IndexMetadata {
	c := proto.Clone(seg).(*tablepb.IndexMetadata)
	c.Files = nil
	return c
}
