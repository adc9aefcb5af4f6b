// Package lancefiletest opens Lance files from local paths for tests.
package lancefiletest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// Open opens the Lance file at p (closed when the test ends); any error
// fails the test.
func Open(t testing.TB, p string) *lancefile.File {
	t.Helper()
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	st, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	f, err := lancefile.Open(fh, st.Size(), filepath.Base(p))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
