package text

import (
	"context"
	"fmt"
	"io"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// remapper is the index.Remapper of the full-text (inverted) index.
type remapper struct{}

func init() {
	index.RegisterRemapper(index.KindFTS, remapper{})
}

// ftsIndexVersion is the index_version lance 8.0.0 records for the layout
// this package remaps (FST token set, format version 1); 0 is the legacy
// Arrow token set, 2 format version 2.
const ftsIndexVersion = 1

// Check accepts FTS segments of index version 1.
func (remapper) Check(seg *tablepb.IndexMetadata) error {
	if k := index.Detect(seg); k != index.KindFTS {
		return fmt.Errorf("%w: %s is not a full-text index", index.ErrNoRemapper, k)
	}
	if v := seg.GetIndexVersion(); v != ftsIndexVersion {
		return fmt.Errorf("%w: full-text index version %d (lanced remaps version %d, lance 8.0.0's default layout)", index.ErrNoRemapper, v, ftsIndexVersion)
	}
	return nil
}

// Remap implements index.Remapper, one partition at a time.
func (r remapper) Remap(ctx context.Context, req index.RemapRequest) (index.RemapResult, error) {
	var out index.RemapResult
	if err := r.Check(req.Segment); err != nil {
		return out, err
	}
	mf, err := index.OpenSegmentFile(ctx, req.Old, MetadataFileName)
	if err != nil {
		return out, err
	}
	md, err := ReadMetadata(ctx, mf)
	if err != nil {
		return out, index.NoRemapperIf(err, ErrUnsupported)
	}
	if err := CheckSegment(md); err != nil {
		return out, index.NoRemapperIf(err, ErrUnsupported)
	}
	for _, p := range md.Partitions {
		var in PartitionFiles
		for _, f := range []struct {
			dst  **lancefile.File
			name string
		}{{&in.Docs, DocsFileName(p)}, {&in.Invert, InvertFileName(p)}, {&in.Tokens, TokensFileName(p)}} {
			if *f.dst, err = index.OpenSegmentFile(ctx, req.Old, f.name); err != nil {
				return out, err
			}
		}
		var res PartitionResult
		err := index.WriteFiles(ctx, req.New, []string{DocsFileName(p), InvertFileName(p), TokensFileName(p)}, func(w []io.Writer) error {
			res, err = RemapPartition(ctx, in, req.Mapping, PartitionWriters{Docs: w[0], Invert: w[1], Tokens: w[2]})
			return err
		})
		if err != nil {
			return out, index.NoRemapperIf(err, ErrUnsupported)
		}
		out.Rows += res.Docs
		out.Dropped += res.DroppedDocs
	}
	err = index.WriteFiles(ctx, req.New, []string{MetadataFileName}, func(w []io.Writer) error {
		_, err := RemapMetadata(ctx, mf, w[0])
		return err
	})
	return out, index.NoRemapperIf(err, ErrUnsupported)
}
