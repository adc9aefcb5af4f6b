package store_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRealLanceOnEmulator checks the emulator helpers against real Lance:
// Lance writes a table into the emulator with LanceURI/LanceStorageOptions,
// store.Open(URI) sees exactly its objects, a table we upload through the
// store reads identically in real Lance, and real Lance can commit on top of
// it (its If-None-Match manifest put works against the emulator).
func TestRealLanceOnEmulator(t *testing.T) {
	oracle.Require(t)
	t.Run("s3", func(t *testing.T) { realLanceOnEmulator(t, storetest.StartS3(t)) })
	t.Run("gcs", func(t *testing.T) { realLanceOnEmulator(t, storetest.StartGCS(t)) })
}

func realLanceOnEmulator(t *testing.T, s3 storetest.Emulator) {
	ctx := context.Background()
	opts := oracle.Options{StorageOptions: s3.LanceStorageOptions()}

	// 1. Lance writes into the emulator; we list and read what it wrote.
	lanceURI := oracle.Build(t, "v1_paths", s3.LanceURI("built"), opts)
	if lanceURI != s3.LanceURI("built")+"/v1_paths.lance" {
		t.Fatalf("oracle built at %s", lanceURI)
	}
	rep := oracle.Inspect(t, lanceURI, 0, opts)
	b := open(t, s3.URI("built/v1_paths.lance"))
	var manifests []string
	err := b.ListDir(ctx, "_versions", func(o store.Object) error {
		if strings.HasSuffix(o.Key, ".manifest") {
			manifests = append(manifests, o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(manifests) != len(rep.Versions) {
		t.Errorf("store lists %d manifests %v; Lance reports versions %v", len(manifests), manifests, rep.Versions)
	}
	nData := 0
	_ = b.List(ctx, "data/", func(o store.Object) error {
		if strings.HasSuffix(o.Key, ".lance") {
			nData++
		}
		return nil
	})
	if nData != rep.DataFiles {
		t.Errorf("store lists %d data files, Lance's latest manifest has %d", nData, rep.DataFiles)
	}

	// 2. We upload a locally built table through the store; Lance reads it
	//    from the emulator exactly as it reads the original.
	local := oracle.Build(t, "deletes_bitmap", t.TempDir())
	want := oracle.Inspect(t, local, 0)
	up := open(t, s3.URI("uploaded/deletes_bitmap.lance"))
	err = filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		w, err := up.NewWriter(ctx, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if _, err := f.WriteTo(w); err != nil {
			return err
		}
		return w.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	upURI := s3.LanceURI("uploaded/deletes_bitmap.lance")
	got := oracle.Inspect(t, upURI, 0, opts)
	if got.Rows != want.Rows || got.Version != want.Version || !slices.Equal(got.Versions, want.Versions) {
		t.Errorf("Lance on the emulator: rows %d version %d versions %v; locally: rows %d version %d versions %v",
			got.Rows, got.Version, got.Versions, want.Rows, want.Version, want.Versions)
	}
	if d1, d2 := oracle.Digest(oracle.Scan(t, upURI, 0, nil, opts)), oracle.Digest(oracle.Scan(t, local, 0, nil)); !mapsEqual(d1, d2) {
		t.Errorf("column digests differ: emulator %v, local %v", d1, d2)
	}

	// 3. Lance commits on top of the uploaded table (conditional put against
	//    the emulator), and we see the new manifest.
	res := oracle.RunOps(t, upURI, []oracle.Op{{"op": "add", "rows": 10, "seed": 3}}, opts)
	if len(res) != 1 {
		t.Fatalf("ops results %s", res)
	}
	after := oracle.Inspect(t, upURI, 0, opts)
	if after.Version != want.Version+1 || after.Rows != want.Rows+10 {
		t.Errorf("after a Lance append: version %d rows %d; want %d, %d", after.Version, after.Rows, want.Version+1, want.Rows+10)
	}
	n := 0
	_ = up.ListDir(ctx, "_versions", func(o store.Object) error {
		if strings.HasSuffix(o.Key, ".manifest") {
			n++
		}
		return nil
	})
	if n != len(after.Versions) {
		t.Errorf("store lists %d manifests after the append; Lance reports %v", n, after.Versions)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
