package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

func cleanupCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(args, &out, &errb)
	if code != 0 {
		t.Logf("lanced %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), code
}

type cleanupJSONOut struct {
	Plan struct {
		Latest   uint64 `json:"latest_version"`
		Versions []struct {
			Version uint64 `json:"version"`
			Keep    bool   `json:"keep"`
			Reason  string `json:"reason"`
		} `json:"versions"`
		Files []struct {
			Key    string `json:"key"`
			Reason string `json:"reason"`
		} `json:"files"`
		Manifests []struct {
			Key string `json:"key"`
		} `json:"manifests"`
	} `json:"plan"`
	Result struct {
		FilesDeleted     int `json:"files_deleted"`
		ManifestsDeleted int `json:"manifests_deleted"`
	} `json:"result"`
	Error string `json:"error"`
}

// TestCleanupChild runs `lanced cleanup` as a child process for
// TestCleanupKilledThenResumed.
func TestCleanupChild(t *testing.T) {
	args := os.Getenv("LANCED_CLEANUP_CHILD_ARGS")
	if args == "" {
		t.Skip("only runs as a child process")
	}
	os.Exit(runMain(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

// TestCleanupKilledThenResumed: `lanced cleanup` is SIGKILLed halfway
// through its (rate-limited) deletes; real Lance still reads every kept
// version, and the next run finishes with exactly the files a single
// uninterrupted run leaves.
func TestCleanupKilledThenResumed(t *testing.T) {
	oracle.Require(t)
	table := oracle.Build(t, "deletes_arrow", t.TempDir())
	oracle.RunOps(t, table, []oracle.Op{
		{"op": "delete", "where": "id % 3 = 0"},
		{"op": "add", "rows": 30, "seed": 4},
		{"op": "optimize", "cleanup_older_than_ms": int64(100 * 365 * 24 * 3600 * 1000)},
	})
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 12 {
		p := filepath.Join(table, "data", fmt.Sprintf("orphan-%02d.lance", i))
		if err := os.WriteFile(p, []byte("orphan"), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(p, old, old)
	}
	ref := filepath.Join(t.TempDir(), "ref.lance")
	oracle.CopyTree(t, table, ref)

	out, code := cleanupCLI(t, "cleanup", table, "--older-than", "0", "--dry-run", "--json")
	if code != 0 {
		t.Fatal("dry run failed")
	}
	var dry cleanupJSONOut
	if err := json.Unmarshal([]byte(out), &dry); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	total := len(dry.Plan.Files) + len(dry.Plan.Manifests)
	if total < 20 {
		t.Fatalf("only %d deletes planned; too few to interrupt", total)
	}
	var kept []uint64
	for _, v := range dry.Plan.Versions {
		if v.Keep {
			kept = append(kept, v.Version)
		}
	}
	before := cleanupVersionRows(t, table, kept)
	filesBefore := oracle.TreeFiles(t, table)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LANCED_CLEANUP_CHILD_ARGS="+strings.Join([]string{"cleanup", table, "--older-than", "0", "--delete-rate", "8"}, "\x1f"))
	var childOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &childOut, &childOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once the run has deleted something (it deletes in batches of
	// --delete-rate a second, so the kill lands between batches): a fixed
	// delay fell before the first delete when the machine was loaded, as
	// the child is a new process that still has to open and plan.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := killAfterFirstDelete(cmd, exited, table, len(filesBefore), 2*time.Minute); err != nil {
		t.Fatalf("%v:\n%s", err, childOut.String())
	}
	mid := oracle.TreeFiles(t, table)
	if len(mid) >= len(filesBefore) || len(filesBefore)-len(mid) >= total {
		t.Fatalf("kill did not land mid-run: %d files before, %d after, %d planned deletes", len(filesBefore), len(mid), total)
	}
	t.Logf("killed after %d of %d deletes", len(filesBefore)-len(mid), total)
	if got := cleanupVersionRows(t, table, kept); !slices.Equal(got, before) {
		t.Errorf("after the kill real Lance reads kept versions %v with rows %v, before %v", kept, got, before)
	}

	if out, code := cleanupCLI(t, "cleanup", table, "--older-than", "0", "--json"); code != 0 {
		t.Fatalf("resumed cleanup failed:\n%s", out)
	}
	if _, code := cleanupCLI(t, "cleanup", ref, "--older-than", "0"); code != 0 {
		t.Fatal("reference cleanup failed")
	}
	if got, want := oracle.TreeFiles(t, table), oracle.TreeFiles(t, ref); !slices.Equal(got, want) {
		t.Errorf("after kill+resume %v\nafter one run %v", got, want)
	}
	if got := cleanupVersionRows(t, table, kept); !slices.Equal(got, before) {
		t.Errorf("after the resumed run real Lance reads rows %v, before %v", got, before)
	}
}

// TestCleanupCLITaggedTable: on a real-Lance table with tags, the default
// keeps tagged versions (and real Lance opens them afterwards), and
// --error-if-tagged refuses like Lance's optimize does, deleting nothing.
func TestCleanupCLITaggedTable(t *testing.T) {
	oracle.Require(t)
	table := oracle.Build(t, "tags", t.TempDir())
	rep := oracle.Inspect(t, table, 0)
	if len(rep.Tags) == 0 {
		t.Fatal("scenario has no tags")
	}
	var tagged []uint64
	for _, v := range rep.Tags {
		tagged = append(tagged, v)
	}
	slices.Sort(tagged)
	before := cleanupVersionRows(t, table, tagged)
	files := oracle.TreeFiles(t, table)

	// Lance's optimize() compacts before it prunes: ask it on a copy.
	lanceCopy := filepath.Join(t.TempDir(), "copy.lance")
	oracle.CopyTree(t, table, lanceCopy)
	if _, err := oracle.TryOps(t, lanceCopy, []oracle.Op{{"op": "cleanup", "older_than_ms": 0, "delete_unverified": false}}); err == nil ||
		!strings.Contains(err.Error(), "tagged") {
		t.Fatalf("real Lance's cleanup on old tagged versions: %v, want a refusal", err)
	}
	if _, code := cleanupCLI(t, "cleanup", table, "--older-than", "0", "--error-if-tagged"); code == 0 {
		t.Fatal("--error-if-tagged did not refuse")
	}
	if got := oracle.TreeFiles(t, table); !slices.Equal(got, files) {
		t.Fatalf("refused run changed files")
	}
	out, code := cleanupCLI(t, "cleanup", table, "--older-than", "0", "--json")
	if code != 0 {
		t.Fatal("cleanup failed")
	}
	var res cleanupJSONOut
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Result.ManifestsDeleted == 0 {
		t.Errorf("nothing removed: %s", out)
	}
	if got := cleanupVersionRows(t, table, tagged); !slices.Equal(got, before) {
		t.Errorf("tagged versions %v read %v rows after cleanup, before %v", tagged, got, before)
	}
	after := oracle.Inspect(t, table, 0)
	for name, v := range rep.Tags {
		if !slices.Contains(after.Versions, v) || after.Tags[name] != v {
			t.Errorf("tag %s -> %d: Lance now lists versions %v, tags %v", name, v, after.Versions, after.Tags)
		}
	}
}

func cleanupVersionRows(t *testing.T, uri string, versions []uint64) []int64 {
	t.Helper()
	var ops []oracle.Op
	for _, v := range versions {
		ops = append(ops, oracle.Op{"op": "checkout_version", "version": v})
	}
	var rows []int64
	for _, r := range oracle.RunOps(t, uri, ops) {
		var x struct {
			Rows int64 `json:"rows"`
		}
		if err := json.Unmarshal(r, &x); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, x.Rows)
	}
	return rows
}

// killAfterFirstDelete kills the cleanup cmd as soon as the table at root
// holds fewer than before files, and waits for it to end. It fails if the
// cleanup ended by itself first or deleted nothing within timeout.
func killAfterFirstDelete(cmd *exec.Cmd, exited <-chan error, root string, before int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the cleanup ended before it was killed (%v)", err)
		default:
		}
		if n := countFiles(root); n < before {
			_ = cmd.Process.Kill()
			if err := <-exited; err == nil {
				return fmt.Errorf("the cleanup finished before it was killed")
			}
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("the cleanup deleted nothing within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countFiles counts the files under root while a cleanup deletes them
// (an entry gone during the walk is not counted).
func countFiles(root string) int {
	n := 0
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
