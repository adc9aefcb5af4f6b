package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// runCLI runs one lanced command in-process and returns stdout; a non-zero
// exit fails the test with stderr.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(args, &out, &errb); code != 0 {
		t.Fatalf("lanced %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

func statsJSON(t *testing.T, uri string, extra ...string) statsReport {
	t.Helper()
	var rep statsReport
	out := runCLI(t, append([]string{"stats", uri, "--json"}, extra...)...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	return rep
}

// TestStatsMatchesRealLance: on every table shape real Lance builds, the
// stats agree with what real Lance reports for the same version: fragment
// count, data files, deletion files, physical and deleted rows (Lance's own
// manifest summary), live rows per fragment (a scan of _rowaddr),
// countRows, and table.stats().
func TestStatsMatchesRealLance(t *testing.T) {
	oracle.Require(t)
	t.Parallel()
	dir := t.TempDir()
	for _, sc := range oracle.Scenarios() {
		t.Run(sc, func(t *testing.T) {
			t.Parallel() // the oracle runs at most two node processes at once
			path := oracle.Build(t, sc, dir)
			rep := statsJSON(t, path)
			lance := oracle.Inspect(t, path, 0)
			if rep.Version != lance.Version || rep.LatestVersion != lance.LatestVersion {
				t.Fatalf("version %d/%d, Lance %d/%d", rep.Version, rep.LatestVersion, lance.Version, lance.LatestVersion)
			}
			checkStatsAgainstLance(t, rep, lance)
			// An older version too, on the shapes where it differs most.
			if sc == "deletes_bitmap" || sc == "stable_row_ids" {
				old := statsJSON(t, path, "--version", "2")
				checkStatsAgainstLance(t, old, oracle.Inspect(t, path, 2))
			}
			if sc == "v1_paths" && rep.Naming != "V1" || sc != "v1_paths" && rep.Naming != "V2" {
				t.Fatalf("%s naming %s", sc, rep.Naming)
			}
			// The human table prints every fragment and the totals.
			human := runCLI(t, "stats", path)
			if !strings.Contains(human, "total") || strings.Count(human, "\n") < len(rep.Fragments)+5 {
				t.Fatalf("human output:\n%s", human)
			}
		})
	}
}

func checkStatsAgainstLance(t *testing.T, rep statsReport, lance oracle.Report) {
	t.Helper()
	// Index coverage: the indexStats counts of every index.
	if len(rep.IndexCoverage) != len(lance.Indices) {
		t.Errorf("v%d: %d indices, Lance lists %d", rep.Version, len(rep.IndexCoverage), len(lance.Indices))
	}
	for _, li := range lance.Indices {
		for _, c := range rep.IndexCoverage {
			if c.Name == li.Name && (int64(c.IndexedRows) != li.IndexedRows || int64(c.UnindexedRows) != li.UnindexedRows) {
				t.Errorf("v%d index %s: %d indexed / %d unindexed, Lance %d / %d", rep.Version, c.Name, c.IndexedRows, c.UnindexedRows, li.IndexedRows, li.UnindexedRows)
			}
		}
	}
	tot := rep.Totals
	if int64(tot.Rows) != lance.Rows {
		t.Errorf("v%d rows %d, Lance countRows %d", rep.Version, tot.Rows, lance.Rows)
	}
	if lance.Stats.NumRows != 0 && int64(tot.Rows) != lance.Stats.NumRows {
		t.Errorf("v%d rows %d, Lance stats().numRows %d", rep.Version, tot.Rows, lance.Stats.NumRows)
	}
	if tot.Fragments != lance.Fragments {
		t.Errorf("v%d fragments %d, Lance %d", rep.Version, tot.Fragments, lance.Fragments)
	}
	if lance.DataFiles >= 0 && tot.DataFiles != lance.DataFiles {
		t.Errorf("v%d data files %d, Lance %d", rep.Version, tot.DataFiles, lance.DataFiles)
	}
	if lance.PhysicalRows >= 0 && int64(tot.PhysicalRows) != lance.PhysicalRows {
		t.Errorf("v%d physical rows %d, Lance %d", rep.Version, tot.PhysicalRows, lance.PhysicalRows)
	}
	if lance.DeletedRows >= 0 && int64(tot.DeletedRows) != lance.DeletedRows {
		t.Errorf("v%d deleted rows %d, Lance %d", rep.Version, tot.DeletedRows, lance.DeletedRows)
	}
	if lance.FilesSize >= 0 && int64(tot.DataFileBytes) != lance.FilesSize {
		t.Errorf("v%d data file bytes %d, Lance total_files_size %d", rep.Version, tot.DataFileBytes, lance.FilesSize)
	}
	deletionFiles := 0
	for _, f := range rep.Fragments {
		if f.DeletionFileKind != "" {
			deletionFiles++
		}
		live := int64(f.PhysicalRows - f.DeletedRows)
		if got := lance.FragmentRows[uint32(f.ID)]; got != live {
			t.Errorf("v%d fragment %d: %d live rows, Lance scans %d", rep.Version, f.ID, live, got)
		}
		if f.DataFiles == 0 || len(f.Files) != f.DataFiles {
			t.Errorf("v%d fragment %d: %d data files", rep.Version, f.ID, f.DataFiles)
		}
	}
	if lance.DeletionFiles >= 0 && deletionFiles != lance.DeletionFiles {
		t.Errorf("v%d deletion files %d, Lance %d", rep.Version, deletionFiles, lance.DeletionFiles)
	}
	if int64(len(lance.FragmentRows)) > int64(len(rep.Fragments)) {
		t.Errorf("v%d: Lance scans rows in %d fragments, stats list %d", rep.Version, len(lance.FragmentRows), len(rep.Fragments))
	}
}
