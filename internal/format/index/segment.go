package index

import (
	"context"
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// OpenSegmentFile opens one file of a segment as a Lance file (index files
// are Lance files).
func OpenSegmentFile(ctx context.Context, seg SegmentReader, name string) (*lancefile.File, error) {
	r, size, err := seg.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return lancefile.Open(r, size, name)
}

// NoRemapperIf makes an error that wraps unsupported (an index package's
// "layout not known" sentinel) also wrap ErrNoRemapper, so the engine keeps
// the segment's fragments instead of failing the compaction.
func NoRemapperIf(err, unsupported error) error {
	if errors.Is(err, unsupported) && !errors.Is(err, ErrNoRemapper) {
		return fmt.Errorf("%w: %w", ErrNoRemapper, err)
	}
	return err
}
