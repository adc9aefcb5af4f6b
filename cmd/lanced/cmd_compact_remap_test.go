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

// remapKill is a kill test of `lanced compact` under the policy
// directory pol on copies of base (real Lance's table, see
// newRemapKill): after a kill at a failpoint, real Lance reads the rows
// of base and lists both indices, no version references a half-written
// index file, one cleanup pass removes every file the killed run left
// unreferenced, and a follow-up run compacts into one fragment with both
// indices covering every row and no file unreferenced (its pieces
// deleted), both indices kept by real Lance's next delete.
type remapKill struct {
	base, pol string
	digest    string
	rows      int
}

var remapKillIndices = []string{"id_idx", "vec_idx"}

// newRemapKill has real Lance write, under dir, 4 fragments of
// rowsPerFragment rows (32-d vectors) with every 10th deleted, an IVF_PQ
// of partitions partitions on vec and a BTree on id, then every 7th row
// deleted; and writes hcl as the policy directory.
func newRemapKill(t *testing.T, dir string, rowsPerFragment, partitions int, hcl string) remapKill {
	t.Helper()
	pol := writePolicy(t, filepath.Join(dir, "policies"), hcl)
	base := oracle.Build(t, oracle.Sized{Fragments: 4, RowsPerFragment: rowsPerFragment, VectorDim: 32}.Scenario(), filepath.Join(dir, "base"))
	oracle.RunOps(t, base, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": partitions, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	k := remapKill{base: base, pol: pol}
	k.digest, k.rows = rowsDigest(oracle.Scan(t, base, 0, nil))
	return k
}

// check fails t unless real Lance reads base's rows at path and lists
// both indices.
func (k remapKill) check(t *testing.T, path, when string) {
	t.Helper()
	if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != k.rows || d != k.digest {
		t.Fatalf("content changed %s: %d rows, want %d", when, n, k.rows)
	}
	if got := oracle.Inspect(t, path, 0).IndexNames(); !slices.Equal(got, remapKillIndices) {
		t.Fatalf("indices %s: %v", when, got)
	}
}

// run kills the compaction at point and checks the table as the type
// says; it returns the orphans cleanup removed.
func (k remapKill) run(t *testing.T, point string) []string {
	t.Helper()
	path, uri, before := killCompactAt(t, k.base, point, "--policy", k.pol)
	k.check(t, path, "after the kill")
	indexFilesWhole(t, path, uri)
	kept, orphans := newFiles(t, path, uri, before)
	cleanupRemovesOrphans(t, path, uri, kept, orphans)
	k.check(t, path, "after cleanup")
	before = treeFiles(t, path)
	var out bytes.Buffer
	if code := runMain([]string{"compact", "--policy", k.pol, uri}, &out, &out); code != 0 {
		t.Fatalf("compact after the crash: %s", out.String())
	}
	k.check(t, path, "after the follow-up compaction")
	indexFilesWhole(t, path, uri)
	if _, left := newFiles(t, path, uri, before); len(left) > 0 {
		t.Fatalf("the follow-up compaction left unreferenced files (pieces not deleted?): %v", left)
	}
	r := oracle.Inspect(t, path, 0)
	if r.Fragments != 1 {
		t.Fatalf("after the follow-up run: %d fragments", r.Fragments)
	}
	for _, ix := range r.Indices {
		if ix.UnindexedRows != 0 || ix.IndexedRows != int64(k.rows) {
			t.Fatalf("after the follow-up run: %+v", ix)
		}
	}
	// Real Lance keeps both after its next delete.
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id = 5"}})
	if got := oracle.Inspect(t, path, 0).IndexNames(); !slices.Equal(got, remapKillIndices) {
		t.Fatalf("indices after real Lance's delete %v", got)
	}
	return orphans
}

// indexFilesWhole fails t unless every file of every index segment any
// version of the local table references exists with the size the index
// metadata records (a segment recording no files must have some).
func indexFilesWhole(t *testing.T, path, uri string) {
	t.Helper()
	for _, m := range tabletest.AllVersions(t, uri) {
		for _, ix := range m.Indices.GetIndices() {
			dir := filepath.Join(path, "_indices", (&index.Segment{Meta: ix}).UUID())
			if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
				t.Fatalf("version %d: index %q segment %s has no files (%v)", m.PB.GetVersion(), ix.GetName(), dir, err)
			}
			for _, f := range ix.GetFiles() {
				st, err := os.Stat(filepath.Join(dir, f.GetPath()))
				if err != nil || uint64(st.Size()) != f.GetSizeBytes() {
					t.Fatalf("version %d: index %q file %s/%s: %v, recorded %d bytes", m.PB.GetVersion(), ix.GetName(), dir, f.GetPath(), err, f.GetSizeBytes())
				}
			}
		}
	}
}

// TestCompactRemapSurvivesKill9 kills `lanced compact` (index_coverage =
// remap, each index remapped in one task) with SIGKILL inside the remap
// tasks (before the first file, after a segment is written), between the
// remaps and the Rewrite commit, and across the reservation and the
// Rewrite commit; see remapKill for what is checked after each kill.
func TestCompactRemapSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	k := newRemapKill(t, t.TempDir(), 1000, 4, "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n}\n")
	// commit.txn:1 / commit.manifest:1 are the ReserveFragments commit,
	// :2 the Rewrite commit.
	points := []string{"remap.reserve:1", "commit.manifest:1", "remap.start:1", "remap.written:1", "remap.written:2",
		"remap.commit:1", "commit.txn:2", "commit.manifest:2"}
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Logf("%s: %d orphan file(s) removed", point, len(k.run(t, point)))
		})
	}
}

// TestCompactRemapInPartsSurvivesKill9 kills `lanced compact` while it
// remaps both indices in parts: with index.remap_part_bytes = 16 KiB
// vec_idx (IVF_PQ, 8 partitions) is remapped by 8 part tasks and id_idx
// (BTree, 3 pages) by 3, each index joined once (vec_idx's first). Kill
// points: after the first part's piece is uploaded (its result not built)
// and after the part is done; the same in a later part of vec_idx and in
// a part of id_idx; inside vec_idx's join (one joined file uploaded, the
// other half written) and after it; inside id_idx's join and after it;
// between the joins and the Rewrite commit; across the Rewrite commit.
// See remapKill for what is checked after each kill; the follow-up run
// remaps in parts too.
func TestCompactRemapInPartsSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	k := newRemapKill(t, t.TempDir(), 3000, 8, "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n  index {\n    remap_part_bytes = \"16KiB\"\n  }\n}\n")
	// A part writes one piece file (IVF_PQ: auxiliary.idx, BTree:
	// page_data.lance), so slice.piece:N is the N-th part's piece uploaded,
	// its result not built yet; vec_idx has 8 parts (one per partition),
	// so slice.piece:10 is inside id_idx's parts. Each join writes 2 files
	// (IVF_PQ: auxiliary.idx and index.idx, written together; BTree:
	// page_data.lance, then page_lookup.lance): join.file:3 and
	// remap.written:2 are id_idx's join, which exists only if id_idx is
	// remapped in parts.
	points := []string{"slice.piece:1", "remap.part:1", "slice.piece:5", "remap.part:3", "join.file:1", "remap.written:1",
		"slice.piece:10", "join.file:3", "remap.written:2", "remap.commit:1", "commit.txn:2", "commit.manifest:2"}
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			orphans := k.run(t, point)
			t.Logf("%s: %d orphan file(s) removed: %v", point, len(orphans), orphans)
		})
	}
}
