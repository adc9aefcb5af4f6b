package index_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/index"
)

// recordingSeg is a SegmentWriter whose files record how they ended.
type recordingSeg struct {
	ended    map[string]string // name -> "closed" / "aborted"
	failName string            // Close of this file fails
}

type recordingFile struct {
	seg  *recordingSeg
	name string
}

func (s *recordingSeg) Create(_ context.Context, name string) (io.WriteCloser, error) {
	return &recordingFile{seg: s, name: name}, nil
}

func (f *recordingFile) Write(p []byte) (int, error) { return len(p), nil }

func (f *recordingFile) Close() error {
	if f.seg.ended[f.name] != "" {
		return nil
	}
	if f.name == f.seg.failName {
		f.seg.ended[f.name] = "failed"
		return errors.New("upload failed")
	}
	f.seg.ended[f.name] = "closed"
	return nil
}

func (f *recordingFile) Abort() error {
	if f.seg.ended[f.name] == "" {
		f.seg.ended[f.name] = "aborted"
	}
	return nil
}

// TestWriteFilesAbortsOnError: WriteFiles publishes (closes) its files only
// when write succeeded; when write fails every file is aborted, and when
// one file's Close fails the files after it are aborted, not closed.
func TestWriteFilesAbortsOnError(t *testing.T) {
	names := []string{"a", "b", "c"}
	ends := func(s *recordingSeg) []string {
		var out []string
		for _, n := range names {
			out = append(out, s.ended[n])
		}
		return out
	}
	ok := &recordingSeg{ended: map[string]string{}}
	if err := index.WriteFiles(context.Background(), ok, names, func([]io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := ends(ok); !slices.Equal(got, []string{"closed", "closed", "closed"}) {
		t.Fatalf("success: files ended %v", got)
	}
	bad := &recordingSeg{ended: map[string]string{}}
	if err := index.WriteFiles(context.Background(), bad, names, func([]io.Writer) error { return errors.New("encode failed") }); err == nil {
		t.Fatal("a failed write returned nil")
	}
	if got := ends(bad); !slices.Equal(got, []string{"aborted", "aborted", "aborted"}) {
		t.Fatalf("failed write: files ended %v, want all aborted", got)
	}
	mid := &recordingSeg{ended: map[string]string{}, failName: "b"}
	if err := index.WriteFiles(context.Background(), mid, names, func([]io.Writer) error { return nil }); err == nil {
		t.Fatal("a failed Close returned nil")
	}
	if got := ends(mid); !slices.Equal(got, []string{"closed", "failed", "aborted"}) {
		t.Fatalf("failed Close of b: files ended %v", got)
	}
}
