package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

// localWriter stages a file:// write in a hidden temp file next to the target
// and publishes it on Close: rename(2) for a plain put, link(2) for
// put-if-absent (EEXIST means the key exists, atomically across processes;
// fileblob's stat-then-rename is not), swapIfMatch for put-if-match. The
// temp file is removed on every path.
type localWriter struct {
	ctx     context.Context
	f       *os.File
	final   string
	excl    bool
	match   Generation // put-if-match: the generation replaced
	failed  bool
	written int64 // bytes written
	flushed int64 // bytes handed to startWriteback
	noRange bool  // copy_file_range(2) refused this file: CopyRange says no
	// staged: a stream writer's bytes go through aligned buffers, written
	// with O_DIRECT where the filesystem allows (see stagedWriter); nil:
	// written as they come, through the page cache.
	staged *stagedWriter
	// dropped aborts the writer if it is dropped without Close or Abort
	// (see abortWhenDropped).
	dropped runtime.Cleanup
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

// abortWhenDropped makes the garbage collector abort the writer if its
// user drops it without Close or Abort (an error path that forgets it):
// its writing goroutine ends, its buffers and file are freed and its temp
// file is removed, where they would otherwise stay for the life of the
// process (the goroutine holds them).
func (w *localWriter) abortWhenDropped() {
	w.dropped = runtime.AddCleanup(w, func(d droppedWriter) {
		go func() {
			if d.s != nil {
				_ = d.s.stop()
			}
			_ = d.f.Close()
			_ = os.Remove(d.f.Name())
		}()
	}, droppedWriter{f: w.f, s: w.staged})
}

// droppedWriter is what aborting a dropped localWriter needs.
type droppedWriter struct {
	f *os.File
	s *stagedWriter
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.staged != nil {
		n, err := w.staged.Write(p)
		if err != nil {
			w.failed = true
		}
		return n, err
	}
	n, err := w.f.Write(p)
	if err != nil {
		w.failed = true
	}
	w.advance(int64(n))
	return n, err
}

// advance counts n more bytes written and hands every writebackWindow of
// them to the kernel's writeback.
func (w *localWriter) advance(n int64) {
	w.written += n
	if w.written-w.flushed >= writebackWindow {
		startWriteback(w.f, w.flushed, w.written-w.flushed)
		w.flushed = w.written
	}
}

// maxCopyRange bounds one copy_file_range(2) call.
const maxCopyRange = 1 << 30

// CopyRange appends n bytes of src from offset off to the file without
// them passing through this process (copy_file_range(2)), when src is a
// local file (a ReaderAt of a file:// bucket, or an *os.File). It returns
// false, having written nothing, when src is not a local file or the
// kernel cannot copy between the two files (another filesystem, no
// support): the caller then writes the bytes itself. A copy that fails
// midway fails the writer, like a failed Write.
func (w *localWriter) CopyRange(src io.ReaderAt, off, n int64) (bool, error) {
	var sf *os.File
	switch s := src.(type) {
	case *fileReaderAt:
		sf = s.f
	case *os.File:
		sf = s
	}
	if sf == nil || w.noRange || w.failed {
		return false, nil
	}
	if w.staged != nil { // read straight into the staging buffers
		if err := w.staged.readFrom(sf, off, n); err != nil {
			w.failed = true
			return true, err
		}
		return true, nil
	}
	var done int64
	for done < n {
		at := off + done
		k, err := copyFileRange(sf, &at, w.f, int(min(n-done, maxCopyRange)))
		if err != nil && done == 0 && copyRangeUnsupported(err) {
			w.noRange = true
			return false, nil
		}
		if err == nil && k == 0 {
			err = fmt.Errorf("copy [%d,+%d): source ends at %d: %w", off, n, off+done, io.ErrUnexpectedEOF)
		}
		if err != nil {
			w.failed = true
			w.advance(done)
			return true, err
		}
		done += int64(k)
	}
	w.advance(n)
	return true, nil
}

func (w *localWriter) Close() error {
	w.dropped.Stop()
	tmp := w.f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if w.staged != nil && !w.failed {
		if err := w.staged.finish(); err != nil {
			_ = w.f.Close()
			return err
		}
	}
	if w.failed {
		if w.staged != nil {
			_ = w.staged.stop()
		}
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
	if w.match != "" {
		return swapIfMatch(tmp, w.final, w.match)
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
	w.dropped.Stop()
	if w.staged != nil {
		_ = w.staged.stop()
	}
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

// swapIfMatch publishes the staged file tmp under final if final holds
// generation gen (its content's hash). The writer claims gen by creating
// a claim file named after it (O_EXCL: one writer at a time per
// generation), checks that final still holds gen, renames its own staged
// file over final and removes the claim. final changes only by such a
// rename, made under the claim of final's content at that moment, so of
// the writers replacing one generation exactly one succeeds; a writer
// that finds the claim taken gets ErrPreconditionFailed and reads again.
// The claim holds its writer's process id: a claim whose process is gone
// (it crashed between claim and release) is taken away (renamed aside,
// then checked to be that claim) and the claim made again. This holds
// between the processes of one host (O_EXCL, rename and process ids are
// local); a claim is a hidden temp file (TempSuffix) that exists only
// while its writer swaps.
func swapIfMatch(tmp, final string, gen Generation) error {
	claim := filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".cas-"+string(gen)+TempSuffix)
	mismatch := fmt.Errorf("%w: %s is no longer generation %s", ErrPreconditionFailed, filepath.Base(final), gen)
	f, err := os.OpenFile(claim, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) && takeStaleClaim(claim) {
		f, err = os.OpenFile(claim, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if errors.Is(err, fs.ErrExist) {
		return mismatch // another writer replaces gen right now
	}
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(claim) }()
	_, err = f.WriteString(strconv.Itoa(os.Getpid()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	cur, err := fileGeneration(final)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist", ErrPreconditionFailed, filepath.Base(final))
	case err != nil:
		return err
	case cur != gen:
		return mismatch
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	syncDir(filepath.Dir(final))
	return nil
}

// staleClaimEmpty is how old a claim without a process id must be to be
// taken as left by a writer that died before writing it.
const staleClaimEmpty = 10 * time.Second

// takeStaleClaim removes the claim file at path if the process that made
// it is gone, and reports whether it did. The claim is renamed aside
// first and removed only if it is the one found stale; a live claim so
// taken is linked back.
func takeStaleClaim(path string) bool {
	stale := func(p string) bool {
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		if len(b) == 0 {
			info, err := os.Stat(p)
			return err == nil && time.Since(info.ModTime()) > staleClaimEmpty
		}
		pid, err := strconv.Atoi(string(b))
		return err == nil && !processAlive(pid)
	}
	if !stale(path) {
		return false
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	aside := path + "." + hex.EncodeToString(rnd[:])
	if os.Rename(path, aside) != nil {
		return false
	}
	if stale(aside) {
		_ = os.Remove(aside)
		return true
	}
	_ = os.Link(aside, path) // a writer's live claim, made meanwhile: give it back
	_ = os.Remove(aside)
	return false
}

// fileGeneration is the generation of the file at path.
func fileGeneration(path string) (Generation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return contentGeneration(data), nil
}
