package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonSlicesHugeFragmentsAcrossWorkers: three daemon processes share
// two tables real Lance wrote, each one fragment: "rep" backfilled with
// add_columns (two data files: a repack), "rw" with every 7th row deleted
// (a rewrite). slice_bytes makes both tasks run as row slices: a (embedded
// NATS, one worker) coordinates, b (two workers) dies by kill -9 after the
// first piece it uploads (failpoint slice.piece), c has one worker. The
// slices run on the three processes; only b's slices are run again (every
// other slice starts exactly once); each table's join copies every page of
// the pieces (the "slices joined" log of the join's result: pages and bytes
// copied, none re-encoded) and commits once. Real Lance then reads the
// same rows in both tables; the piece b left behind is in b's journal entry
// and one cleanup pass removes it. LANCED_SLICE_ROWS sets the rows per
// fragment (real Lance writes at most 1 Mi rows into one).
func TestDaemonSlicesHugeFragmentsAcrossWorkers(t *testing.T) {
	bin, root := daemonProcsTest(t, "tables", "stage")
	rows := sliceTestRows(t)
	tables, stage := filepath.Join(root, "tables"), filepath.Join(root, "stage")
	srcs, want, sliceBytes := buildSliceTables(t, stage, rows)
	// a coordinates both tables, b dies as a worker.
	paths := map[string]string{"rep": homeTablePath(tables, "rep", "a", "b", "c"), "rw": homeTablePath(tables, "rw", "a", "b", "c")}
	pol := writeSlicePolicy(t, root, sliceBytes)

	natsAddr := freeAddr(t)
	auth := natsAuth(t, root, "slice-workers-test-password")
	client := fmt.Sprintf("policies = %q\nnats {\n  url = \"nats://%s\"\n%s}", pol, natsAddr, auth)
	config := func(name, natsBlock string, workers int) string {
		return writeWorkersConfig(t, root, name, tables, natsBlock, freeAddr(t), workers)
	}
	a := startDaemonProc(t, bin, "a", config("a", fmt.Sprintf("policies = %q\nnats {\n  embedded = true\n  listen = %q\n%s}", pol, natsAddr, auth), 1), filepath.Join(root, "a"))
	waitUntil(t, 60*time.Second, "a running", func() bool { return a.has("lanced running", "", "") })
	b := startDaemonProcEnv(t, bin, "b", config("b", client, 2), filepath.Join(root, "b"), "LANCED_FAILPOINT=slice.piece:1")
	c := startDaemonProc(t, bin, "c", config("c", client, 1), filepath.Join(root, "c"))
	waitUntil(t, 60*time.Second, "b and c running", func() bool { return b.has("lanced running", "", "") && c.has("lanced running", "", "") })
	// The tables appear once every worker is up, so the slices spread.
	before := map[string][]string{}
	for name, src := range srcs {
		if err := os.Rename(src, paths[name]); err != nil {
			t.Fatal(err)
		}
		before[name] = treeFiles(t, paths[name])
	}

	victims := sliceVictims(t, b)
	waitJoinsSettled(t, a, c)
	started, joins := checkSliceSpread(t, a, b, c, victims)
	stopByTERM(t, 120*time.Second, a, c)

	// Real Lance judges.
	for name, path := range paths {
		if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want[name]) {
			t.Fatalf("%s: real Lance reads different rows after the daemons", name)
		}
	}
	if r := oracle.Inspect(t, paths["rep"], 0); r.Fragments != 1 || r.DataFiles != 1 {
		t.Fatalf("rep after the repack: %+v", r)
	}
	if r := oracle.Inspect(t, paths["rw"], 0); r.DeletedRows != 0 || r.Fragments != 1 {
		t.Fatalf("rw after the rewrite: %+v", r)
	}

	removed := 0
	for name, path := range paths {
		removed += cleanSlicePieces(t, name, path, before[name], want[name])
	}
	if removed == 0 {
		t.Fatal("the killed worker left no piece behind")
	}
	t.Logf("%d rows per fragment, slice_bytes %d: %d slices on a, b, c; b killed in %v; joins %v; %d orphan(s) removed",
		rows, sliceBytes, started, victims, joins, removed)
}

// sliceTestRows is the rows per fragment: LANCED_SLICE_ROWS, or 200,000.
func sliceTestRows(t *testing.T) int {
	v := os.Getenv("LANCED_SLICE_ROWS")
	if v == "" {
		return 200_000
	}
	// The planner cuts no slice under 64 Ki rows: fewer than three of them
	// would plan plain tasks and b would never be killed.
	rows, err := strconv.Atoi(v)
	if err != nil || rows < 3*64*1024 {
		t.Fatalf("LANCED_SLICE_ROWS=%q: want a row count of at least %d (three slices of 64 Ki rows)", v, 3*64*1024)
	}
	return rows
}

// buildSliceTables has real Lance write the two one-fragment tables in
// stage: "rep" backfilled by add_columns, "rw" with every 7th row
// deleted. It returns their paths, the digest of their rows, and a
// slice_bytes that cuts the smaller fragment's files into three slices.
func buildSliceTables(t *testing.T, stage string, rows int) (srcs map[string]string, want map[string]map[string]string, sliceBytes uint64) {
	repSrc := oracle.Build(t, oracle.Sized{Fragments: 1, RowsPerFragment: rows, VectorDim: 16}.Scenario(), stage)
	oracle.RunOps(t, repSrc, []oracle.Op{{"op": "add_columns", "columns": []map[string]string{{"name": "doubled", "value_sql": "id * 2"}}}})
	rwSrc := oracle.Build(t, oracle.Sized{Fragments: 1, RowsPerFragment: rows, VectorDim: 16, DeleteEvery: 7}.Scenario(), stage)
	srcs = map[string]string{"rep": repSrc, "rw": rwSrc}
	want = map[string]map[string]string{}
	for name, src := range srcs {
		want[name] = oracle.Digest(oracle.Scan(t, src, 0, nil))
		_, m := tabletest.Open(t, "file://"+src)
		var n uint64
		for _, df := range m.PB.GetFragments()[0].GetFiles() {
			n += df.GetFileSizeBytes()
		}
		if sliceBytes == 0 || n/3+1 < sliceBytes {
			sliceBytes = n/3 + 1
		}
	}
	return srcs, want, sliceBytes
}

// writeSlicePolicy writes the policy directory: slice_bytes, and one data
// file per fragment as the repack goal.
func writeSlicePolicy(t *testing.T, root string, sliceBytes uint64) string {
	pol := filepath.Join(root, "policies")
	if err := os.MkdirAll(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	hcl := fmt.Sprintf("defaults {\n  compaction { slice_bytes = %d }\n  repack { max_data_files_per_fragment = 1 }\n}\n", sliceBytes)
	if err := os.WriteFile(filepath.Join(pol, "slices.hcl"), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// sliceVictims waits for b's kill -9 at its failpoint and returns the
// slice tasks b had started.
func sliceVictims(t *testing.T, b *daemonProc) []string {
	select {
	case <-b.done:
	case <-time.After(180 * time.Second):
		t.Fatal("b was not killed at slice.piece")
	}
	if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("b ended without kill -9: %v", b.cmd.ProcessState)
	}
	var victims []string
	for _, l := range b.snapshot() {
		if l["msg"] == "task started" && l["kind"] == "slice" {
			k, _ := l["task_id"].(string)
			victims = append(victims, k)
		}
	}
	if len(victims) == 0 {
		t.Fatal("b died outside a slice task")
	}
	return victims
}

// waitJoinsSettled waits until a or c committed both joins (a rewrite and
// an update) and every task a and c started has ended (its outcome, and
// any error on the way, is logged); neither logged an error.
func waitJoinsSettled(t *testing.T, a, c *daemonProc) {
	joined := func(kind string) bool {
		for _, p := range []*daemonProc{a, c} {
			for _, l := range p.snapshot() {
				if l["msg"] == "version committed" && l["kind"] == kind {
					return true
				}
			}
		}
		return false
	}
	waitUntil(t, 300*time.Second, "both joins committed", func() bool { return joined("rewrite") && joined("update") })
	waitUntil(t, 120*time.Second, "every task on a and c ended", func() bool { return tasksEnded(a, c) })
	for _, p := range []*daemonProc{a, c} {
		for _, l := range p.snapshot() {
			if l["level"] == "ERROR" {
				t.Fatalf("%s: %v", p.name, l)
			}
		}
	}
}

// tasksEnded reports whether every task the processes started has ended
// (its outcome logged).
func tasksEnded(procs ...*daemonProc) bool {
	for _, p := range procs {
		open := map[string]int{}
		for _, l := range p.snapshot() {
			k, _ := l["task_id"].(string)
			switch l["msg"] {
			case "task started":
				open[k]++
			case "task done", "task ended", "task handed back", "task failed, retrying":
				open[k]--
			}
		}
		for _, n := range open {
			if n > 0 {
				return false
			}
		}
	}
	return true
}

// checkSliceSpread checks who ran what: every slice started once on a or
// c, except that b's slices were also started (and never finished) on b;
// at least 6 slices over all three processes; one join per table that
// copied the pages of at least 3 pieces and re-encoded none. It returns
// the slice count and the joins' log lines.
func checkSliceSpread(t *testing.T, a, b, c *daemonProc, victims []string) (int, []map[string]any) {
	started := map[string]int{}
	ranOn := map[string]map[string]bool{}
	var joins []map[string]any
	for _, p := range []*daemonProc{a, c} {
		for _, l := range p.snapshot() {
			k, _ := l["task_id"].(string)
			switch {
			case l["msg"] == "task started" && l["kind"] == "slice":
				started[k]++
				if ranOn[k] == nil {
					ranOn[k] = map[string]bool{}
				}
				ranOn[k][p.name] = true
			case l["msg"] == "slices joined":
				joins = append(joins, l)
			}
		}
	}
	for k, n := range started {
		if n != 1 {
			t.Fatalf("slice %s started %d times on a and c", k, n)
		}
	}
	for _, v := range victims {
		if b.has("task done", "task_id", v) || started[v] != 1 {
			t.Fatalf("b's slice %s: done on b %v, started on a/c %d times", v, b.has("task done", "task_id", v), started[v])
		}
	}
	workers := map[string]bool{"b": true}
	for _, on := range ranOn {
		for w := range on {
			workers[w] = true
		}
	}
	if len(started) < 6 || len(workers) != 3 {
		t.Fatalf("%d slices on workers %v; want at least 6 slices over a, b and c", len(started), workers)
	}
	if len(joins) != 2 {
		t.Fatalf("want one join per table, got %d: %v", len(joins), joins)
	}
	for _, l := range joins {
		if l["pages_copied"].(float64) == 0 || l["bytes_copied"].(float64) == 0 || l["pages_reencoded"].(float64) != 0 || l["pieces"].(float64) < 3 {
			t.Fatalf("join did not page-copy its pieces: %v", l)
		}
	}
	return len(started), joins
}

// cleanSlicePieces checks that every file under path that was not there
// before and no version references (the piece the killed worker left) is
// in a slice task's journal entry, that one cleanup pass removes them all
// and that real Lance still reads the rows want digests. It returns how
// many it removed.
func cleanSlicePieces(t *testing.T, name, path string, before []string, want map[string]string) int {
	ref := referencedFiles(t, "file://"+path)
	var orphans []string
	for _, k := range treeFiles(t, path) {
		if !slices.Contains(before, k) && !ref[k] {
			orphans = append(orphans, k)
		}
	}
	journaledOrphansCleaned(t, path, orphans, "slice/")
	if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
		t.Fatalf("%s: rows changed after cleanup", name)
	}
	return len(orphans)
}
