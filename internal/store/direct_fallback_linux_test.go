package store

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirectWriteRefusedMidStream: a direct write the filesystem refuses
// (EINVAL; here a buffer out of the memory alignment) after a direct
// write it took is made through the page cache, and so are the rest,
// including the padded tail: the file holds every byte at its place and
// no padding.
func TestDirectWriteRefusedMidStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := newStagedWriter(f)
	if s.align = directAlignment(f); s.align == 0 || setDirect(f, true) != nil {
		t.Skip("no direct I/O on this filesystem")
	}
	s.direct = true
	s.jobs, s.free, s.done = make(chan stagedJob, directBufs), make(chan *[]byte, directBufs), make(chan error, 1)
	s.bufs = directBufs
	go s.writeLoop(true)

	want := make([]byte, 2*directBufSize+100)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	first := getDirectBuf()
	*first = append((*first)[:0], want[:directBufSize]...)
	raw := make([]byte, directBufSize+1)
	second := raw[1:] // not aligned: a direct write of it is refused
	copy(second, want[directBufSize:2*directBufSize])
	s.jobs <- stagedJob{buf: first, off: 0}
	s.jobs <- stagedJob{buf: &second, off: directBufSize}
	for range 2 { // both written; the unaligned one kept out of the pool
		if b := <-s.free; b == first {
			putDirectBuf(b)
		}
	}
	if p := s.werr.Load(); p != nil {
		t.Fatalf("the refused direct write was not made through the page cache: %v", *p)
	}
	tail := getDirectBuf()
	*tail = append((*tail)[:0], want[2*directBufSize:]...)
	s.buf, s.off = tail, 2*directBufSize
	if err := s.finish(); err != nil {
		t.Fatal(err)
	}
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_DIRECT != 0 {
		t.Fatalf("O_DIRECT still set after a refused direct write (flags %#x, %v)", fl, err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, want %d (equal: %v)", len(got), len(want), bytes.Equal(got, want))
	}
}
