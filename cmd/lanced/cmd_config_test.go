package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/policy"
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

// runCLIExit runs one lanced command in-process and returns its exit code,
// stdout and stderr.
func runCLIExit(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestConfigSetChecksAndNoops: on a real-Lance table, `config set` refuses
// a wrong-typed value for every lance.* key the policy reads and a
// misspelled lance.* key (with the closest key), commits nothing for a
// refused or no-op command (real Lance sees the same version), and --force
// commits anyway; `config get` on a table with no config says so.
func TestConfigSetChecksAndNoops(t *testing.T) {
	oracle.Require(t)
	t.Parallel()
	path := oracle.Build(t, "appends", t.TempDir())
	n := oracle.Inspect(t, path, 0).Version
	sameVersion := func(what string) {
		t.Helper()
		if v := oracle.Inspect(t, path, 0).Version; v != n {
			t.Fatalf("%s: real Lance sees version %d, want %d (nothing committed)", what, v, n)
		}
	}

	if got, want := runCLI(t, "config", "get", path), fmt.Sprintf("table has no config (version %d)\n", n); got != want {
		t.Fatalf("config get on a table with no config: %q, want %q", got, want)
	}

	// A non-numeric count first, then a value wrong for every type (a column named
	// twice is not valid column groups either) for every key.
	code, out, errs := runCLIExit("config", "set", path, "lance.compaction.max_data_files_per_fragment=two")
	if want := `lance.compaction.max_data_files_per_fragment = "two": expected a whole number >= 1`; code != 2 || out != "" || !strings.Contains(errs, want) {
		t.Fatalf("config set max_data_files_per_fragment=two: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	keys := 0
	for _, name := range policy.SettingNames() {
		key := policy.ConfigKey(name)
		if key == "" {
			continue
		}
		keys++
		code, out, errs := runCLIExit("config", "set", path, key+"=two,two")
		if code != 2 || out != "" || !strings.Contains(errs, key+` = "two,two": expected `) {
			t.Fatalf("config set %s=two,two: exit %d, stdout %q, stderr %q; want a refusal naming key, value and expected type", key, code, out, errs)
		}
	}
	if keys < 5 {
		t.Fatalf("only %d table config keys known to the policy", keys)
	}
	sameVersion("wrong-typed values")

	code, _, errs = runCLIExit("config", "set", path, "lance.compaction.max_data_files_per_fragmnt=4")
	if code == 0 || !strings.Contains(errs, `did you mean "lance.compaction.max_data_files_per_fragment"`) {
		t.Fatalf("misspelled key: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCLIExit("config", "set", path, "lance.auto_cleanup.no_such_setting=1")
	if code == 0 || !strings.Contains(errs, `unknown table config key "lance.auto_cleanup.no_such_setting"`) {
		t.Fatalf("unknown key under lance.auto_cleanup: exit %d, stderr %q", code, errs)
	}
	sameVersion("unknown keys")

	// Lance's own auto-cleanup interval and keys outside lance.* pass.
	if out := runCLI(t, "config", "set", path, "lance.auto_cleanup.interval=10", "team.owner=data"); out != fmt.Sprintf("committed version %d\n", n+1) {
		t.Fatalf("valid set: %q", out)
	}
	n++
	sameVersion("valid set")

	// --force overrides both checks.
	out = runCLI(t, "config", "set", path, "lance.compaction.max_data_files_per_fragment=two", "lance.compaction.max_data_files_per_fragmnt=4", "--force")
	if out != fmt.Sprintf("committed version %d\n", n+1) {
		t.Fatalf("--force: %q", out)
	}
	n++
	sameVersion("--force")
	get := runCLI(t, "config", "get", path)
	if !strings.Contains(get, "lance.compaction.max_data_files_per_fragment=two\n") || !strings.Contains(get, "lance.compaction.max_data_files_per_fragmnt=4\n") {
		t.Fatalf("config after --force:\n%s", get)
	}

	// No-ops: the same values again, unsetting a key that is not there.
	for _, args := range [][]string{
		{"config", "set", path, "lance.auto_cleanup.interval=10", "team.owner=data"},
		{"config", "unset", path, "nonexistent.key"},
	} {
		out := runCLI(t, args...)
		if !strings.HasPrefix(out, "nothing to change") {
			t.Fatalf("lanced %s: %q, want nothing to change", strings.Join(args, " "), out)
		}
	}
	sameVersion("no-op set/unset")
	// Real Lance still opens the table at that version with all rows.
	checkStatsAgainstLance(t, statsJSON(t, path), oracle.Inspect(t, path, 0))
}
