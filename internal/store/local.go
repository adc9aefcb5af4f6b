package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// localWriter stages a file:// write in a hidden temp file next to the target
// and publishes it on Close: rename(2) for a plain put, link(2) for
// put-if-absent (EEXIST means the key exists, atomically across processes;
// fileblob's stat-then-rename is not). The temp file is removed on every path.
type localWriter struct {
	ctx     context.Context
	f       *os.File
	final   string
	excl    bool
	failed  bool
	written int64 // bytes written
	flushed int64 // bytes handed to startWriteback
}

// writebackWindow is how many written bytes are handed to the kernel's
// writeback at once while a file is written (see startWriteback).
const writebackWindow = 8 << 20

func (b *Bucket) localPath(key string) string {
	return filepath.Join(b.localDir, filepath.FromSlash(b.prefix+key))
}

func (b *Bucket) newLocalWriter(ctx context.Context, key string, excl bool) (*localWriter, error) {
	final := b.localPath(key)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "."+filepath.Base(final)+"."+hex.EncodeToString(rnd[:])+TempSuffix)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &localWriter{ctx: ctx, f: f, final: final, excl: excl}, nil
}

func (w *localWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.failed = true
	}
	w.written += int64(n)
	if w.written-w.flushed >= writebackWindow {
		startWriteback(w.f, w.flushed, w.written-w.flushed)
		w.flushed = w.written
	}
	return n, err
}

func (w *localWriter) Close() error {
	tmp := w.f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if w.failed {
		_ = w.f.Close()
		return errors.New("earlier write failed; object discarded")
	}
	if err := w.ctx.Err(); err != nil {
		_ = w.f.Close()
		return err
	}
	if err := w.f.Sync(); err != nil {
		_ = w.f.Close()
		return err
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	if w.excl {
		if err := os.Link(tmp, w.final); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: %s exists", ErrPreconditionFailed, filepath.Base(w.final))
			}
			return err
		}
	} else if err := os.Rename(tmp, w.final); err != nil {
		return err
	}
	syncDir(filepath.Dir(w.final))
	return nil
}

func (w *localWriter) Abort() error {
	_ = w.f.Close()
	return os.Remove(w.f.Name())
}

// syncDir makes a new directory entry durable (best effort).
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
