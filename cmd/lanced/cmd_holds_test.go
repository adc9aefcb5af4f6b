package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/status"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestHoldsPlaceListReleaseAndOneShotCommandsRespectThem: a hold placed
// with `lanced holds place` is table state: `holds list` on the root (given
// as a relative path) shows it with its reason, `compact` and `cleanup`
// refuse the table naming the release command, `plan` warns; after
// `holds release` the list is empty and `compact --dry-run` plans again.
func TestHoldsPlaceListReleaseAndOneShotCommandsRespectThem(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	tbl := oracle.Build(t, "appends", tables)
	t.Chdir(root)
	rel := "tables/appends.lance"

	out := runCLI(t, "holds", "list", "tables")
	if !strings.Contains(out, "no holds (1 table(s) checked)") {
		t.Fatalf("holds list before: %q", out)
	}
	runCLI(t, "holds", "place", rel, "--reason", "operator: repairing a data file")
	if _, err := os.Stat(filepath.Join(tbl, "_lanced", "hold.json")); err != nil {
		t.Fatalf("hold is not table state: %v", err)
	}
	var held []heldTable
	if err := json.Unmarshal([]byte(runCLI(t, "holds", "list", "./tables", "--json")), &held); err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Table != "file://"+tbl || held[0].Reason != "operator: repairing a data file" || !strings.HasPrefix(held[0].By, "cli") {
		t.Fatalf("holds list: %+v", held)
	}
	for _, args := range [][]string{{"compact", rel}, {"cleanup", rel}} {
		var o, e bytes.Buffer
		if code := runMain(args, &o, &e); code == 0 || !strings.Contains(e.String(), "is held") || !strings.Contains(e.String(), "lanced holds release file://"+tbl) {
			t.Fatalf("%v on a held table: exit %d, stderr %q", args, code, e.String())
		}
	}
	var o, e bytes.Buffer
	if code := runMain([]string{"plan", rel}, &o, &e); code != 0 || !strings.Contains(e.String(), "warning: table file://"+tbl+" is held") {
		t.Fatalf("plan on a held table: exit %d, stderr %q", code, e.String())
	}
	out = runCLI(t, "holds", "release", rel, "--reason", "repaired")
	if !strings.Contains(out, "released file://"+tbl) || !strings.Contains(out, "operator: repairing a data file") {
		t.Fatalf("release: %q", out)
	}
	if out := runCLI(t, "holds", "list", "tables"); !strings.Contains(out, "no holds") {
		t.Fatalf("holds list after release: %q", out)
	}
	if out := runCLI(t, "compact", rel, "--dry-run"); !strings.Contains(out, "rewrite task(s)") {
		t.Fatalf("compact --dry-run: %q", out)
	}
	if _, err := os.Stat(filepath.Join(tbl, "_lanced", "hold.json")); !os.IsNotExist(err) {
		t.Fatalf("hold record left after release: %v", err)
	}
}

// TestHistoryTellsLancedFromWriters: after `lanced compact` on a table real
// Lance appended to, `lanced history` lists the Rewrite as lanced's (with
// the fragments it removed and no rows changed) and the appends as a
// writer's, newest first.
func TestHistoryTellsLancedFromWriters(t *testing.T) {
	oracle.Require(t)
	tbl := oracle.Build(t, "appends", t.TempDir())
	runCLI(t, "compact", tbl)
	var h []historyEntry
	if err := json.Unmarshal([]byte(runCLI(t, "history", tbl, "--json", "--limit", "3")), &h); err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 {
		t.Fatalf("history --limit 3: %d entries", len(h))
	}
	if h[0].Operation != "Rewrite" || !h[0].ByLanced || h[0].RowsChanged != 0 || h[0].FragmentsChanged >= 0 || h[0].Version != h[1].Version+1 {
		t.Fatalf("newest entry %+v", h[0])
	}
	if h[1].Operation != "Append" || h[1].ByLanced || h[1].Writer != "lance" || h[1].RowsChanged <= 0 || h[1].FragmentsChanged != 1 {
		t.Fatalf("writer entry %+v", h[1])
	}
}

// TestStatsErrorsSayWhatToDo: a version past the latest is "not found
// (latest N)" in stats, scan and config get; a LanceDB directory lists the tables inside; `lanced status`
// on the directory (relative path) agrees with `lanced stats` per table.
func TestStatsErrorsSayWhatToDo(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tbl := oracle.Build(t, "appends", filepath.Join(root, "db"))
	oracle.Build(t, "deletes_bitmap", filepath.Join(root, "db"))
	t.Chdir(root)
	latest := statsJSON(t, tbl).LatestVersion
	var o, e bytes.Buffer
	for _, args := range [][]string{{"stats"}, {"scan"}, {"config", "get"}} {
		e.Reset()
		args = append(args, "db/appends.lance", "--version", "999")
		if code := runMain(args, &o, &e); code != 1 ||
			strings.TrimSpace(e.String()) != "lanced "+args[0]+": version 999 not found (latest "+strconv.FormatUint(latest, 10)+")" {
			t.Fatalf("%v: exit %d, %q", args, code, e.String())
		}
	}
	e.Reset()
	if code := runMain([]string{"stats", "db"}, &o, &e); code == 0 || !strings.Contains(e.String(), "holds 2 table(s)") ||
		!strings.Contains(e.String(), "file://"+tbl) {
		t.Fatalf("stats on a LanceDB dir: exit %d, %q", code, e.String())
	}
	var snap status.Snapshot
	if err := json.Unmarshal([]byte(runCLI(t, "status", "db", "--json")), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Tables) != 2 {
		t.Fatalf("status db: %d tables", len(snap.Tables))
	}
	for _, st := range snap.Tables {
		rep := statsJSON(t, strings.TrimPrefix(st.URI, "file://"))
		if st.Fragments != rep.Totals.Fragments || st.Rows != rep.Totals.Rows || st.Bytes != rep.Totals.DataFileBytes || st.Version != rep.Version {
			t.Fatalf("status %+v disagrees with stats %+v", st, rep.Totals)
		}
	}
}

// TestRunConfigAcceptsPolicySpelledAsTheFlag: `policy = DIR` in the config
// file is the --policy flag's spelling of `policies`; `run --help` exits 0
// with defaults shown and the testing flag hidden.
func TestRunConfigAcceptsPolicySpelledAsTheFlag(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pol"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "lanced.hcl")
	if err := os.WriteFile(cfg, []byte("tables = [\"tables\"]\npolicy = \"pol\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runCLI(t, "run", "--config", cfg, "--check-config"); !strings.Contains(out, "policies "+filepath.Join(dir, "pol")) {
		t.Fatalf("check-config: %q", out)
	}
	var o, e bytes.Buffer
	if code := runMain([]string{"help", "run"}, &o, &e); code != 0 || !strings.Contains(e.String(), "(default 127.0.0.1:9464)") ||
		strings.Contains(e.String(), "debug-task-delay") || !strings.Contains(e.String(), "--policy") {
		t.Fatalf("help run: exit %d\n%s", code, e.String())
	}
}

// TestPolicyCheckPrintsEachDiagnosticOnce: one grep-able line per problem
// (file:line:col) with its detail, not a second rendering of it.
func TestPolicyCheckPrintsEachDiagnosticOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.hcl"), []byte("defaults {\n  compaction {\n    target_rows_per_fragmen = 5\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	if code := runMain([]string{"policy", "check", dir}, &o, &e); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if n := strings.Count(e.String(), "Unsupported argument"); n != 1 || !strings.Contains(e.String(), filepath.Join(dir, "a.hcl")+":3:5: error: Unsupported argument") ||
		!strings.Contains(e.String(), `Did you mean "target_rows_per_fragment"?`) {
		t.Fatalf("diagnostic printed %d times:\n%s", n, e.String())
	}
}

// TestCompletionScriptsParse: the bash completion names every command and
// bash accepts the script.
func TestCompletionScriptsParse(t *testing.T) {
	out := runCLI(t, "completion", "bash")
	for name := range commands {
		if !strings.Contains(out, " "+name+" ") && !strings.Contains(out, "\""+name+" ") {
			t.Errorf("completion lacks %s", name)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command(bash, "-n")
	cmd.Stdin = strings.NewReader(out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, b)
	}
}

// TestEveryCommandHelpIsAlike: `lanced CMD --help` and `lanced help CMD`
// exit 0 for every command and print the same form: the command's usage
// line, its summary, and its flags spelled --name (no Go default -name
// listing, no hidden flag).
func TestEveryCommandHelpIsAlike(t *testing.T) {
	for name, c := range commands {
		for _, args := range [][]string{{name, "--help"}, {"help", name}} {
			var o, e bytes.Buffer
			if code := runMain(args, &o, &e); code != 0 {
				t.Errorf("%v: exit %d\n%s", args, code, e.String())
				continue
			}
			help := e.String() + o.String()
			if !strings.HasPrefix(help, "usage: lanced "+name) || !strings.Contains(help, c.summary) {
				t.Errorf("%v: want the usage line and summary first:\n%s", args, help)
			}
			for _, line := range strings.Split(help, "\n") {
				if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
					t.Errorf("%v: flag listed with one dash: %q", args, line)
				}
			}
			for hidden := range hiddenFlags {
				if strings.Contains(help, "--"+hidden+" ") || strings.Contains(help, "--"+hidden+"\n") {
					t.Errorf("%v: hidden flag --%s shown", args, hidden)
				}
			}
		}
	}
}
