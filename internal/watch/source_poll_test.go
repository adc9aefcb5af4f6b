package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func v2(dir string, v uint64) string {
	return filepath.Join(dir, format.VersionsDir, format.ManifestName(format.NamingV2, v))
}

func v1name(dir string, v uint64) string {
	return filepath.Join(dir, format.VersionsDir, format.ManifestName(format.NamingV1, v))
}

func fileURI(p string) string { return "file://" + filepath.ToSlash(p) }

func TestPollSourceDiscoversTables(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "db1", "a.lance")
	for v := uint64(1); v <= 3; v++ {
		touch(t, v2(a, v))
	}
	touch(t, filepath.Join(a, "data", "0101.lance"))
	touch(t, filepath.Join(a, "_versions", "latest_version_hint.json"))
	b := filepath.Join(root, "db1", "b.lance")
	touch(t, v1name(b, 1))
	touch(t, v1name(b, 2))
	touch(t, filepath.Join(b, "_versions", "d9223372036854775811.manifest")) // detached
	touch(t, v1name(b, 9)+"-0d5b1c1e-7a39-4c1f-9d8c-2f1c9e7b6a55")           // staging
	touch(t, filepath.Join(root, "db1", "empty.lance", "data", "x.lance"))   // nothing committed
	touch(t, v2(filepath.Join(root, "db1", "__manifest"), 1))                // LanceDB namespace table
	touch(t, v2(filepath.Join(root, "db1", "plain"), 5))                     // a table without .lance
	touch(t, v2(filepath.Join(a, "tree", "feature"), 2))                     // a branch: not descended into
	touch(t, v2(filepath.Join(root, "nested", "deeper", "x.lance"), 1))
	touch(t, v2(filepath.Join(root, "too", "deep", "deeper", "y.lance"), 1)) // below MaxDepth

	src, err := NewPollSource(PollConfig{URIs: []string{fileURI(root)}, Interval: 20 * time.Millisecond, MaxDepth: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &flakySink{}
	go func() { _ = src.Run(ctx, sink.sink) }()
	want := []format.VersionRef{
		{Table: fileURI(a), Version: 3},
		{Table: fileURI(b), Version: 2},
		{Table: fileURI(filepath.Join(root, "db1", "plain")), Version: 5},
		{Table: fileURI(filepath.Join(root, "nested", "deeper", "x.lance")), Version: 1},
	}
	got := sink.wait(t, len(want))
	if !sameRefSet(got, want) {
		t.Fatalf("first sweep: %v, want %v", got, want)
	}
	// Later sweeps emit only tables whose latest version changed.
	time.Sleep(100 * time.Millisecond)
	touch(t, v2(a, 4))
	got = sink.wait(t, len(want)+1)
	if len(got) != len(want)+1 || got[len(want)] != (format.VersionRef{Table: fileURI(a), Version: 4}) {
		t.Fatalf("after a new commit: %v", got)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(sink.wait(t, 0)); n != len(want)+1 {
		t.Fatalf("unchanged tables emitted again: %d refs", n)
	}
}

func TestPollSourceRootIsTableAndAllowList(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a.lance")
	touch(t, v2(a, 7))
	src, err := NewPollSource(PollConfig{URIs: []string{fileURI(a)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	if failed := src.Sweep(context.Background(), sink.sink); failed != 0 {
		t.Fatalf("%d roots failed", failed)
	}
	if got := sink.wait(t, 1); len(got) != 1 || got[0] != (format.VersionRef{Table: fileURI(a), Version: 7}) {
		t.Fatalf("refs = %v", got)
	}

	// An explicit allow-list that does not cover the poll root wins.
	other, err := ParseRoots("file:///somewhere/else")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	src, err = NewPollSource(PollConfig{URIs: []string{fileURI(root)}}, Options{Roots: other, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sink = &flakySink{}
	src.Sweep(context.Background(), sink.sink)
	if got := sink.wait(t, 0); len(got) != 0 {
		t.Fatalf("refs outside the allow-list: %v", got)
	}
	if n := counterValue(t, m.dropped.WithLabelValues("outside_roots")); n != 1 {
		t.Fatalf("outside_roots drops = %v", n)
	}

	// A root that cannot be listed is counted and does not stop the rest.
	src, err = NewPollSource(PollConfig{URIs: []string{fileURI(filepath.Join(root, "missing")), fileURI(a)}}, Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sink = &flakySink{}
	if failed := src.Sweep(context.Background(), sink.sink); failed != 1 {
		t.Fatalf("failed roots = %d, want 1", failed)
	}
	if got := sink.wait(t, 1); len(got) != 1 {
		t.Fatalf("refs = %v", got)
	}
}

// TestPollSourceOnLanceTables: tables real Lance wrote (V2 and V1 names,
// deletes, a LanceDB directory layout) are found at the latest version
// real Lance reports.
func TestPollSourceOnLanceTables(t *testing.T) {
	oracle.Require(t)
	db := t.TempDir()
	var want []format.VersionRef
	for _, sc := range []string{"appends", "v1_paths"} {
		p := oracle.Build(t, sc, db)
		rep := oracle.Inspect(t, p, 0)
		want = append(want, format.VersionRef{Table: fileURI(p), Version: rep.LatestVersion})
	}
	src, err := NewPollSource(PollConfig{URIs: []string{fileURI(db)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	if failed := src.Sweep(context.Background(), sink.sink); failed != 0 {
		t.Fatalf("%d roots failed", failed)
	}
	if got := sink.wait(t, len(want)); !sameRefSet(got, want) {
		t.Fatalf("refs = %v, want %v", got, want)
	}
}

// TestPollSourceS3 sweeps the S3 emulator through a root URI carrying
// connection parameters: refs name the canonical table URI, and OpenURI
// gives the connection back.
func TestPollSourceS3(t *testing.T) {
	s3 := storetest.StartS3(t)
	ctx := context.Background()
	b, err := store.Open(ctx, s3.URI("db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for v := uint64(1); v <= 3; v++ {
		if err := b.Put(ctx, "t.lance/"+format.ManifestKey(format.NamingV2, v), []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Put(ctx, "u.lance/"+format.ManifestKey(format.NamingV1, 12), []byte("m")); err != nil {
		t.Fatal(err)
	}
	src, err := NewPollSource(PollConfig{URIs: []string{s3.URI("db")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	if failed := src.Sweep(ctx, sink.sink); failed != 0 {
		t.Fatalf("%d roots failed", failed)
	}
	want := []format.VersionRef{{Table: "s3://lance/db/t.lance", Version: 3}, {Table: "s3://lance/db/u.lance", Version: 12}}
	got := sink.wait(t, 2)
	if !sameRefSet(got, want) {
		t.Fatalf("refs = %v, want %v", got, want)
	}
	roots, err := ParseRoots(s3.URI("db"))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := store.Open(ctx, roots.OpenURI("s3://lance/db/t.lance"))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if _, err := tb.Get(ctx, format.ManifestKey(format.NamingV2, 3)); err != nil {
		t.Fatalf("open the polled table through OpenURI: %v", err)
	}
}
