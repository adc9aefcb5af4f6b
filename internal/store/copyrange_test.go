package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/lanced-dev/lanced/internal/store"
)

type rangeWriter interface {
	io.WriteCloser
	CopyRange(src io.ReaderAt, off, n int64) (bool, error)
}

// TestCopyRangeLocal: a file:// writer copies byte ranges of a file opened
// with OpenReaderAt (copy_file_range), interleaved with ordinary writes;
// the object holds exactly those bytes. A source that is not a local file
// is refused (false, nothing written) and a range past the source's end
// fails the writer: nothing is published.
func TestCopyRangeLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	src := make([]byte, 3<<20)
	for i := range src {
		src[i] = byte(i * 7 / 5)
	}
	if err := b.Put(ctx, "src.bin", src); err != nil {
		t.Fatal(err)
	}
	ra, err := b.OpenReaderAt(ctx, "src.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	w, err := b.NewWriter(ctx, "dst.bin")
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := w.(rangeWriter)
	if !ok {
		t.Fatalf("file:// writer %T does not copy ranges", w)
	}
	var want []byte
	write := func(p []byte) {
		if _, err := rw.Write(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p...)
	}
	copyRange := func(off, n int64) {
		ok, err := rw.CopyRange(ra, off, n)
		if err != nil || !ok {
			t.Fatalf("CopyRange(%d, %d) = %v, %v", off, n, ok, err)
		}
		want = append(want, src[off:off+n]...)
	}
	write([]byte("head"))
	// A kernel or filesystem without copy_file_range between these files
	// refuses the first range (false, nil): the writer then copies through
	// memory, which the lancewrite tests cover; nothing here to test.
	if ok, err := rw.CopyRange(ra, 5, 4603); err != nil {
		t.Fatal(err)
	} else if !ok {
		t.Skipf("copy_file_range is refused in %s: the kernel copy path cannot be tested on this filesystem", t.TempDir())
	}
	want = append(want, src[5:5+4603]...)
	copyRange(1<<20+17, 2<<20-100)
	write(bytes.Repeat([]byte{0x48}, 61))
	copyRange(0, 1)
	if ok, err := rw.CopyRange(bytes.NewReader(src), 0, 10); ok || err != nil {
		t.Fatalf("CopyRange from memory = %v, %v; want false, nil", ok, err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, "dst.bin")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object holds %d bytes, want %d (equal: %v)", len(got), len(want), bytes.Equal(got, want))
	}

	w2, err := b.NewWriter(ctx, "short.bin")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w2.(rangeWriter).CopyRange(ra, int64(len(src))-10, 20); !ok || err == nil {
		t.Fatalf("CopyRange past the end = %v, %v; want an error", ok, err)
	}
	if err := w2.Close(); err == nil {
		t.Fatal("Close after a failed copy succeeded")
	}
	if _, err := b.Get(ctx, "short.bin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed copy published its object: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, ".*"+store.TempSuffix))
	if len(matches) != 0 {
		t.Fatalf("temp files left: %v", matches)
	}
}

// TestCopyRangeNotOnObjectStores: writers of other stores do not offer
// range copies (callers stream the bytes).
func TestCopyRangeNotOnObjectStores(t *testing.T) {
	b := open(t, "mem://copyrange")
	w, err := b.NewWriter(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.(rangeWriter); ok {
		t.Fatalf("mem:// writer %T offers CopyRange", w)
	}
}
