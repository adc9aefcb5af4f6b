package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to disk
// without waiting for it (sync_file_range(2) with SYNC_FILE_RANGE_WRITE),
// so the fsync that makes the file durable at Close finds little left to
// write and the disk works while the file is still being produced. Errors
// are ignored: the fsync at Close is what decides durability.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
