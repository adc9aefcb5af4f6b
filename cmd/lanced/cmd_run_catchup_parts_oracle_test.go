package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonCatchesUpInPartsAcrossWorkers: three daemon processes share
// embedded NATS and a table real Lance wrote with btree (id), FTS (body)
// and IVF_PQ (vec) indices and then 8 appends. The policy (catch-up only,
// catchup_part_rows = 700) plans each index's catch-up as 4 delta tasks
// and a merge task: a (embedded NATS, one worker) coordinates, b (two
// workers) dies by kill -9 right after its first delta segment is written
// (failpoint catchup.delta), c has one worker. The delta tasks run on
// several processes; only b's deltas run again (every other delta task
// starts once); the catch-ups commit and real Lance reports every live row
// indexed by all three indices; every other delta was deleted by its merge;
// what b left behind is in b's journal entries and one cleanup pass
// removes it.
func TestDaemonCatchesUpInPartsAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemon processes")
	}
	oracle.Require(t)
	root := t.TempDir()
	stage := filepath.Join(root, "stage")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	src := catchUpPartsTable(t, stage)
	hcl := "defaults {\n  scope = \"index\"\n  index { catchup_part_rows = 700 }\n}\n"
	tables, a, b, c := startThreeWorkers(t, root, hcl, "LANCED_FAILPOINT=catchup.delta:1")
	path := homeTablePath(tables, "parts", "a", "b", "c") // a coordinates it, b dies as a worker
	if err := os.Rename(src, path); err != nil {
		t.Fatal(err)
	}
	before := treeFiles(t, path)
	rows := oracle.Inspect(t, path, 0).Rows

	victims := sliceVictims(t, b)
	waitUntil(t, 300*time.Second, "every index current", func() bool {
		r := oracle.Inspect(t, path, 0)
		for _, ix := range r.Indices {
			if ix.UnindexedRows != 0 || ix.IndexedRows != rows {
				return false
			}
		}
		return len(r.Indices) == 3
	})
	started, workers := checkDeltaSpread(t, a, c, victims)
	stopByTERM(t, 120*time.Second, a, c)

	ref := referencedFiles(t, "file://"+path)
	segs := map[string]bool{}
	for _, m := range tabletest.AllVersions(t, "file://"+path) {
		for _, ix := range m.Indices.GetIndices() {
			segs[format.IndicesDir+"/"+(&index.Segment{Meta: ix}).UUID()] = true
		}
	}
	var orphans []string
	for _, k := range treeFiles(t, path) {
		if !slices.Contains(before, k) && !ref[k] && !segs[filepath.Dir(k)] {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) == 0 {
		t.Fatal("the killed worker left no delta file behind")
	}
	// Only b's deltas are left: a merge deletes the deltas it merged.
	dirs := map[string]bool{}
	for _, k := range orphans {
		dirs[filepath.Dir(k)] = true
	}
	if len(dirs) > len(victims) {
		t.Fatalf("orphans in %d directories, b ran %d delta tasks: %v", len(dirs), len(victims), orphans)
	}
	// b's other worker may have been running a merge (join) when b died.
	journaledOrphansCleaned(t, path, orphans, "slice/catchup.", "join/catchup.")
	after := oracle.Inspect(t, path, 0)
	for _, ix := range after.Indices {
		if ix.UnindexedRows != 0 || ix.IndexedRows != rows {
			t.Fatalf("after cleanup: %+v", ix)
		}
	}
	t.Logf("%d delta tasks started on a and c, on workers %v; b killed after writing the delta of %v; %d orphan file(s) in %d dir(s) journaled and removed",
		started, workers, victims, len(orphans), len(dirs))
}

// startThreeWorkers starts daemons a (embedded NATS, one worker), b (two
// workers, with env) and c (one worker) on root/tables under the policy
// hcl, and waits until they run.
func startThreeWorkers(t *testing.T, root, hcl string, env ...string) (tables string, a, b, c *daemonProc) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tables = filepath.Join(root, "tables")
	if err := os.MkdirAll(tables, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := writePolicy(t, filepath.Join(root, "policies"), hcl)
	natsAddr := freeAddr(t)
	auth := natsAuth(t, root, "three-workers-test-password")
	client := fmt.Sprintf("policies = %q\nnats {\n  url = \"nats://%s\"\n%s}", pol, natsAddr, auth)
	config := func(name, natsBlock string, workers int) string {
		return writeWorkersConfig(t, root, name, tables, natsBlock, freeAddr(t), workers)
	}
	a = startDaemonProc(t, bin, "a", config("a", fmt.Sprintf("policies = %q\nnats {\n  embedded = true\n  listen = %q\n%s}", pol, natsAddr, auth), 1), filepath.Join(root, "a"))
	waitUntil(t, 60*time.Second, "a running", func() bool { return a.has("lanced running", "", "") })
	b = startDaemonProcEnv(t, bin, "b", config("b", client, 2), filepath.Join(root, "b"), env...)
	c = startDaemonProc(t, bin, "c", config("c", client, 1), filepath.Join(root, "c"))
	waitUntil(t, 60*time.Second, "b and c running", func() bool { return b.has("lanced running", "", "") && c.has("lanced running", "", "") })
	return tables, a, b, c
}

// catchUpPartsTable has real Lance write the test's table in stage: 3,000
// rows in 2 fragments, btree, FTS and IVF_PQ indices, then 8 appends of
// 300 rows and a delete.
func catchUpPartsTable(t *testing.T, stage string) string {
	src := oracle.Build(t, oracle.Sized{Fragments: 2, RowsPerFragment: 1500, VectorDim: 32, TextWords: 12}.Scenario(), stage)
	ops := []oracle.Op{
		{"op": "create_index", "column": "id", "type": "btree"},
		{"op": "create_index", "column": "body", "type": "fts"},
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "options": map[string]any{"numPartitions": 2, "numSubVectors": 4, "distanceType": "l2"}},
	}
	for i := range 8 {
		ops = append(ops, oracle.Op{"op": "add", "rows": 300, "seed": 40 + i})
	}
	ops = append(ops, oracle.Op{"op": "delete", "where": "id >= 3000 AND id % 13 = 4"})
	oracle.RunOps(t, src, ops)
	return src
}

// checkDeltaSpread checks who ran the delta tasks: each started once on
// a or c, b's (killed) deltas included; with b's, on all three
// processes. It returns how many delta tasks a and c started and the
// processes that ran one.
func checkDeltaSpread(t *testing.T, a, c *daemonProc, victims []string) (int, []string) {
	started := map[string]int{}
	on := map[string]bool{"b": true}
	for _, p := range []*daemonProc{a, c} {
		for _, l := range p.snapshot() {
			k, _ := l["task_id"].(string)
			if l["msg"] == "task started" && l["kind"] == "slice" {
				started[k]++
				on[p.name] = true
			}
			if l["level"] == "ERROR" {
				t.Fatalf("%s: %v", p.name, l)
			}
		}
	}
	for k, n := range started {
		if n != 1 {
			t.Fatalf("delta %s started %d times on a and c", k, n)
		}
	}
	for _, v := range victims {
		if started[v] != 1 {
			t.Fatalf("b's delta %s started %d times on a and c", v, started[v])
		}
	}
	var workers []string
	for w := range on {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	if len(started) != 12 || len(workers) != 3 {
		t.Fatalf("%d delta tasks on %v; want 12 over a, b and c", len(started), workers)
	}
	return len(started), workers
}
