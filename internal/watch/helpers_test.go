package watch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format"
)

func ref(table string, v uint64) format.VersionRef {
	return format.VersionRef{Table: table, Version: v}
}

// loadSample reads a payload from event/testdata (see the event package's
// tests): GCS samples become Pub/Sub attributes plus body.
func loadSample(t testing.TB, name string) ([]byte, map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("event", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "gcs_") || strings.HasPrefix(name, "gcs_push") {
		return raw, nil
	}
	var s struct {
		Attributes map[string]string `json:"attributes"`
		Data       json.RawMessage   `json:"data"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data, s.Attributes
}

func testRoots(t testing.TB) *Roots {
	t.Helper()
	rs, err := ParseRoots("s3://lake/warehouse", "gs://lake-gcs/warehouse")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
