package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
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

// killCompactAt copies the local table at base, runs `lanced compact
// args... URI` on the copy in a child process with LANCED_FAILPOINT=point
// (killCompactOn). It returns the copy's path and URI and its data/_indices
// files before the run.
func killCompactAt(t *testing.T, base, point string, args ...string) (path, uri string, before []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "t.lance")
	if err := os.CopyFS(path, os.DirFS(base)); err != nil {
		t.Fatal(err)
	}
	uri = "file://" + path
	before = tableKeys(t, uri)
	killCompactOn(t, uri, point, args...)
	return path, uri, before
}

// killCompactOn runs `lanced compact args... uri` in a child process with
// LANCED_FAILPOINT=point and requires that the failpoint killed it
// (SIGKILL).
func killCompactOn(t *testing.T, uri, point string, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(append([]string{"compact"}, args...), uri)...)
	cmd.Env = append(os.Environ(), execMainEnv+"=1", "LANCED_FAILPOINT="+point)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("lanced compact was not killed (err %v): %s", err, stderr.String())
	}
}

// openBucket opens the table's bucket for the test.
func openBucket(t *testing.T, uri string) *store.Bucket {
	t.Helper()
	b, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// tableKeys lists the table's data/ and _indices/ objects (on a local
// table, files being written included).
func tableKeys(t *testing.T, uri string) []string {
	t.Helper()
	b := openBucket(t, uri)
	var out []string
	for _, dir := range []string{"data/", "_indices/"} {
		if err := b.List(context.Background(), dir, func(o store.Object) error {
			out = append(out, o.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// copyTable copies every object of the table at src to dst (either on any
// store).
func copyTable(t *testing.T, src, dst string) {
	t.Helper()
	ctx := context.Background()
	from, to := openBucket(t, src), openBucket(t, dst)
	if err := from.List(ctx, "", func(o store.Object) error {
		data, err := from.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		return to.Put(ctx, o.Key, data)
	}); err != nil {
		t.Fatal(err)
	}
}

// newFiles splits the data/_indices objects of the table that are not in
// before into those some version references (kept) and the rest
// (orphans).
func newFiles(t *testing.T, uri string, before []string) (kept, orphans []string) {
	t.Helper()
	refData, refIdx := referencedFiles(t, uri), referencedIndexDirs(t, uri)
	for _, k := range tableKeys(t, uri) {
		if slices.Contains(before, k) {
			continue
		}
		if refData[k] || refIdx[path.Dir(k)] {
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
func cleanupRemovesOrphans(t *testing.T, uri string, kept, orphans []string) {
	t.Helper()
	var out bytes.Buffer
	if code := runMain([]string{"cleanup", "--unverified-after", "0", "--older-than", "1000d", uri}, &out, &out); code != 0 {
		t.Fatalf("cleanup: %s", out.String())
	}
	b := openBucket(t, uri)
	for _, k := range orphans {
		if _, err := b.Attributes(context.Background(), k); err == nil {
			t.Fatalf("orphan %s survived cleanup", k)
		}
	}
	for _, k := range kept {
		if _, err := b.Attributes(context.Background(), k); err != nil {
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
// newRemapKill), on the local disk or (with s3 set) in the S3 emulator:
// after a kill at a failpoint, real Lance reads the rows of base and
// lists both indices, no version references a missing or short file, one
// cleanup pass removes every file the killed run left unreferenced, and
// a follow-up run compacts into one fragment with both indices covering
// every row and no file unreferenced (its pieces deleted), both indices
// kept by real Lance's next delete.
type remapKill struct {
	base, pol string
	digest    string
	rows      int
	s3        *storetest.S3Server
	so        oracle.Options
	// indices are the index names real Lance must list (sorted).
	indices []string
}

// newRemapKill has real Lance write, under dir, 4 fragments of
// rowsPerFragment rows (32-d vectors) with every 10th deleted, an IVF_PQ
// of partitions partitions on vec and a BTree on id, then every 7th row
// deleted; and writes hcl as the policy directory. With s3 set the table
// is written into the S3 emulator (prefix "base") instead.
func newRemapKill(t *testing.T, dir string, rowsPerFragment, partitions int, hcl string, s3 *storetest.S3Server) remapKill {
	t.Helper()
	k := remapKill{pol: writePolicy(t, filepath.Join(dir, "policies"), hcl), s3: s3, indices: []string{"id_idx", "vec_idx"}}
	scenario := oracle.Sized{Fragments: 4, RowsPerFragment: rowsPerFragment, VectorDim: 32}.Scenario()
	if s3 != nil {
		k.so = oracle.Options{StorageOptions: s3.LanceStorageOptions()}
		k.base = oracle.Build(t, scenario, s3.LanceURI("base"), k.so)
	} else {
		k.base = oracle.Build(t, scenario, filepath.Join(dir, "base"))
	}
	oracle.RunOps(t, k.base, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": partitions, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "delete", "where": "id % 7 = 3"},
	}, k.so)
	k.digest, k.rows = rowsDigest(oracle.Scan(t, k.base, 0, nil, k.so))
	return k
}

// uri is lanced's URI of the table real Lance knows as lance.
func (k remapKill) uri(lance string) string {
	if k.s3 == nil {
		return "file://" + lance
	}
	return k.s3.URI(strings.TrimPrefix(lance, k.s3.LanceURI("")+"/"))
}

// fresh copies the base table to a new place and returns its location
// for real Lance and lanced's URI.
func (k remapKill) fresh(t *testing.T, name string) (lance, uri string) {
	t.Helper()
	if k.s3 == nil {
		lance = filepath.Join(t.TempDir(), "t.lance")
		if err := os.Mkdir(lance, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		lance = k.s3.LanceURI(name + "/t.lance")
	}
	uri = k.uri(lance)
	copyTable(t, k.uri(k.base), uri)
	return lance, uri
}

// check fails t unless real Lance reads base's rows at lance and lists
// both indices.
func (k remapKill) check(t *testing.T, lance, when string) {
	t.Helper()
	if d, n := rowsDigest(oracle.Scan(t, lance, 0, nil, k.so)); n != k.rows || d != k.digest {
		t.Fatalf("content changed %s: %d rows, want %d", when, n, k.rows)
	}
	if got := oracle.Inspect(t, lance, 0, k.so).IndexNames(); !slices.Equal(got, k.indices) {
		t.Fatalf("indices %s: %v", when, got)
	}
}

// run kills the compaction at point and checks the table as the type
// says; it returns the orphans cleanup removed.
func (k remapKill) run(t *testing.T, point string) []string {
	t.Helper()
	lance, uri := k.fresh(t, strings.ReplaceAll(point, ":", "_"))
	before := tableKeys(t, uri)
	killCompactOn(t, uri, point, "--policy", k.pol)
	k.check(t, lance, "after the kill")
	referencedWhole(t, uri)
	kept, orphans := newFiles(t, uri, before)
	cleanupRemovesOrphans(t, uri, kept, orphans)
	k.check(t, lance, "after cleanup")
	before = tableKeys(t, uri)
	var out bytes.Buffer
	if code := runMain([]string{"compact", "--policy", k.pol, uri}, &out, &out); code != 0 {
		t.Fatalf("compact after the crash: %s", out.String())
	}
	k.check(t, lance, "after the follow-up compaction")
	referencedWhole(t, uri)
	if _, left := newFiles(t, uri, before); len(left) > 0 {
		t.Fatalf("the follow-up compaction left unreferenced files (pieces not deleted?): %v", left)
	}
	r := oracle.Inspect(t, lance, 0, k.so)
	if r.Fragments != 1 {
		t.Fatalf("after the follow-up run: %d fragments", r.Fragments)
	}
	for _, ix := range r.Indices {
		if ix.UnindexedRows != 0 || ix.IndexedRows != int64(k.rows) {
			t.Fatalf("after the follow-up run: %+v", ix)
		}
	}
	// Real Lance keeps both after its next delete.
	oracle.RunOps(t, lance, []oracle.Op{{"op": "delete", "where": "id = 5"}}, k.so)
	if got := oracle.Inspect(t, lance, 0, k.so).IndexNames(); !slices.Equal(got, k.indices) {
		t.Fatalf("indices after real Lance's delete %v", got)
	}
	return orphans
}

// referencedWhole fails t unless every file any version of the table
// references exists whole: each data file with the size the manifest
// records (when it records one), each deletion file, and each file of
// each index segment with the size its metadata records (a segment
// recording no files must have some).
func referencedWhole(t *testing.T, uri string) {
	t.Helper()
	ctx := context.Background()
	b := openBucket(t, uri)
	size := func(key string) (int64, error) {
		a, err := b.Attributes(ctx, key)
		return a.Size, err
	}
	for _, m := range tabletest.AllVersions(t, uri) {
		v := m.PB.GetVersion()
		for _, f := range m.PB.GetFragments() {
			for _, df := range f.GetFiles() {
				n, err := size("data/" + df.GetPath())
				if err != nil || (df.GetFileSizeBytes() != 0 && uint64(n) != df.GetFileSizeBytes()) {
					t.Fatalf("version %d: fragment %d data file %s: %v, %d bytes, recorded %d", v, f.GetId(), df.GetPath(), err, n, df.GetFileSizeBytes())
				}
			}
			if d := f.GetDeletionFile(); d != nil {
				if _, err := size(format.DeletionFileKey(f.GetId(), d)); err != nil {
					t.Fatalf("version %d: fragment %d deletion file: %v", v, f.GetId(), err)
				}
			}
		}
		for _, ix := range m.Indices.GetIndices() {
			dir := "_indices/" + (&index.Segment{Meta: ix}).UUID()
			files := 0
			if err := b.List(ctx, dir+"/", func(store.Object) error { files++; return nil }); err != nil || files == 0 {
				t.Fatalf("version %d: index %q segment %s has no files (%v)", v, ix.GetName(), dir, err)
			}
			for _, f := range ix.GetFiles() {
				n, err := size(dir + "/" + f.GetPath())
				if err != nil || uint64(n) != f.GetSizeBytes() {
					t.Fatalf("version %d: index %q file %s/%s: %v, %d bytes, recorded %d", v, ix.GetName(), dir, f.GetPath(), err, n, f.GetSizeBytes())
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
	k := newRemapKill(t, t.TempDir(), 1000, 4, "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n}\n", nil)
	k.runAll(t, twoSegmentRemapPoints)
}

// twoSegmentRemapPoints are the kill points of a compaction that remaps
// two index segments: commit.txn:1 / commit.manifest:1 are the
// ReserveFragments commit, :2 the Rewrite commit.
var twoSegmentRemapPoints = []string{"remap.reserve:1", "commit.manifest:1", "remap.start:1", "remap.written:1", "remap.written:2",
	"remap.commit:1", "commit.txn:2", "commit.manifest:2"}

// runAll runs the kill test at each point, as a subtest.
func (k remapKill) runAll(t *testing.T, points []string) {
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Logf("%s: %d orphan file(s) removed", point, len(k.run(t, point)))
		})
	}
}

// TestCompactFMRemapSurvivesKill9 is TestCompactRemapSurvivesKill9 for a
// table with an FM index (two partitions) and a BTree: the rewrite rebuilds
// the FM index from the column in its own commit. Killed before and after
// the ReserveFragments commit, before and after each segment is written,
// before the Rewrite commit and across it.
func TestCompactFMRemapSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	k := remapKill{pol: writePolicy(t, filepath.Join(dir, "policies"), "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n}\n"), indices: []string{"body_idx", "id_idx"}}
	k.base = oracle.Build(t, oracle.Sized{Fragments: 4, RowsPerFragment: 3500, TextWords: 4}.Scenario(), filepath.Join(dir, "base"))
	oracle.RunOps(t, k.base, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	k.digest, k.rows = rowsDigest(oracle.Scan(t, k.base, 0, nil))
	k.runAll(t, twoSegmentRemapPoints)
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
	k := newRemapKill(t, t.TempDir(), 3000, 8, remapPartsKillPolicy, nil)
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

// remapPartsKillPolicy remaps with index_coverage = "remap" and cuts the
// remap of a vector or btree segment of over 16 KiB into parts.
const remapPartsKillPolicy = "defaults {\n  compaction {\n    index_coverage = \"remap\"\n  }\n  index {\n    remap_part_bytes = \"16KiB\"\n  }\n}\n"

// TestCompactRemapInPartsOnS3SurvivesKill9 is
// TestCompactRemapInPartsSurvivesKill9 on the S3 emulator (gofakes3, in
// this process; real Lance writes and reads the table through s3://):
// `lanced compact` remaps both indices in parts and is killed after a part
// of vec_idx uploaded its piece and after a part is done, inside vec_idx's
// join (one joined file uploaded) and after it, inside id_idx's join,
// between the joins and the Rewrite commit, and across the Rewrite commit.
// See remapKill for what is checked after each kill.
func TestCompactRemapInPartsOnS3SurvivesKill9(t *testing.T) {
	oracle.Require(t)
	k := newRemapKill(t, t.TempDir(), 3000, 8, remapPartsKillPolicy, storetest.StartS3(t))
	for _, point := range []string{"slice.piece:5", "remap.part:3", "join.file:1", "remap.written:1", "join.file:3",
		"remap.commit:1", "commit.manifest:2"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			orphans := k.run(t, point)
			t.Logf("%s: %d orphan object(s) removed: %v", point, len(orphans), orphans)
		})
	}
}
