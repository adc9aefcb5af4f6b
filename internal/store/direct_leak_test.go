package store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/store"
)

// writeLoops counts the goroutines writing staged buffers of file://
// stream writers.
func writeLoops() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "store.(*stagedWriter).writeLoop")
}

// TestAbandonedWriterIsAborted: a file:// stream writer dropped without
// Close or Abort after writing several staging buffers (a caller's error
// path that forgets it) is aborted once the garbage collector finds it:
// its writing goroutine ends, which frees its buffers and file, and its
// temp file is removed; nothing is published.
func TestAbandonedWriterIsAborted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	before := writeLoops()
	func() {
		w, err := b.NewWriter(ctx, "abandoned.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(bytes.Repeat([]byte{3}, 9<<20)); err != nil {
			t.Fatal(err)
		}
	}()
	if writeLoops() <= before {
		t.Skip("the writer started no writing goroutine (direct writes off?)")
	}
	deadline := time.Now().Add(10 * time.Second)
	temps := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, ".*"+store.TempSuffix))
		return m
	}
	for writeLoops() > before || len(temps()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the writer was dropped: %d writing goroutines (%d before), temp files %v", writeLoops(), before, temps())
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "abandoned.bin")); !os.IsNotExist(err) {
		t.Fatalf("an abandoned writer published its object: %v", err)
	}
}

// TestWriteAfterCloseFails: a Write to a file:// stream writer after its
// Close or Abort fails instead of taking bytes that go nowhere.
func TestWriteAfterCloseFails(t *testing.T) {
	ctx := context.Background()
	b := open(t, "file://"+t.TempDir())
	for _, end := range []string{"close", "abort"} {
		for _, size := range []int{10, 5 << 20} {
			w, err := b.NewWriter(ctx, "after-"+end)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			if end == "close" {
				err = w.Close()
			} else {
				err = w.(store.Writer).Abort()
			}
			if err != nil {
				t.Fatal(err)
			}
			if n, err := w.Write([]byte("late")); err == nil {
				t.Fatalf("Write after %s of a %d-byte object = %d, nil; want an error", end, size, n)
			}
		}
	}
}

// TestUnfinishedStreamsLeaveNothing: a file:// stream writer that has
// handed several staging buffers to its writing goroutine and is then
// aborted, closed after a failed range copy, or closed with its context
// cancelled publishes nothing, leaves no temp file and no writing
// goroutine.
func TestUnfinishedStreamsLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	src := bytes.Repeat([]byte{9}, 9<<20)
	if err := b.Put(context.Background(), "src.bin", src); err != nil {
		t.Fatal(err)
	}
	ra, err := b.OpenReaderAt(context.Background(), "src.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	before := writeLoops()
	for _, end := range []string{"abort", "short-copy", "cancel"} {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := b.NewWriter(ctx, "out-"+end)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 10<<20)); err != nil {
			t.Fatal(err)
		}
		switch end {
		case "abort":
			err = w.(store.Writer).Abort()
		case "short-copy":
			if _, cerr := w.(rangeWriter).CopyRange(ra, 1<<20, 9<<20); cerr == nil {
				t.Fatal("CopyRange past the source's end succeeded")
			}
			if err = w.Close(); err == nil {
				t.Fatal("Close after a failed CopyRange succeeded")
			}
		case "cancel":
			cancel()
			if err = w.Close(); err == nil {
				t.Fatal("Close with a cancelled context succeeded")
			}
		}
		if end == "abort" && err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := os.Stat(filepath.Join(dir, "out-"+end)); !os.IsNotExist(err) {
			t.Fatalf("%s: object published (%v)", end, err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, ".*"+store.TempSuffix)); len(m) != 0 {
			t.Fatalf("%s: temp files left: %v", end, m)
		}
		if n := writeLoops(); n != before {
			t.Fatalf("%s: %d writing goroutines, %d before", end, n, before)
		}
	}
}
