package store

import "os"

// KernelCopyAvailable reports whether copy_file_range(2) copies between two
// files in dir, so that file:// copies there bypass this process's memory.
// Some filesystems and kernels refuse it; lanced then copies through
// memory, which is correct but not kernel-side.
func KernelCopyAvailable(dir string) bool {
	src, err := os.CreateTemp(dir, ".lanced-copyrange-*")
	if err != nil {
		return false
	}
	defer os.Remove(src.Name())
	defer src.Close()
	dst, err := os.CreateTemp(dir, ".lanced-copyrange-*")
	if err != nil {
		return false
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if _, err := src.Write([]byte("x")); err != nil {
		return false
	}
	var off int64
	n, err := copyFileRange(src, &off, dst, 1)
	return err == nil && n == 1
}
