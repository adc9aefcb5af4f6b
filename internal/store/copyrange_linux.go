package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// copyFileRange copies up to n bytes of src from *off to dst's current
// position with copy_file_range(2): the bytes move inside the kernel,
// never through this process's memory. It advances *off and dst's position
// by the count it returns.
func copyFileRange(src *os.File, off *int64, dst *os.File, n int) (int, error) {
	return unix.CopyFileRange(int(src.Fd()), off, int(dst.Fd()), nil, n, 0)
}

// copyRangeUnsupported says whether err means copy_file_range(2) cannot
// copy between these two files at all (another filesystem, a filesystem
// or kernel without it, a file kind it refuses): the caller copies
// through memory instead.
func copyRangeUnsupported(err error) bool {
	return errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EBADF) || errors.Is(err, unix.EPERM)
}
