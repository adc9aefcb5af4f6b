// Package tabletest opens tables for tests: the one "open the table and read
// its latest manifest" helper the test suites share.
package tabletest

import (
	"context"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
)

// Open opens the table at uri (a local path or a store URI) and loads its
// latest manifest; the store is closed when the test ends. Any error fails
// the test.
func Open(t testing.TB, uri string) (*table.Table, *format.Manifest) {
	t.Helper()
	ctx := context.Background()
	b, err := store.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tbl, m
}

// Latest returns the latest manifest of the table at uri.
func Latest(t testing.TB, uri string) *format.Manifest {
	t.Helper()
	_, m := Open(t, uri)
	return m
}

// AllVersions loads every committed version of the table at uri, oldest
// first; a version that does not load fails the test.
func AllVersions(t testing.TB, uri string) []*format.Manifest {
	t.Helper()
	ctx := context.Background()
	tbl, _ := Open(t, uri)
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*format.Manifest, 0, len(vs))
	for _, v := range vs {
		m, err := tbl.Load(ctx, v.Version)
		if err != nil {
			t.Fatalf("version %d does not load: %v", v.Version, err)
		}
		out = append(out, m)
	}
	return out
}
