//go:build linux

package store_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lanced-dev/lanced/internal/store"
)

// residentPages counts the pages of the file at path that are in the page
// cache (mincore(2) of a mapping of it).
func residentPages(t *testing.T, path string) (resident, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			resident++
		}
	}
	return resident, len(vec)
}

// directSupported says whether files in dir take direct writes.
func directSupported(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "dio-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var st unix.Statx_t
	err = unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	return err == nil && st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align != 0 && st.Dio_offset_align <= 4096 && st.Dio_mem_align <= 4096
}

// TestDirectWritesHoldEveryByte: file:// stream writers, with direct writes
// on and off, fed a random mix of Writes and CopyRanges of a local file
// (sizes around the staging buffer and the alignment, from empty to
// several buffers), publish exactly the bytes given. With direct writes
// on, a file larger than one staging buffer leaves (almost) none of its
// pages in the page cache: it was written around it; with them off, or at
// one buffer or less, it is written through it.
func TestDirectWritesHoldEveryByte(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := open(t, "file://"+dir)
	src := make([]byte, 9<<20+333)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	if err := b.Put(ctx, "src.bin", src); err != nil {
		t.Fatal(err)
	}
	ra, err := b.OpenReaderAt(ctx, "src.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	dio := directSupported(t, dir)
	const buf = 4 << 20
	sizes := []int{0, 1, 4095, 4096, 4097, buf - 1, buf, buf + 1, 2 * buf, 3*buf + 12345, 20<<20 + 7}
	defer store.SetDirectWrites(true)
	for _, on := range []bool{true, false} {
		store.SetDirectWrites(on)
		for i, size := range sizes {
			key := filepath.Join("out", "f"+string(rune('a'+i))+map[bool]string{true: "-d", false: "-p"}[on])
			w, err := b.NewWriter(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			rw := w.(rangeWriter)
			want := make([]byte, 0, size)
			for len(want) < size {
				n := min(size-len(want), 1+rng.IntN(3<<20))
				if rng.IntN(2) == 0 {
					off := rng.IntN(len(src) - n)
					ok, err := rw.CopyRange(ra, int64(off), int64(n))
					if !ok || err != nil {
						t.Fatalf("CopyRange = %v, %v", ok, err)
					}
					want = append(want, src[off:off+n]...)
				} else {
					p := make([]byte, n)
					for j := range p {
						p[j] = byte(rng.Uint32())
					}
					if _, err := rw.Write(p); err != nil {
						t.Fatal(err)
					}
					want = append(want, p...)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// what the writer left in the page cache, before reading it back
			res, total := residentPages(t, filepath.Join(dir, key))
			switch {
			case on && dio && size > buf && res > total/8:
				t.Errorf("direct writes on, %d bytes: %d of %d pages in the page cache after the write", size, res, total)
			case (!on || size <= buf) && size >= 4096 && res < total*7/8:
				t.Errorf("direct=%v, %d bytes: only %d of %d pages in the page cache after a write through it", on, size, res, total)
			}
			got, err := b.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("direct=%v size %d: object holds %d bytes, not the %d written (or differs)", on, size, len(got), len(want))
			}
		}
	}
	if !dio {
		t.Logf("%s does not take direct I/O: the page-cache assertions of direct writes were not made", dir)
	}
}
