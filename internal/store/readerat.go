package store

import (
	"context"
	"fmt"
	"io"
	"os"

	"gocloud.dev/blob"
)

// OpenReaderAt opens key for random access. On file:// it reads the file
// directly; elsewhere every ReadAt is one ranged GET.
func (b *Bucket) OpenReaderAt(ctx context.Context, key string) (ReaderAt, error) {
	done, err := b.begin("open_reader_at", key, false)
	if err != nil {
		return nil, err
	}
	if b.localDir != "" {
		f, err := os.Open(b.localPath(key))
		if err != nil {
			return nil, done(err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, done(err)
		}
		if st.IsDir() {
			_ = f.Close()
			return nil, done(fmt.Errorf("%w: is a directory", ErrNotFound))
		}
		return &fileReaderAt{f: f, size: st.Size(), b: b, key: key}, done(nil)
	}
	var a *blob.Attributes
	err = b.retrying(ctx, "open_reader_at", key, func() (err error) {
		a, err = b.bkt.Attributes(ctx, b.prefix+key)
		return err
	})
	if err != nil {
		return nil, done(err)
	}
	return &rangeReaderAt{ctx: ctx, b: b, key: key, size: a.Size}, done(nil)
}

type fileReaderAt struct {
	f    *os.File
	size int64
	b    *Bucket
	key  string
}

func (r *fileReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = r.b.wrap("read_at", r.key, err)
	}
	return n, err
}

func (r *fileReaderAt) Size() int64  { return r.size }
func (r *fileReaderAt) Close() error { return r.f.Close() }

// rangeReaderAt issues one ranged GET per ReadAt, tried again (the whole
// range) after a transient failure or a short body. It keeps the context
// of OpenReaderAt: cancel it to abort reads in flight.
type rangeReaderAt struct {
	ctx  context.Context
	b    *Bucket
	key  string
	size int64
}

func (r *rangeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, r.b.wrap("read_at", r.key, fmt.Errorf("negative offset %d", off))
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := int64(len(p))
	if off+want > r.size {
		want = r.size - off
	}
	var n int
	err := r.b.retrying(r.ctx, "read_at", r.key, func() error {
		rd, err := r.b.bkt.NewRangeReader(r.ctx, r.b.prefix+r.key, off, want, nil)
		if err != nil {
			return err
		}
		defer rd.Close()
		n, err = io.ReadFull(rd, p[:want])
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // nothing of a range inside the object
		}
		return err
	})
	if err != nil {
		return n, err
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

func (r *rangeReaderAt) Size() int64  { return r.size }
func (r *rangeReaderAt) Close() error { return nil }
