package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStagedWriteFailureFailsTheWriter: writes the writing goroutine cannot
// make (here: a file open read-only) fail the stream, at the latest when it
// finishes, and the goroutine ends.
func TestStagedWriteFailureFailsTheWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path) // read-only: every write fails
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := newStagedWriter(f)
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	var werr error
	for i := 0; i < 3*directBufSize/len(chunk)+1 && werr == nil; i++ {
		_, werr = s.Write(chunk)
	}
	ferr := s.finish()
	if ferr == nil {
		t.Fatalf("finish after failed writes: nil error (Write said %v)", werr)
	}
	if s.jobs != nil {
		t.Fatal("writing goroutine still running after finish")
	}
}
