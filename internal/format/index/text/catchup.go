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
// segment replaces the old one. Params lanced cannot tokenize exactly
// (Params.Supported), another layout (CheckSegment) or a character the
// folding table lacks are ErrUnsupported; more postings than maxBytes are
// ErrTooLarge. Memory: the added documents' postings.
func CatchUp(ctx context.Context, seg *tablepb.IndexMetadata, old index.SegmentReader, out index.SegmentWriter, rows index.RowSource, maxBytes int64) (CatchUpResult, error) {
	var res CatchUpResult
	if err := (remapper{}).Check(seg); err != nil {
		return res, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	mf, err := index.OpenSegmentFile(ctx, old, MetadataFileName)
	if err != nil {
		return res, err
	}
	md, err := ReadMetadata(ctx, mf)
	if err != nil {
		return res, err
	}
	if err := CheckSegment(md); err != nil {
		return res, err
	}
	if len(md.Partitions) == 0 {
		return res, fmt.Errorf("%w: segment without partitions", ErrUnsupported)
	}
	p, err := ParseParams(md.Params)
	if err != nil {
		return res, err
	}
	a, err := NewAnalyzer(p)
	if err != nil {
		return res, err
	}
	b := NewPartitionBuilder(a, maxBytes)
	if err := rows(ctx, b.AddColumn); err != nil {
		return res, err
	}
	res.Docs, res.Tokens = uint64(b.Docs()), uint64(len(b.tokens))

	// The old partitions, byte for byte (lance copies their files).
	for _, part := range md.Partitions {
		for _, name := range []string{TokensFileName(part), InvertFileName(part), DocsFileName(part)} {
			if err := copySegmentFile(ctx, old, out, name); err != nil {
				return res, err
			}
		}
	}
	res.Partitions = slices.Clone(md.Partitions)
	if len(b.tokens) > 0 {
		last := md.Partitions[len(md.Partitions)-1]
		var tmpl PartitionFiles
		for _, f := range []struct {
			dst  **lancefile.File
			name string
		}{{&tmpl.Docs, DocsFileName(last)}, {&tmpl.Invert, InvertFileName(last)}, {&tmpl.Tokens, TokensFileName(last)}} {
			if *f.dst, err = index.OpenSegmentFile(ctx, old, f.name); err != nil {
				return res, err
			}
		}
		id := slices.Max(md.Partitions) + 1
		err := index.WriteFiles(ctx, out, []string{DocsFileName(id), InvertFileName(id), TokensFileName(id)}, func(w []io.Writer) error {
			_, err := b.Write(ctx, tmpl, PartitionWriters{Docs: w[0], Invert: w[1], Tokens: w[2]})
			return err
		})
		if err != nil {
			return res, err
		}
		res.Partitions = append(res.Partitions, id)
		slices.Sort(res.Partitions)
		res.NewPartition = true
	}
	err = index.WriteFiles(ctx, out, []string{MetadataFileName}, func(w []io.Writer) error {
		_, err := writeMetadata(ctx, mf, res.Partitions, w[0])
		return err
	})
	return res, err
}

// copySegmentFile copies one file of the old segment into the new one.
func copySegmentFile(ctx context.Context, old index.SegmentReader, out index.SegmentWriter, name string) error {
	r, size, err := old.Open(ctx, name)
	if err != nil {
		return err
	}
	return index.WriteFiles(ctx, out, []string{name}, func(w []io.Writer) error {
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
