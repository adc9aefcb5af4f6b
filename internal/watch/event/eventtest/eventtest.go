// Package eventtest holds the test helpers shared by the watch and event
// tests: the recorded notification samples (event/testdata) and the roots
// they are written against.
package eventtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RootURIs are the table roots the samples name.
var RootURIs = []string{"s3://lake/warehouse", "gs://lake-gcs/warehouse"}

// Roots parses RootURIs with parse (event.ParseRoots or watch.ParseRoots).
func Roots[R any](t testing.TB, parse func(...string) (R, error)) R {
	t.Helper()
	rs, err := parse(RootURIs...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// LoadSample reads a payload from event/testdata. GCS samples given as
// {"attributes":{…},"data":{…}} are split into Pub/Sub attributes and the
// JSON_API_V1 body, as gcppubsub delivers them; everything else is a body.
func LoadSample(t testing.TB, name string) ([]byte, map[string]string) {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("eventtest: cannot locate event/testdata")
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "testdata", name))
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
