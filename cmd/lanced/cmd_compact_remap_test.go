package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// referencedIndexDirs returns the _indices/<uuid> directory of every index
// segment any version of the table references.
func referencedIndexDirs(t *testing.T, uri string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range tabletest.AllVersions(t, uri) {
		for _, ix := range m.Indices.GetIndices() {
			out["_indices/"+(&index.Segment{Meta: ix}).UUID()] = true
		}
	}
	return out
}

// killCompactAt copies the table at base, runs `lanced compact args... URI`
// on the copy in a child process with LANCED_FAILPOINT=point and requires
// that the failpoint killed it (SIGKILL). It returns the copy's path and
// URI and its data/_indices files before the run.
func killCompactAt(t *testing.T, base, point string, args ...string) (path, uri string, before []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "t.lance")
	if err := os.CopyFS(path, os.DirFS(base)); err != nil {
		t.Fatal(err)
	}
	uri = "file://" + path
	before = treeFiles(t, path)
	cmd := exec.Command(os.Args[0], append(append([]string{"compact"}, args...), uri)...)
	cmd.Env = append(os.Environ(), execMainEnv+"=1", "LANCED_FAILPOINT="+point)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("lanced compact was not killed (err %v): %s", err, stderr.String())
	}
	return path, uri, before
}

// newFiles splits the data/_indices files of the local table that are not
// in before into those the latest version references (kept) and the rest
// (orphans).
func newFiles(t *testing.T, path, uri string, before []string) (kept, orphans []string) {
	t.Helper()
	refData, refIdx := referencedFiles(t, uri), referencedIndexDirs(t, uri)
	for _, k := range treeFiles(t, path) {
		if slices.Contains(before, k) {
			continue
		}
		if refData[k] || refIdx[filepath.ToSlash(filepath.Dir(k))] {
			kept = append(kept, k)
			continue
		}
		orphans = append(orphans, k)
	}
	return kept, orphans
}

// cleanupRemovesOrphans runs one `lanced cleanup` pass that may delete
// unverified files at once and requires every orphan gone and every kept
// file still there.
func cleanupRemovesOrphans(t *testing.T, path, uri string, kept, orphans []string) {
	t.Helper()
	var out bytes.Buffer
	if code := runMain([]string{"cleanup", "--unverified-after", "0", "--older-than", "1000d", uri}, &out, &out); code != 0 {
		t.Fatalf("cleanup: %s", out.String())
	}
	for _, k := range orphans {
		if _, err := os.Stat(filepath.Join(path, k)); err == nil {
			t.Fatalf("orphan %s survived cleanup", k)
		}
	}
	for _, k := range kept {
		if _, err := os.Stat(filepath.Join(path, k)); err != nil {
			t.Fatalf("cleanup removed referenced %s: %v", k, err)
		}
	}
}

// treeFiles lists data/ and _indices/ files of a local table.
func treeFiles(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"data", "_indices"} {
		err := filepath.WalkDir(filepath.Join(path, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(path, p)
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return out
}

// TestCompactRemapSurvivesKill9 kills `lanced compact` (default policy:
// index_coverage = remap) with SIGKILL inside the remap tasks (before the
// first file, after a segment is written), between the remaps and the
// Rewrite commit, and across the reservation and the Rewrite commit. After
// each kill real Lance reads the same rows and still lists both indices,
// no version references a half-written segment, and one cleanup pass
// removes every file the killed run wrote; a follow-up run compacts with
// both indices remapped and searched through.
func TestCompactRemapSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	polDir := writePolicy(t, filepath.Join(dir, "policies"), "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n}\n")
	base := oracle.Build(t, "sized-4x1000-v32-t0-d0", filepath.Join(dir, "base"))
	oracle.RunOps(t, base, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, base, 0, nil))
	wantIdx := []string{"id_idx", "vec_idx"}
	names := func(path string) []string {
		var out []string
		for _, ix := range oracle.Inspect(t, path, 0).Indices {
			out = append(out, ix.Name)
		}
		slices.Sort(out)
		return out
	}
	// commit.txn:1 / commit.manifest:1 are the ReserveFragments commit,
	// :2 the Rewrite commit.
	points := []string{"remap.reserve:1", "commit.manifest:1", "remap.start:1", "remap.written:1", "remap.written:2",
		"remap.commit:1", "commit.txn:2", "commit.manifest:2"}
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			path, uri, before := killCompactAt(t, base, point, "--policy", polDir)
			if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
				t.Fatalf("content changed after the kill: %d rows, want %d", n, wantRows)
			}
			if got := names(path); !slices.Equal(got, wantIdx) {
				t.Fatalf("indices after the kill %v", got)
			}
			kept, orphans := newFiles(t, path, uri, before)
			cleanupRemovesOrphans(t, path, uri, kept, orphans)
			var out bytes.Buffer
			if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
				t.Fatalf("content changed after cleanup")
			}
			if code := runMain([]string{"compact", "--policy", polDir, uri}, &out, &out); code != 0 {
				t.Fatalf("compact after the crash: %s", out.String())
			}
			if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
				t.Fatalf("content changed after the follow-up compaction")
			}
			r := oracle.Inspect(t, path, 0)
			if r.Fragments != 1 {
				t.Fatalf("after the follow-up run: %d fragments", r.Fragments)
			}
			for _, ix := range r.Indices {
				if ix.UnindexedRows != 0 || ix.IndexedRows != int64(wantRows) {
					t.Fatalf("after the follow-up run: %+v", ix)
				}
			}
			if got := names(path); !slices.Equal(got, wantIdx) {
				t.Fatalf("indices after the follow-up run %v", got)
			}
			// Real Lance keeps both after its next delete.
			oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id = 5"}})
			if got := names(path); !slices.Equal(got, wantIdx) {
				t.Fatalf("indices after real Lance's delete %v", got)
			}
			t.Logf("%s: %d orphan file(s) removed", point, len(orphans))
		})
	}
}
