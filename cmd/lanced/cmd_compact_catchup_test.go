package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCompactCatchUpSurvivesKill9 kills `lanced compact --scope index`
// (default policy: every unindexed row is caught up) with SIGKILL inside
// the catch-up task (before anything is written, after each segment file
// is uploaded, after the segment is written) and across its CreateIndex
// commit (after the .txn, after the manifest). After each kill every
// version since the setup reads the same rows through real Lance, the
// index is still listed and searched, no version references a segment
// directory the killed run left half-written, and one cleanup pass removes
// every file the killed run wrote that nothing references; a follow-up run
// catches the index up (no unindexed row) and real Lance keeps appending
// and optimizing.
func TestCompactCatchUpSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	base := oracle.Build(t, "sized-1x3000-v32-t0-d0", filepath.Join(dir, "base"))
	oracle.RunOps(t, base, []oracle.Op{
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "add", "rows": 400, "seed": 5},
		{"op": "add", "rows": 300, "seed": 6},
		{"op": "delete", "where": "id >= 3000 AND id % 9 = 1"},
	})
	pre := oracle.Inspect(t, base, 0)
	if ix := pre.Index(t, "vec_idx"); ix.UnindexedRows == 0 {
		t.Fatalf("setup: nothing unindexed: %+v", ix)
	}
	query := make([]float64, 32)
	for i := range query {
		query[i] = float64(i%5) / 5
	}
	search := func(path string) {
		t.Helper()
		res := oracle.RunOps(t, path, []oracle.Op{{"op": "vector_search", "column": "vec", "vector": query, "k": 10, "columns": []string{"id"}}})
		var hits struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(res[0], &hits); err != nil || len(hits.Data) != 10 {
			t.Fatalf("vector search: %v %s", err, res[0])
		}
	}
	// commit.txn:1 / commit.manifest:1 are the catch-up's CreateIndex.
	points := []string{"catchup.start:1", "catchup.file:1", "catchup.file:2", "catchup.written:1", "commit.txn:1", "commit.manifest:1"}
	// A segment the table references is complete: both its files.
	killCatchUp(t, base, pre, "vec_idx", points, 2, search)
}

// killCatchUp kills `lanced compact --scope index` on a copy of base at
// each point and checks what TestCompactCatchUpSurvivesKill9 says; a new
// segment the table references must hold segFiles files.
func killCatchUp(t *testing.T, base string, pre oracle.Report, name string, points []string, segFiles int, search func(path string)) {
	t.Helper()
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, base, 0, nil))
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			path, uri, before := killCompactAt(t, base, point, "--scope", "index")
			after := oracle.Inspect(t, path, 0)
			for v := pre.Version; v <= after.Version; v++ {
				if d, n := rowsDigest(oracle.Scan(t, path, v, nil)); n != wantRows || d != wantDigest {
					t.Fatalf("version %d reads %d rows (want %d) or other content after the kill", v, n, wantRows)
				}
			}
			ix := after.Index(t, name)
			if ix.IndexedRows+ix.UnindexedRows != int64(wantRows) {
				t.Fatalf("after the kill: %+v, %d rows", ix, wantRows)
			}
			search(path)
			kept, orphans := newFiles(t, uri, before)
			if len(kept) != 0 && len(kept) != segFiles {
				t.Fatalf("referenced new files %v: a segment has %d files", kept, segFiles)
			}
			cleanupRemovesOrphans(t, uri, kept, orphans)
			var out bytes.Buffer
			if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
				t.Fatalf("content changed after cleanup")
			}
			if code := runMain([]string{"compact", "--scope", "index", uri}, &out, &out); code != 0 {
				t.Fatalf("compact after the crash: %s", out.String())
			}
			final := oracle.Inspect(t, path, 0)
			if ix := final.Index(t, name); ix.UnindexedRows != 0 || ix.IndexedRows != int64(wantRows) {
				t.Fatalf("after the follow-up run: %+v", ix)
			}
			if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
				t.Fatalf("content changed after the follow-up run")
			}
			search(path)
			oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 50, "seed": 9}, {"op": "optimize"}})
			if ix := oracle.Inspect(t, path, 0).Index(t, name); ix.UnindexedRows != 0 {
				t.Fatalf("after real Lance's append and optimize: %+v", ix)
			}
			t.Logf("%s: unindexed after the kill %d; %d orphan file(s) removed, %d referenced kept", point, ix.UnindexedRows, len(orphans), len(kept))
		})
	}
}

// TestCompactFTSCatchUpSurvivesKill9 is TestCompactCatchUpSurvivesKill9
// for an FTS index: killed before anything is written, after the first
// and fourth file of the new segment (old partition copies, then the new
// partition), after the segment is written, and across the commit. A
// referenced segment holds both partitions and metadata.lance; match
// searches keep working.
func TestCompactFTSCatchUpSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	base, pre := textBacklog(t, "sized-2x600-v0-t12-d0", oracle.Op{"op": "create_index", "column": "body", "type": "fts", "name": "body_idx", "options": map[string]any{"withPosition": true}}, 1200)
	search := func(path string) {
		t.Helper()
		res := oracle.RunOps(t, path, []oracle.Op{{"op": "fts_search", "column": "body", "query": "river zebra", "k": 10000, "columns": []string{"id"}}})
		var hits struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(res[0], &hits); err != nil || len(hits.Data) < 2 {
			t.Fatalf("fts search: %v %s", err, res[0])
		}
	}
	points := []string{"catchup.start:1", "catchup.file:1", "catchup.file:4", "catchup.written:1", "commit.txn:1", "commit.manifest:1"}
	// Partitions 0 and 1 (three files each) and metadata.lance.
	killCatchUp(t, base, pre, "body_idx", points, 7, search)
}

// TestCompactFMCatchUpSurvivesKill9 is TestCompactCatchUpSurvivesKill9
// for an FM index, which a catch-up rebuilds over every fragment: killed
// before anything is written, after the first of the new segment's two
// partition files, after the segment is written, and across the commit. A
// referenced segment holds both partition files; substring queries through
// the index keep returning the rows.
func TestCompactFMCatchUpSurvivesKill9(t *testing.T) {
	oracle.Require(t)
	base, pre := textBacklog(t, "sized-2x6000-v0-t3-d0", oracle.Op{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"}, 12000)
	search := func(path string) {
		t.Helper()
		res := oracle.Queries(t, path, []oracle.Op{{"op": "query", "where": "contains(body, 'Zebra cross') OR contains(body, 'café riv')", "columns": []string{"id"}}})
		if n := len(res[0].IDs()); n != 2 {
			t.Fatalf("substring query: %d rows, want 2", n)
		}
	}
	points := []string{"catchup.start:1", "catchup.file:1", "catchup.written:1", "commit.txn:1", "commit.manifest:1"}
	killCatchUp(t, base, pre, "body_idx", points, 2, search)
}

// textBacklog builds scenario, creates body_idx with create, appends 200
// generated rows and two with known text ("Zebra crossing", "naïve café
// river"), and deletes some appended rows (ids from first): the index has
// unindexed rows.
func textBacklog(t *testing.T, scenario string, create oracle.Op, first int) (string, oracle.Report) {
	t.Helper()
	base := oracle.Build(t, scenario, filepath.Join(t.TempDir(), "base"))
	oracle.RunOps(t, base, []oracle.Op{
		create,
		{"op": "add", "rows": 200, "seed": 5},
		{"op": "add", "texts": map[string]any{"body": []string{"Zebra crossing", "naïve café river"}}, "seed": 6},
		{"op": "delete", "where": fmt.Sprintf("id >= %d AND id %% 9 = 1", first)},
	})
	pre := oracle.Inspect(t, base, 0)
	if ix := pre.Index(t, "body_idx"); ix.UnindexedRows == 0 {
		t.Fatalf("setup: nothing unindexed: %+v", ix)
	}
	return base, pre
}

// TestFMRebuildCostVsLance measures, in the same run, an FM rebuild by
// `lanced compact --scope index` (the catch-up of 10 appended rows
// rebuilds the index over all 100,010 rows, about 24 MB of text in 11
// partitions: scan, build, write, commit) against real Lance building the
// same index over the same rows (createIndex(fm, replace), in a node
// process of its own): wall and CPU time and the process's peak RSS, each
// next to a baseline process (lanced plan, node count_rows) that opens
// the table and does nothing else. Both must index every row; lanced
// must stay within 2x Lance's peak RSS and 3x its CPU time.
func TestFMRebuildCostVsLance(t *testing.T) {
	oracle.Require(t)
	if testing.Short() {
		t.Skip("measurement")
	}
	base := oracle.Build(t, "sized-8x12500-v0-t40-d0", filepath.Join(t.TempDir(), "base"))
	oracle.RunOps(t, base, []oracle.Op{{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"}, {"op": "add", "rows": 10, "seed": 3}})
	type usage struct {
		wall      time.Duration
		cpu       time.Duration
		maxRSSKiB int64
	}
	run := func(cmd *exec.Cmd) usage {
		t.Helper()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v: %s", cmd.Args, err, out.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return usage{wall: time.Since(start), cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), maxRSSKiB: ru.Maxrss}
	}
	lanced := func(args ...string) *exec.Cmd {
		c := exec.Command(os.Args[0], args...)
		c.Env = append(os.Environ(), execMainEnv+"=1")
		return c
	}
	node := func(path string, ops string) *exec.Cmd {
		return exec.Command("node", "../../testenv/oracle/ops.mjs", path, ops)
	}
	for round := 1; round <= 2; round++ {
		ours, theirs := filepath.Join(t.TempDir(), "ours.lance"), filepath.Join(t.TempDir(), "lance.lance")
		for _, p := range []string{ours, theirs} {
			if err := os.CopyFS(p, os.DirFS(base)); err != nil {
				t.Fatal(err)
			}
		}
		lb := run(lanced("plan", "file://"+ours))
		nb := run(node(theirs, `[{"op":"count_rows"}]`))
		lu := run(lanced("compact", "--scope", "index", "file://"+ours))
		nu := run(node(theirs, `[{"op":"create_index","column":"body","type":"fm","name":"body_idx","replace":true}]`))
		for _, p := range []string{ours, theirs} {
			if ix := oracle.Inspect(t, p, 0).Index(t, "body_idx"); ix.UnindexedRows != 0 || ix.IndexedRows != 100_010 {
				t.Fatalf("%s: body_idx %+v", p, ix)
			}
		}
		t.Logf("round %d: lanced rebuild %v wall, %v CPU, peak RSS %d MiB (baseline %d MiB); Lance createIndex %v wall, %v CPU, peak RSS %d MiB (baseline %d MiB); ratios lanced/Lance: wall %.2f, CPU %.2f, peak RSS %.2f, RSS over baseline %.2f",
			round, lu.wall.Round(time.Millisecond), lu.cpu.Round(time.Millisecond), lu.maxRSSKiB>>10, lb.maxRSSKiB>>10,
			nu.wall.Round(time.Millisecond), nu.cpu.Round(time.Millisecond), nu.maxRSSKiB>>10, nb.maxRSSKiB>>10,
			lu.wall.Seconds()/nu.wall.Seconds(), lu.cpu.Seconds()/nu.cpu.Seconds(), float64(lu.maxRSSKiB)/float64(nu.maxRSSKiB),
			float64(lu.maxRSSKiB-lb.maxRSSKiB)/float64(nu.maxRSSKiB-nb.maxRSSKiB))
		if lu.maxRSSKiB > 2*nu.maxRSSKiB || lu.cpu > 3*nu.cpu {
			t.Fatalf("round %d: lanced peak RSS %d KiB, CPU %v; Lance %d KiB, %v", round, lu.maxRSSKiB, lu.cpu, nu.maxRSSKiB, nu.cpu)
		}
	}
}
