package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

var rowsDigest = oracle.RowSetDigest

const crashPolicy = `
defaults {
  compaction {
    target_rows_per_fragment = 300
  }
  repack {
    max_data_files_per_fragment = 1
  }
}
`

// referencedFiles returns every data/ and _deletions/ key any version of
// the table references.
func referencedFiles(t *testing.T, uri string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range tabletest.AllVersions(t, uri) {
		for _, f := range m.PB.GetFragments() {
			for _, df := range f.GetFiles() {
				out["data/"+df.GetPath()] = true
			}
			if d := f.GetDeletionFile(); d != nil {
				out[format.DeletionFileKey(f.GetId(), d)] = true
			}
		}
	}
	return out
}

func listData(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(path, "data"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, "data/"+e.Name())
	}
	return out
}

// writePolicy creates the policy directory dir with one file, p.hcl,
// holding hcl; it returns dir.
func writePolicy(t *testing.T, dir, hcl string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCompactSurvivesKill9 kills `lanced compact` with SIGKILL at failpoints
// across file writes, the .txn and the manifest put, and at random moments.
// After each kill real Lance opens the table with the same rows, every
// version still loads, and files the killed run wrote are unreferenced and
// are removed by one cleanup pass. A final run completes the compaction.
func TestCompactSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	polDir := writePolicy(t, filepath.Join(dir, "policies"), crashPolicy)
	base := oracle.Build(t, "backfill", filepath.Join(dir, "base"))
	// Two small appends: the plan has a rewrite (fragments 3, 4) and three
	// repacks (fragments 0-2, three files each).
	oracle.RunOps(t, base, []oracle.Op{{"op": "add", "rows": 40, "seed": 1}, {"op": "add", "rows": 40, "seed": 2}})
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, base, 0, nil))

	points := []string{
		"rewrite.file:1", "commit.txn:1", "commit.manifest:1",
		"repack.file:1", "repack.file:2", "repack.file:3", "commit.txn:2", "commit.manifest:2",
	}
	// Random kills land inside a real run: time an uninterrupted run of
	// the same binary on a scratch copy first.
	scratch := filepath.Join(dir, "scratch", "backfill.lance")
	if err := os.CopyFS(scratch, os.DirFS(base)); err != nil {
		t.Fatal(err)
	}
	timed := exec.Command(os.Args[0], "compact", "--policy", polDir, "file://"+scratch)
	timed.Env = append(os.Environ(), execMainEnv+"=1")
	t0 := time.Now()
	if out, err := timed.CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	runMS := max(int(time.Since(t0).Milliseconds()), 20)
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 12; i++ {
		points = append(points, fmt.Sprintf("random:%d", runMS/4+rng.IntN(runMS)))
	}
	for i, point := range points {
		path := filepath.Join(dir, fmt.Sprintf("t%02d", i), "backfill.lance")
		if err := os.CopyFS(path, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		uri := "file://" + path
		before := listData(t, path)
		cmd := exec.Command(os.Args[0], "compact", "--policy", polDir, uri)
		cmd.Env = append(os.Environ(), execMainEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if ms, ok := strings.CutPrefix(point, "random:"); ok {
			var d int
			fmt.Sscan(ms, &d)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(d) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		} else {
			cmd.Env = append(cmd.Env, "LANCED_FAILPOINT="+point)
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("%s: lanced compact was not killed (err %v): %s", point, err, stderr.String())
			}
		}
		// Real Lance opens the table with the right content.
		gotDigest, gotRows := rowsDigest(oracle.Scan(t, path, 0, nil))
		if gotRows != wantRows || gotDigest != wantDigest {
			t.Fatalf("%s: table content changed after the kill: %d rows, want %d", point, gotRows, wantRows)
		}
		// Files the killed run wrote are referenced by no version...
		ref := referencedFiles(t, uri)
		var orphans []string
		for _, k := range listData(t, path) {
			if !slices.Contains(before, k) && !ref[k] {
				orphans = append(orphans, k)
			}
		}
		// ...and one cleanup pass removes them (the journal names them; a
		// SIGKILLed task is silent, so they are treated as unverified files).
		var out bytes.Buffer
		if code := runMain([]string{"cleanup", "--unverified-after", "0", "--older-than", "1000d", uri}, &out, &out); code != 0 {
			t.Fatalf("%s: cleanup: %s", point, out.String())
		}
		for _, k := range orphans {
			if _, err := os.Stat(filepath.Join(path, k)); err == nil {
				t.Fatalf("%s: orphan %s survived cleanup", point, k)
			}
		}
		if gotDigest, gotRows := rowsDigest(oracle.Scan(t, path, 0, nil)); gotRows != wantRows || gotDigest != wantDigest {
			t.Fatalf("%s: content changed after cleanup", point)
		}
		t.Logf("%s: %d orphan file(s) removed", point, len(orphans))
		// The next run finishes the job.
		out.Reset()
		var errb bytes.Buffer
		if code := runMain([]string{"compact", "--policy", polDir, "--json", uri}, &out, &errb); code != 0 {
			t.Fatalf("%s: compact after the crash: %s%s", point, out.String(), errb.String())
		}
		var sum engine.Summary
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatalf("%s: %v: %s", point, err, out.String())
		}
		if gotDigest, gotRows := rowsDigest(oracle.Scan(t, path, 0, nil)); gotRows != wantRows || gotDigest != wantDigest {
			t.Fatalf("%s: content changed after the follow-up compaction", point)
		}
		if r := oracle.Inspect(t, path, 0); r.Fragments != 4 || r.DataFiles != 4 {
			t.Fatalf("%s: after the follow-up run: %d fragments, %d files", point, r.Fragments, r.DataFiles)
		}
	}
}
