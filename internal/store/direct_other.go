//go:build !linux

package store

import "os"

// directAlignment: no direct writes here; the staged buffers are written
// through the page cache.
func directAlignment(*os.File) int { return 0 }

func setDirect(*os.File, bool) error { return nil }

func directRefused(error) bool { return false }

func allocDirectBuf(n int) []byte { return heapDirectBuf(n) }

func freeDirectBuf([]byte) {}
