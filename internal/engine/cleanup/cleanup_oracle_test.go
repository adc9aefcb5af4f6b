package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCleanupMatchesLance: on the same oracle-made table with the same
// settings, lanced deletes exactly the files real Lance's cleanup deletes on
// a copy, and real Lance reads every kept version identically afterwards.
func TestCleanupMatchesLance(t *testing.T) {
	oracle.Require(t)
	cases := []struct {
		scenario         string
		deleteUnverified bool
		extra            []oracle.Op
	}{
		{scenario: "deletes_arrow", extra: []oracle.Op{{"op": "delete", "where": "id % 3 = 0"}}},
		{scenario: "indexed", deleteUnverified: true, extra: []oracle.Op{{"op": "delete", "where": "id % 5 = 0"}}},
	}
	for _, tc := range cases {
		t.Run(tc.scenario, func(t *testing.T) {
			ctx := context.Background()
			src := oracle.Build(t, tc.scenario, t.TempDir())
			// Commits in two eras, 5 s apart: the cutoff falls between them,
			// so some old versions are kept and some removed.
			time.Sleep(5 * time.Second)
			t0 := time.Now()
			ops := append(slices.Clone(tc.extra),
				oracle.Op{"op": "add", "rows": 30, "seed": 11},
				// compaction without pruning (cutoff 100 years back)
				oracle.Op{"op": "optimize", "cleanup_older_than_ms": int64(100 * 365 * 24 * 3600 * 1000)})
			oracle.RunOps(t, src, ops)
			plantOrphans(t, src)
			cutoff := t0.Add(-2500 * time.Millisecond)

			lanceDir := filepath.Join(t.TempDir(), "lance.lance")
			oursDir := filepath.Join(t.TempDir(), "ours.lance")
			oracle.CopyTree(t, src, lanceDir)
			oracle.CopyTree(t, src, oursDir)
			before := versionRows(t, src, oracle.Inspect(t, src, 0).Versions)

			res := oracle.RunOps(t, lanceDir, []oracle.Op{{
				"op": "cleanup", "older_than_ms": time.Since(cutoff).Milliseconds(), "delete_unverified": tc.deleteUnverified,
			}})
			var out struct {
				Version  uint64   `json:"version"`
				Versions []uint64 `json:"versions"`
			}
			if err := json.Unmarshal(res[0], &out); err != nil {
				t.Fatal(err)
			}
			// optimize() compacts, prunes, then optimizes indices; the index
			// step may commit new versions after the prune. Compare only
			// what existed before: the files each cleanup removed, and the
			// pre-existing versions each kept.
			latest := slices.Max(before.versions)
			var lanceKept []uint64
			for _, v := range out.Versions {
				if v <= latest {
					lanceKept = append(lanceKept, v)
				}
			}

			b, err := store.Open(ctx, oursDir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			opts := DefaultCleanupOptions()
			opts.OlderThan = time.Since(cutoff)
			if tc.deleteUnverified {
				opts.UnverifiedAfter = 0
			}
			c, _ := NewCleaner(nil, nil)
			plan, _, err := c.Run(ctx, b, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			srcFiles := oracle.TreeFiles(t, src)
			lanceDeleted := minus(srcFiles, oracle.TreeFiles(t, lanceDir))
			ourDeleted := minus(srcFiles, oracle.TreeFiles(t, oursDir))
			if !slices.Equal(lanceDeleted, ourDeleted) {
				t.Errorf("deleted sets differ\ndeleted only by Lance: %v\ndeleted only by lanced: %v",
					minus(lanceDeleted, ourDeleted), minus(ourDeleted, lanceDeleted))
			}
			if len(ourDeleted) == 0 {
				t.Errorf("cleanup deleted nothing; the comparison is vacuous")
			}
			kept := []uint64{}
			for _, v := range plan.Versions {
				if v.Keep {
					kept = append(kept, v.Version)
				}
			}
			if !slices.Equal(kept, lanceKept) {
				t.Errorf("kept versions: ours %v, Lance's %v", kept, lanceKept)
			}
			if len(kept) < 2 {
				t.Errorf("only %v kept; the cutoff should keep several versions", kept)
			}
			after := versionRows(t, oursDir, kept)
			for i, v := range kept {
				if j := slices.Index(before.versions, v); j < 0 || before.rows[j] != after.rows[i] {
					t.Errorf("version %d: %d rows after cleanup, before %v", v, after.rows[i], before)
				}
			}
			t.Logf("%s: %d files deleted (%d manifests), same as Lance; kept versions %v", tc.scenario, len(ourDeleted), len(plan.Manifests), kept)
		})
	}
}

type rowsByVersion struct {
	versions []uint64
	rows     []int64
}

// versionRows asks real Lance for the row count of each version.
func versionRows(t *testing.T, uri string, versions []uint64) rowsByVersion {
	t.Helper()
	var ops []oracle.Op
	for _, v := range versions {
		ops = append(ops, oracle.Op{"op": "checkout_version", "version": v})
	}
	res := oracle.RunOps(t, uri, ops)
	out := rowsByVersion{versions: versions}
	for _, r := range res {
		var x struct {
			Rows int64 `json:"rows"`
		}
		if err := json.Unmarshal(r, &x); err != nil {
			t.Fatal(err)
		}
		out.rows = append(out.rows, x.Rows)
	}
	return out
}

// plantOrphans adds files no manifest references, old (2020) and recent
// (an hour ago), in every cleaned directory and outside them.
func plantOrphans(t *testing.T, root string) {
	t.Helper()
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	recent := time.Now().Add(-time.Hour)
	for _, f := range []struct {
		path string
		when time.Time
	}{
		{"data/orphan_old.lance", old},
		{"_deletions/0-1-42.arrow", old},
		{"_indices/00000000-0000-0000-0000-00000000000a/page_data.lance", old},
		{"_transactions/1-old.txn", old},
		{"_versions/.tmp_99.manifest_x", old},
		{"other_old.lance", old},
		{"data/orphan_recent.lance", recent},
		{"_deletions/0-1-43.bin", recent},
		{"_indices/00000000-0000-0000-0000-00000000000b/index.idx", recent},
		{"_transactions/1-recent.txn", recent},
	} {
		p := filepath.Join(root, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("orphan"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, f.when, f.when); err != nil {
			t.Fatal(err)
		}
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			out = append(out, x)
		}
	}
	return out
}

// TestFailedTaskOutputsGoneOnRealLanceTable: a task's uncommitted outputs
// (copies of real data files under fresh names, and a .txn) are removed by
// the first cleanup pass with the table's own default settings (7-day
// window), nothing else is touched, and real Lance reads the table as before.
func TestFailedTaskOutputsGoneOnRealLanceTable(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	table := oracle.Build(t, "appends", t.TempDir())
	want := oracle.Inspect(t, table, 0)
	b, err := store.Open(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var src string
	_ = b.List(ctx, "data/", func(o store.Object) error { src = o.Key; return nil })
	data, err := b.Get(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{
		"data/00000000000000000000000011111111111111111111111111.lance",
		"data/00000000000000000000000022222222222222222222222222.lance",
		"_transactions/29-00000000-0000-0000-0000-000000000001.txn",
	}
	j := journal.NewTaskJournal(b, "node-1")
	if err := j.RecordPending(ctx, "rewrite:t:29:1-2", outputs); err != nil {
		t.Fatal(err)
	}
	for _, k := range outputs {
		if err := b.Put(ctx, k, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Abandon(ctx, "rewrite:t:29:1-2"); err != nil {
		t.Fatal(err)
	}
	before := oracle.TreeFiles(t, table)
	opts, err := TableCleanupOptions(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewCleaner(nil, nil)
	start := time.Now()
	if _, _, err := c.Run(ctx, b, opts, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("one pass removed the failed task's outputs in %v", time.Since(start))
	after := oracle.TreeFiles(t, table)
	gone := minus(before, after)
	wantGone := append(slices.Clone(outputs), "_lanced/pending/rewrite:t:29:1-2.json")
	slices.Sort(wantGone)
	if !slices.Equal(gone, wantGone) {
		t.Errorf("removed %v, want exactly %v", gone, wantGone)
	}
	got := oracle.Inspect(t, table, 0)
	if got.Rows != want.Rows || !slices.Equal(got.Versions, want.Versions) {
		t.Errorf("after cleanup Lance reads %d rows, versions %v; before %d, %v", got.Rows, got.Versions, want.Rows, want.Versions)
	}
}

// TestCleanupRealLanceTableOnS3: real Lance builds and compacts a table in
// the S3 emulator; lanced cleans it through s3://; real Lance reads the
// latest version unchanged and lists only the versions lanced kept.
func TestCleanupRealLanceTableOnS3(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	s3 := storetest.StartS3(t)
	opts := oracle.Options{StorageOptions: s3.LanceStorageOptions()}
	lanceURI := oracle.Build(t, "deletes_arrow", s3.LanceURI("db"), opts)
	oracle.RunOps(t, lanceURI, []oracle.Op{
		{"op": "optimize", "cleanup_older_than_ms": int64(100 * 365 * 24 * 3600 * 1000)},
	}, opts)
	want := oracle.Inspect(t, lanceURI, 0, opts)
	wantDigest := oracle.Digest(oracle.Scan(t, lanceURI, 0, nil, opts))

	b, err := store.Open(ctx, s3.URI("db/deletes_arrow.lance"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := DefaultCleanupOptions()
	o.OlderThan = 0
	c, _ := NewCleaner(nil, quiet)
	plan, res, err := c.Run(ctx, b, o, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.ManifestsDeleted != len(want.Versions)-1 || res.FilesDeleted == 0 {
		t.Errorf("deleted %+v from versions %v; plan %d files", res, want.Versions, len(plan.Files))
	}
	got := oracle.Inspect(t, lanceURI, 0, opts)
	if got.Rows != want.Rows || got.Version != want.Version || !slices.Equal(got.Versions, []uint64{want.Version}) {
		t.Errorf("after cleanup Lance reads rows %d version %d versions %v; before rows %d version %d", got.Rows, got.Version, got.Versions, want.Rows, want.Version)
	}
	if gotDigest := oracle.Digest(oracle.Scan(t, lanceURI, 0, nil, opts)); fmt.Sprint(gotDigest) != fmt.Sprint(wantDigest) {
		t.Errorf("column digests after cleanup %v, before %v", gotDigest, wantDigest)
	}
}
