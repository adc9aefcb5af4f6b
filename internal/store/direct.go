package store

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"unsafe"
)

// Direct writes: a file:// stream writer (NewWriter) stages its bytes in
// aligned buffers of directBufSize and, once a file outgrows one buffer,
// writes them with O_DIRECT from a second goroutine while the next buffer
// fills. The output never enters the page cache: no page-cache memory is
// allocated, dirtied and written back for it, and the pages that live
// readers have cached are not evicted for a file nobody reads yet. On a
// 523 MiB clean rewrite (ext4, Linux 6.18, a VM) this used 0.13-0.16 s of
// system CPU where copy_file_range into the page cache plus writeback used
// 0.3-2 s, the spread set by how much the kernel had to grow the page
// cache. It is what RocksDB's use_direct_io_for_flush_and_compaction does
// for the files its compactions write.
//
// A file no larger than one buffer is written with one ordinary write at
// Close. Where the filesystem reports no direct-I/O alignment
// (statx(2) STATX_DIOALIGN) or refuses O_DIRECT, the buffers are written
// through the page cache instead, with the same bytes and durability.

// directBufSize is the size of one staging buffer; a writer holds at most
// directBufs of them (one filling, one queued, one being written).
const (
	directBufSize = 4 << 20
	directBufs    = 3
)

var directWrites atomic.Bool

func init() { directWrites.Store(true) }

// SetDirectWrites turns direct writes of file:// stream writers on (the
// default) or off for writers opened after the call.
func SetDirectWrites(on bool) { directWrites.Store(on) }

// DirectWrites reports whether file:// stream writers write directly.
func DirectWrites() bool { return directWrites.Load() }

// directFree keeps staging buffers between writers: at most its capacity
// stay mapped once written, the others are released.
var directFree = make(chan *[]byte, 2*directBufs)

// getDirectBuf returns an empty staging buffer.
func getDirectBuf() *[]byte {
	select {
	case b := <-directFree:
		return b
	default:
		b := allocDirectBuf(directBufSize)
		return &b
	}
}

// putDirectBuf gives a staging buffer back.
func putDirectBuf(b *[]byte) {
	*b = (*b)[:0]
	select {
	case directFree <- b:
	default:
		freeDirectBuf(*b)
	}
}

// heapDirectBuf is a staging buffer on the Go heap, aligned to
// directAlignMax.
func heapDirectBuf(n int) []byte {
	b := make([]byte, n+directAlignMax)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (directAlignMax - 1))
	return b[skip : skip+n : skip+n]
}

// directAlignMax is the largest memory and offset alignment a filesystem
// may ask of direct I/O for lanced to use it: buffers are aligned to it.
const directAlignMax = 4096

// stagedWriter is the part of a localWriter that stages a stream in
// buffers (see the package comment above).
type stagedWriter struct {
	f   *os.File
	buf *[]byte // filling; len = bytes staged
	// growing: buf is the file's first buffer, a plain slice that grows
	// with the bytes written (a small file never takes a staging buffer)
	growing bool
	off     int64 // file offset of (*buf)[0]
	align   int   // direct-I/O alignment; 0: not decided yet
	direct  bool  // O_DIRECT was set on f when writing started (writeLoop falls back on its own copy)
	jobs    chan stagedJob
	free    chan *[]byte // buffers written, to be filled again
	bufs    int          // buffers taken from the pool (at most directBufs)
	done    chan error
	werr    atomic.Pointer[error] // the writing goroutine's first error
}

type stagedJob struct {
	buf *[]byte
	off int64
}

func newStagedWriter(f *os.File) *stagedWriter { return &stagedWriter{f: f} }

// space is the unfilled part of the filling buffer, at least want bytes
// when the buffer has room for them. The file's first buffer grows with
// the bytes written, up to directBufSize; the others are staging buffers
// (take).
func (s *stagedWriter) space(want int64) []byte {
	if s.buf == nil && s.jobs == nil {
		s.buf, s.growing = new([]byte), true
	}
	if s.buf == nil {
		s.buf = s.take()
	}
	b := *s.buf
	if s.growing && cap(b)-len(b) < int(min(want, directBufSize)) && cap(b) < directBufSize {
		c := min(max(2*cap(b), len(b)+int(min(want, directBufSize)), 64<<10), directBufSize)
		nb := make([]byte, len(b), c)
		copy(nb, b)
		*s.buf, b = nb, nb
	}
	return b[len(b):cap(b)]
}

// take returns an empty staging buffer: one written already, a new one
// from the pool while the writer holds fewer than directBufs, else the
// next one written (waiting for the write).
func (s *stagedWriter) take() *[]byte {
	var b *[]byte
	select {
	case b = <-s.free:
	default:
		if s.bufs < directBufs {
			b = getDirectBuf()
			s.bufs++
		} else {
			b = <-s.free
		}
	}
	*b = (*b)[:0]
	return b
}

// release gives back the filling buffer.
func (s *stagedWriter) release() {
	if s.buf != nil && !s.growing {
		putDirectBuf(s.buf)
	}
	s.buf, s.growing = nil, false
}

func (s *stagedWriter) Write(p []byte) (int, error) {
	n, err := s.fill(int64(len(p)), func(dst []byte) (int, error) {
		k := copy(dst, p)
		p = p[k:]
		return k, nil
	})
	return int(n), err
}

// readFrom appends n bytes of src from off, read straight into the
// buffers.
func (s *stagedWriter) readFrom(src *os.File, off, n int64) error {
	done, err := s.fill(n, func(dst []byte) (int, error) {
		k, err := src.ReadAt(dst, off)
		off += int64(k)
		if err == io.EOF && k == len(dst) {
			err = nil
		}
		return k, err
	})
	if err == io.EOF {
		return fmt.Errorf("copy: source ends at %d, %d bytes short: %w", off, n-done, io.ErrUnexpectedEOF)
	}
	return err
}

// fill appends n bytes to the stream, put filling each free part of the
// buffers in turn (it returns how many bytes it put there), and returns
// how many were appended: fewer than n only with an error, put's or the
// writing goroutine's (a write that failed fails the stream now, not only
// at Close).
func (s *stagedWriter) fill(n int64, put func(dst []byte) (int, error)) (int64, error) {
	var done int64
	for done < n {
		if p := s.werr.Load(); p != nil {
			return done, *p
		}
		sp := s.space(n - done)
		if len(sp) == 0 {
			s.flush()
			continue
		}
		k, err := put(sp[:min(int64(len(sp)), n-done)])
		*s.buf = (*s.buf)[:len(*s.buf)+k]
		done += int64(k)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// flush hands the full buffer to the writing goroutine, started (and the
// file switched to O_DIRECT) at the first one.
func (s *stagedWriter) flush() {
	if s.growing { // the first buffer, full: staged like the others
		b := s.take()
		*b = append(*b, *s.buf...)
		s.buf, s.growing = b, false
	}
	if s.jobs == nil {
		s.align = directAlignment(s.f)
		s.direct = s.align > 0 && setDirect(s.f, true) == nil
		s.jobs = make(chan stagedJob, directBufs)
		s.free = make(chan *[]byte, directBufs)
		s.done = make(chan error, 1)
		go s.writeLoop(s.direct)
	}
	s.jobs <- stagedJob{buf: s.buf, off: s.off}
	s.off += int64(len(*s.buf))
	s.buf = nil
}

// writeLoop writes the queued buffers: directly while the file is in
// direct mode (a buffer's length is then a multiple of the alignment: full
// buffers are, the last is padded and the file truncated after), else
// through the page cache. A direct write the filesystem refuses (EINVAL)
// is made through the page cache instead, and so are the rest.
func (s *stagedWriter) writeLoop(direct bool) {
	var err error
	for j := range s.jobs {
		b := *j.buf
		if err == nil && direct {
			_, err = s.f.WriteAt(b, j.off)
			if err != nil && directRefused(err) {
				direct = false
				err = setDirect(s.f, false)
				if err == nil {
					_, err = s.f.WriteAt(b, j.off)
				}
			}
		} else if err == nil {
			_, err = s.f.WriteAt(b, j.off)
			if err == nil {
				startWriteback(s.f, j.off, int64(len(b)))
			}
		}
		if err != nil && s.werr.Load() == nil {
			e := err
			s.werr.Store(&e)
		}
		s.free <- j.buf
	}
	s.done <- err
}

// finish writes what is staged and waits for the writes: the file then
// holds every byte written, not yet synced.
func (s *stagedWriter) finish() error {
	if s.jobs == nil { // at most one buffer: one ordinary write
		var err error
		if s.buf != nil {
			_, err = s.f.WriteAt(*s.buf, 0)
		}
		s.release()
		return err
	}
	size := s.off
	if s.buf != nil && len(*s.buf) > 0 {
		size += int64(len(*s.buf))
		if s.direct { // pad the tail to the alignment; truncated below
			n := len(*s.buf)
			p := (n + s.align - 1) &^ (s.align - 1)
			*s.buf = (*s.buf)[:p]
			clear((*s.buf)[n:])
		}
		s.jobs <- stagedJob{buf: s.buf, off: s.off}
		s.buf = nil
	}
	err := s.stop()
	if err == nil && s.direct {
		err = s.f.Truncate(size) // drop the tail's padding
	}
	return err
}

// stop ends the writing goroutine and returns its first error.
func (s *stagedWriter) stop() error {
	s.release()
	if s.jobs == nil {
		return nil
	}
	close(s.jobs)
	err := <-s.done
	s.jobs = nil
	for len(s.free) > 0 {
		putDirectBuf(<-s.free)
	}
	return err
}
