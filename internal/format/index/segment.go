package index

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// RowSource streams the rows a catch-up adds (scalar.CatchUp,
// text.CatchUp): it calls fn with each batch of the indexed column's
// values and their row addresses, in row address order. fn does not keep
// values past its return unless it retains them.
type RowSource func(ctx context.Context, fn func(values arrow.Array, ids []uint64) error) error

// FilePageBytes is the page size of the index files lanced writes: a
// writer buffers at most about this many bytes per column before it
// writes a page, so a remap or catch-up holds a few MiB of output per
// column whatever the segment's size (Lance reads pages of any size; its
// own writer buffers 8 MiB per column).
const FilePageBytes = 1 << 20

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

// WriteFiles creates the named files of a new segment, runs write with
// them and closes them; a file exists only if everything succeeded: on an
// error the files not yet closed are aborted (a writer with an Abort
// method discards what it wrote), never closed, so no partial file is
// published.
func WriteFiles(ctx context.Context, seg SegmentWriter, names []string, write func([]io.Writer) error) error {
	var ws []io.WriteCloser
	defer func() {
		for _, w := range ws {
			abort(w)
		}
	}()
	plain := make([]io.Writer, len(names))
	for i, n := range names {
		w, err := seg.Create(ctx, n)
		if err != nil {
			return err
		}
		ws = append(ws, w)
		plain[i] = w
	}
	if err := write(plain); err != nil {
		return err
	}
	for len(ws) > 0 {
		w := ws[0]
		ws = ws[1:]
		if err := w.Close(); err != nil {
			return err
		}
	}
	return nil
}

// abort discards a segment file being written: Abort where the writer has
// it, else Close (a writer without Abort cannot discard).
func abort(w io.WriteCloser) {
	if a, ok := w.(interface{ Abort() error }); ok {
		_ = a.Abort()
		return
	}
	_ = w.Close()
}

// MergeReadWindow is the bytes per column a merge reading inputs files at
// once fetches ahead in each (lancefile.ReadOptions.ChunkWindow): 2 MiB
// shared among them, between 64 KiB and the reader's default 1 MiB, so
// its read memory is about 2 MiB per column whatever the number of
// inputs, at one range request per window.
func MergeReadWindow(inputs int) int {
	return min(max((2<<20)/max(inputs, 1), 64<<10), 1<<20)
}
