//go:build unix

package store

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with id pid exists on this host.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
