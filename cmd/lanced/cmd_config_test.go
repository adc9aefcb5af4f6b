package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestConfigSetOpensInRealLance: a version lanced commits (an UpdateConfig
// from `lanced config set`) opens in real Lance at the new version with the
// same rows; real Lance then appends on top, and lanced reads that version
// (config carried through by Lance, rows as Lance counts them). On V1 and V2
// naming, on file:// and the S3 emulator.
func TestConfigSetOpensInRealLance(t *testing.T) {
	oracle.Require(t)
	t.Parallel()
	s3 := storetest.StartS3(t)
	cases := []struct {
		name, scenario, naming string
		s3                     bool
	}{
		{"file_v2", "appends", "V2", false},
		{"file_v1", "v1_paths", "V1", false},
		{"s3_v2", "appends", "V2", true},
		{"s3_v1", "v1_paths", "V1", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var lanceURI, ourURI string
			var opts []oracle.Options
			if c.s3 {
				prefix := "cfg/" + c.name
				opts = []oracle.Options{{StorageOptions: s3.LanceStorageOptions()}}
				lanceURI = oracle.Build(t, c.scenario, s3.LanceURI(prefix), opts...)
				ourURI = s3.URI(prefix + "/" + c.scenario + ".lance")
			} else {
				lanceURI = oracle.Build(t, c.scenario, t.TempDir())
				ourURI = lanceURI
			}
			before := oracle.Inspect(t, lanceURI, 0, opts...)
			n := before.Version

			out := runCLI(t, "config", "set", ourURI, "lanced.test.key=yes", "owner=lanced")
			if want := fmt.Sprintf("committed version %d\n", n+1); out != want {
				t.Fatalf("config set printed %q, want %q", out, want)
			}
			// One real-Lance session: open the latest version (ours), count
			// its rows, append on top.
			res := oracle.RunOps(t, lanceURI, []oracle.Op{{"op": "version"}, {"op": "count_rows"}, {"op": "add", "rows": 50, "seed": 11}}, opts...)
			var opened, counted, added struct {
				Version uint64 `json:"version"`
				Count   int64  `json:"count"`
				Rows    int64  `json:"rows"`
			}
			for i, dst := range []any{&opened, &counted, &added} {
				if err := json.Unmarshal(res[i], dst); err != nil {
					t.Fatal(err)
				}
			}
			if opened.Version != n+1 || counted.Count != before.Rows {
				t.Fatalf("real Lance opened version %d with %d rows, want %d with %d", opened.Version, counted.Count, n+1, before.Rows)
			}
			if added.Version != n+2 || added.Rows != before.Rows+50 {
				t.Fatalf("real Lance append: version %d rows %d", added.Version, added.Rows)
			}
			// lanced reads Lance's version on top of ours.
			get := runCLI(t, "config", "get", ourURI)
			if !strings.Contains(get, "lanced.test.key=yes\n") || !strings.Contains(get, "owner=lanced\n") {
				t.Fatalf("config at v%d after Lance's append:\n%s", n+2, get)
			}
			rep := statsJSON(t, ourURI)
			if rep.Version != n+2 || int64(rep.Totals.Rows) != added.Rows || rep.Naming != c.naming || rep.WriterLibrary != "lance" {
				t.Fatalf("lanced stats at latest: version %d rows %d naming %s writer %s", rep.Version, rep.Totals.Rows, rep.Naming, rep.WriterLibrary)
			}
			ours := statsJSON(t, ourURI, "--version", fmt.Sprint(n+1))
			if ours.WriterLibrary != "lanced" || ours.WriterFeatureFlags&8 == 0 {
				t.Fatalf("our version: writer %s flags %d", ours.WriterLibrary, ours.WriterFeatureFlags)
			}
			// Remove a key again (a second lanced version on top of Lance's);
			// real Lance reads it and agrees with our stats.
			runCLI(t, "config", "unset", ourURI, "owner")
			final := oracle.Inspect(t, lanceURI, 0, opts...)
			if final.Version != n+3 || final.Rows != added.Rows {
				t.Fatalf("after unset: Lance sees version %d rows %d", final.Version, final.Rows)
			}
			checkStatsAgainstLance(t, statsJSON(t, ourURI), final)
			if got := runCLI(t, "config", "get", ourURI, "owner"); got != "" {
				t.Fatalf("owner still set: %q", got)
			}
		})
	}
}

// TestConfigSetKeepsTableShapes: on tables with indices, stable row ids,
// both deletion kinds and tags, a lanced commit changes nothing real Lance
// sees except the version (same rows, fragments, indices and their
// coverage, tags), and real Lance can keep maintaining the table on top:
// optimize (compaction + index optimize) and another index build.
func TestConfigSetKeepsTableShapes(t *testing.T) {
	oracle.Require(t)
	t.Parallel()
	dir := t.TempDir()
	for _, sc := range []string{"indexed", "stable_row_ids", "deletes_bitmap", "tags"} {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, sc, dir)
			before := oracle.Inspect(t, path, 0)
			runCLI(t, "config", "set", path, "lanced.shape="+sc)
			after := oracle.Inspect(t, path, 0)
			if after.Version != before.Version+1 || after.Rows != before.Rows || after.Fragments != before.Fragments ||
				after.DeletionFiles != before.DeletionFiles || after.DeletedRows != before.DeletedRows {
				t.Fatalf("real Lance after our commit: %+v\nbefore: %+v", after, before)
			}
			if fmt.Sprint(after.Indices) != fmt.Sprint(before.Indices) {
				t.Fatalf("indices changed:\n%v\n%v", before.Indices, after.Indices)
			}
			if fmt.Sprint(after.Tags) != fmt.Sprint(before.Tags) || fmt.Sprint(after.FragmentRows) != fmt.Sprint(before.FragmentRows) {
				t.Fatalf("tags or fragment rows changed")
			}
			ops := []oracle.Op{{"op": "add", "rows": 20, "seed": 5}}
			if sc != "tags" { // tags on old versions make Lance's prune fail by design
				ops = append(ops, oracle.Op{"op": "optimize"})
			}
			if sc == "indexed" {
				ops = append(ops, oracle.Op{"op": "create_index", "column": "category", "type": "bitmap"})
			}
			oracle.RunOps(t, path, ops)
			final := oracle.Inspect(t, path, 0)
			if final.Rows != before.Rows+20 {
				t.Fatalf("rows after Lance maintenance %d, want %d", final.Rows, before.Rows+20)
			}
			checkStatsAgainstLance(t, statsJSON(t, path), final)
			if got := runCLI(t, "config", "get", path, "lanced.shape"); got != "lanced.shape="+sc+"\n" {
				t.Fatalf("config after Lance's commits: %q", got)
			}
		})
	}
}
