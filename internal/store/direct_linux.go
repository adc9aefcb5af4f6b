package store

import (
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlignment is the alignment direct I/O on f needs of buffer
// addresses, file offsets and lengths (statx(2) STATX_DIOALIGN), or 0 when
// the filesystem does not support it or needs more than directAlignMax.
func directAlignment(f *os.File) int {
	var st unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil {
		return 0
	}
	if st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 || st.Dio_mem_align == 0 {
		return 0
	}
	a := max(st.Dio_offset_align, st.Dio_mem_align)
	if a > directAlignMax || a&(a-1) != 0 {
		return 0
	}
	return int(a)
}

// setDirect sets or clears O_DIRECT on f.
func setDirect(f *os.File, on bool) error {
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
	return err
}

// directRefused says whether a direct write failed because the file or
// buffer does not allow direct I/O (rather than for want of space or a
// disk error).
func directRefused(err error) bool { return errors.Is(err, unix.EINVAL) }

// hugePage is the size of a transparent huge page on amd64 and arm64
// (4 KiB base pages).
const hugePage = 2 << 20

// mappedBufs holds the address of every staging buffer allocDirectBuf
// mapped (the others are on the Go heap).
var mappedBufs sync.Map

// allocDirectBuf maps n bytes (a multiple of hugePage) of anonymous memory
// aligned to hugePage and asks for transparent huge pages there
// (madvise(2) MADV_HUGEPAGE): a direct write pins its buffer's pages for
// the device, 2 per 4 MiB instead of 1024, and the buffers stay off the Go
// heap (not zeroed by the allocator, not counted by the garbage
// collector's pacing). Where the mapping fails the buffer is taken from
// the Go heap.
func allocDirectBuf(n int) []byte {
	size := uintptr(n + hugePage)
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return heapDirectBuf(n)
	}
	skip := -uintptr(p) & (hugePage - 1)
	// unmap the unaligned head and what lies beyond n
	if skip > 0 {
		_ = unix.MunmapPtr(p, skip)
	}
	if tail := size - skip - uintptr(n); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, skip+uintptr(n)), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, skip)), n)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	mappedBufs.Store(uintptr(unsafe.Pointer(&b[0])), true)
	return b
}

// freeDirectBuf releases a staging buffer allocDirectBuf returned.
func freeDirectBuf(b []byte) {
	b = b[:cap(b)]
	p := unsafe.Pointer(&b[0])
	if _, ok := mappedBufs.LoadAndDelete(uintptr(p)); ok {
		_ = unix.MunmapPtr(p, uintptr(len(b)))
	}
}
