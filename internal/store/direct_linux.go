package store

import (
	"errors"
	"os"

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
