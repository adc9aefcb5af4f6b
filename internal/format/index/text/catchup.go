package text

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// CatchUpResult describes a caught-up segment.
type CatchUpResult struct {
	// Docs is the number of documents added (non-null rows), Tokens the
	// new partition's distinct tokens.
	Docs, Tokens uint64
	// Partitions are the new segment's partitions; NewPartition is the one
	// added (false when no added row has a token: lance writes none).
	Partitions   []uint64
	NewPartition bool
}

// CatchUp writes the segment lance 8.0.0's optimize_indices writes for an
// FTS index with rows it does not cover (InvertedIndexBuilder::update in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/inverted/builder.rs):
// the old segment's partitions are copied unchanged, the added rows are
// tokenized with the index's own params into one new partition whose id is
// one past the largest, and metadata.lance lists every partition. The new
// segment replaces the old one. An index of several segments (others: the
// segments after old, as a distributed build leaves them) is merged into
// the one new segment: their partitions are copied too, each under the
// next free partition id (a partition's files do not name their id), so
// that it holds every segment's documents; they must share old's
// tokenizer params and formats. Params lanced cannot tokenize exactly
// (Params.Supported), another layout (CheckSegment), segments that differ
// or a character the folding table lacks are ErrUnsupported; more
// postings than maxBytes are ErrTooLarge. Memory: the added documents'
// postings.
func CatchUp(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, others []index.SegmentReader, out index.SegmentWriter, rows index.RowSource, maxBytes int64) (CatchUpResult, error) {
	var res CatchUpResult
	mf, md, b, err := catchUpStart(ctx, seg, old, rows, maxBytes)
	if err != nil {
		return res, err
	}
	res.Docs, res.Tokens = uint64(b.Docs()), uint64(len(b.tokens))

	// The old partitions, byte for byte (lance copies their files).
	for _, part := range md.Partitions {
		if err := copyPartition(ctx, old, part, out, part); err != nil {
			return res, err
		}
	}
	res.Partitions = slices.Clone(md.Partitions)
	if res.Partitions, err = mergeOthers(ctx, md, others, out, res.Partitions); err != nil {
		return res, err
	}
	if len(b.tokens) > 0 {
		id := slices.Max(res.Partitions) + 1
		if err := writePartition(ctx, old, md, b, out, id); err != nil {
			return res, err
		}
		res.Partitions = append(res.Partitions, id)
		slices.Sort(res.Partitions)
		res.NewPartition = true
	}
	return res, writeMetadataFile(ctx, out, mf, res.Partitions)
}

// writeMetadataFile writes metadata.lance like mf, listing partitions.
func writeMetadataFile(ctx context.Context, out index.SegmentWriter, mf *lancefile.File, partitions []uint64) error {
	return index.WriteFiles(ctx, out, []string{MetadataFileName}, func(w []io.Writer) error {
		_, err := writeMetadata(ctx, mf, partitions, w[0])
		return err
	})
}

// catchUpStart reads the old segment's metadata, checks it, and tokenizes
// the added rows (rows, unless nil) with its params.
func catchUpStart(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, rows index.RowSource, maxBytes int64) (*lancefile.File, *Metadata, *PartitionBuilder, error) {
	if err := (remapper{}).Check(seg); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	mf, md, err := checkedMetadata(ctx, old)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(md.Partitions) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: segment without partitions", ErrUnsupported)
	}
	p, err := ParseParams(md.Params)
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := NewAnalyzer(p)
	if err != nil {
		return nil, nil, nil, err
	}
	b := NewPartitionBuilder(a, maxBytes)
	if rows != nil {
		if err := rows(ctx, b.AddColumn); err != nil {
			return nil, nil, nil, err
		}
	}
	return mf, md, b, nil
}

// writePartition writes b's documents as partition id, its files laid out
// like the old segment's last partition.
func writePartition(ctx context.Context, old index.SegmentReader, md *Metadata, b *PartitionBuilder, out index.SegmentWriter, id uint64) error {
	last := md.Partitions[len(md.Partitions)-1]
	var tmpl PartitionFiles
	var err error
	for _, f := range []struct {
		dst  **lancefile.File
		name string
	}{{&tmpl.Docs, DocsFileName(last)}, {&tmpl.Invert, InvertFileName(last)}, {&tmpl.Tokens, TokensFileName(last)}} {
		if *f.dst, err = index.OpenSegmentFile(ctx, old, f.name); err != nil {
			return err
		}
	}
	return index.WriteFiles(ctx, out, []string{DocsFileName(id), InvertFileName(id), TokensFileName(id)}, func(w []io.Writer) error {
		_, err := b.Write(ctx, tmpl, PartitionWriters{Docs: w[0], Invert: w[1], Tokens: w[2]})
		return err
	})
}

// A catch-up of a large backlog may run as several delta tasks and one
// merge task. For an FTS index each delta tokenizes its rows into one
// partition (CatchUpDelta, partition 0 of a directory of its own, nothing
// else); the merge writes the old segment's partitions and each delta's
// partition as a partition of its own, numbered on past the largest in
// delta order, and metadata.lance listing them all (CatchUpMerge). Lance
// searches every partition of a segment, as in an index its own builder
// wrote with several workers (one partition each).

// CatchUpDelta tokenizes the added rows with seg's params into partition
// 0 of out (no file when no row has a token). Memory: the added
// documents' postings, bounded by maxBytes.
func CatchUpDelta(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, out index.SegmentWriter, rows index.RowSource, maxBytes int64) (CatchUpResult, error) {
	var res CatchUpResult
	_, md, b, err := catchUpStart(ctx, seg, old, rows, maxBytes)
	if err != nil {
		return res, err
	}
	res.Docs, res.Tokens = uint64(b.Docs()), uint64(len(b.tokens))
	if len(b.tokens) > 0 {
		if err := writePartition(ctx, old, md, b, out, 0); err != nil {
			return res, err
		}
		res.Partitions, res.NewPartition = []uint64{0}, true
	}
	return res, nil
}

// CatchUpMerge writes the segment of a catch-up run as deltas (each written
// by CatchUpDelta on seg, nil for one that wrote no partition): old's
// partitions and each delta's, and metadata.lance. Memory: one copy buffer.
func CatchUpMerge(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, deltas []index.SegmentReader, out index.SegmentWriter) (CatchUpResult, error) {
	var res CatchUpResult
	mf, md, _, err := catchUpStart(ctx, seg, old, nil, 0)
	if err != nil {
		return res, err
	}
	for _, part := range md.Partitions {
		if err := copyPartition(ctx, old, part, out, part); err != nil {
			return res, err
		}
	}
	res.Partitions = slices.Clone(md.Partitions)
	next := slices.Max(md.Partitions) + 1
	for _, d := range deltas {
		if d == nil {
			continue
		}
		if err := copyPartition(ctx, d, 0, out, next); err != nil {
			return res, err
		}
		res.Partitions = append(res.Partitions, next)
		res.NewPartition = true
		next++
	}
	return res, writeMetadataFile(ctx, out, mf, res.Partitions)
}

// mergeOthers copies the partitions of the other segments into the new
// one, each under the next free id after partitions (the ids so far), and
// returns the ids with theirs appended. Every other segment must have the
// first's (md) params, formats and no deleted fragments of its own.
func mergeOthers(ctx context.Context, md *Metadata, others []index.SegmentReader, out index.SegmentWriter, partitions []uint64) ([]uint64, error) {
	for i, o := range others {
		_, omd, err := checkedMetadata(ctx, o)
		if err != nil {
			return nil, err
		}
		switch {
		case !jsonEqual(omd.Params, md.Params) || omd.WithPosition != md.WithPosition:
			return nil, fmt.Errorf("%w: segment %d of the index has other tokenizer params than the first (%s, %s): merging needs a rebuild", ErrUnsupported, i+2, omd.Params, md.Params)
		case omd.TokenSetFormat != md.TokenSetFormat || omd.PostingTailCodec != md.PostingTailCodec:
			return nil, fmt.Errorf("%w: segment %d of the index has other formats than the first", ErrUnsupported, i+2)
		case !omd.DeletedFragments.IsEmpty() || !md.DeletedFragments.IsEmpty():
			return nil, fmt.Errorf("%w: segments with deleted fragments recorded cannot be merged", ErrUnsupported)
		}
		for _, part := range omd.Partitions {
			id := slices.Max(partitions) + 1
			if err := copyPartition(ctx, o, part, out, id); err != nil {
				return nil, err
			}
			partitions = append(partitions, id)
		}
	}
	return partitions, nil
}

// checkedMetadata opens a segment's metadata.lance and decodes it, checking
// that lanced knows its layout (CheckSegment).
func checkedMetadata(ctx context.Context, r index.SegmentReader) (*lancefile.File, *Metadata, error) {
	f, err := index.OpenSegmentFile(ctx, r, MetadataFileName)
	if err != nil {
		return nil, nil, err
	}
	md, err := ReadMetadata(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	return f, md, CheckSegment(md)
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// copyPartition copies partition part's files of segment old into the new
// segment as partition id.
func copyPartition(ctx context.Context, old index.SegmentReader, part uint64, out index.SegmentWriter, id uint64) error {
	for _, name := range []func(uint64) string{TokensFileName, InvertFileName, DocsFileName} {
		if err := copySegmentFile(ctx, old, out, name(part), name(id)); err != nil {
			return err
		}
	}
	return nil
}

// copySegmentFile copies file name of the old segment into the new one as
// file to.
func copySegmentFile(ctx context.Context, old index.SegmentReader, out index.SegmentWriter, name, to string) error {
	r, size, err := old.Open(ctx, name)
	if err != nil {
		return err
	}
	return index.WriteFiles(ctx, out, []string{to}, func(w []io.Writer) error {
		n, err := io.Copy(w[0], io.NewSectionReader(r, 0, size))
		if err == nil && n != size {
			err = fmt.Errorf("copied %d bytes of %s's %d", n, name, size)
		}
		return err
	})
}

// writeMetadata writes metadata.lance like f (its schema metadata and
// deleted_fragments row), with the given partitions unless nil.
func writeMetadata(ctx context.Context, f *lancefile.File, partitions []uint64, out io.Writer) (int64, error) {
	sc, w, err := writerLike(f, out)
	if err != nil {
		return 0, err
	}
	if partitions != nil {
		ps, err := json.Marshal(partitions)
		if err != nil {
			return 0, err
		}
		w.SetSchemaMetadata(keyPartitions, ps)
	}
	if f.NumRows() > 0 {
		rec, err := f.ReadAll(ctx, nil)
		if err != nil {
			return 0, err
		}
		rec2 := array.NewRecordBatch(sc, rec.Columns(), rec.NumRows())
		rec.Release()
		err = w.Write(rec2)
		rec2.Release()
		if err != nil {
			return 0, err
		}
	}
	res, err := w.Close()
	return res.Size, err
}
