//go:build !unix

package store

// processAlive cannot tell on this platform: every claim counts as live.
func processAlive(int) bool { return true }
