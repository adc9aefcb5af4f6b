package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// remapDone reads lanced_scheduler_tasks_total{kind="remap",outcome="done"}
// from a daemon's /metrics.
func remapDone(t *testing.T, addr string) int {
	t.Helper()
	code, body := httpGet("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("GET %s/metrics: %d", addr, code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "lanced_scheduler_tasks_total{") && strings.Contains(line, `kind="remap"`) && strings.Contains(line, `outcome="done"`) {
			f := strings.Fields(line)
			n, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return int(n)
		}
	}
	return 0
}

// TestDaemonRemapTasksRunOnWorkersAndSurviveAKilledWorker: three daemon
// processes on one table real Lance built with an IVF_FLAT on vec, a
// BTree on id and a positional FTS on body, then appended to and deleted
// from. a (embedded NATS, one worker) takes the table's lease (its range
// is a's home whichever of b and c are live); b (two
// workers) dies by kill -9 (failpoint remap.written) in the middle of the
// first remap task it runs, after writing the new segment's files; c has
// one worker. The remap of each index is a task on the queue: the
// metrics of a and c both count remap tasks done, b's task is redelivered,
// and one Rewrite commit carries every remapped index. Real Lance then
// reads the same rows, lists the same indices with the same coverage, and
// the same vector (all partitions), IN-filter and match queries return the
// same rows through the indices. b's half-written segment is referenced by
// no version and one cleanup pass removes it.
func TestDaemonRemapTasksRunOnWorkersAndSurviveAKilledWorker(t *testing.T) {
	bin, root := daemonProcsTest(t)
	tables := filepath.Join(root, "tables")
	built, ops := remapDaemonTable(t, tables)
	// a coordinates the table throughout: its range is a's home
	// whichever of b and c are live.
	path := homeTablePath(tables, "remap", "a", "b", "c")
	if err := os.Rename(built, path); err != nil {
		t.Fatal(err)
	}
	uri := "file://" + path
	pre := oracle.Inspect(t, path, 0)
	wantIdx := []string{"body_idx", "id_idx", "vec_idx"}
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, path, 0, nil))
	before := oracle.Queries(t, path, ops)
	filesBefore := treeFiles(t, path)

	natsAddr := freeAddr(t)
	auth := natsAuth(t, root, "remap-workers-test-password")
	client := fmt.Sprintf("nats {\n  url = \"nats://%s\"\n%s}", natsAddr, auth)
	config := func(name, natsBlock, httpAddr string, workers int) string {
		return writeWorkersConfig(t, root, name, tables, natsBlock, httpAddr, workers)
	}
	httpA, httpC := freeAddr(t), freeAddr(t)
	a := startDaemonProc(t, bin, "a", config("a", fmt.Sprintf("nats {\n  embedded = true\n  listen = %q\n%s}", natsAddr, auth), httpA, 1), filepath.Join(root, "a"))
	waitCoordinating(t, a, path)
	b := startDaemonProcEnv(t, bin, "b", config("b", client, "", 2), filepath.Join(root, "b"), "LANCED_FAILPOINT=remap.written:1")
	c := startDaemonProc(t, bin, "c", config("c", client, httpC, 1), filepath.Join(root, "c"))
	waitUntil(t, 60*time.Second, "b and c running", func() bool { return b.has("lanced running", "", "") && c.has("lanced running", "", "") })

	// b takes a remap task (a and c have one worker each, b two, and the
	// batch has three) and dies writing it.
	select {
	case <-b.done:
	case <-time.After(120 * time.Second):
		t.Fatal("b was not killed at remap.written")
	}
	if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("b ended without kill -9: %v", b.cmd.ProcessState)
	}
	victim := ""
	for _, l := range b.snapshot() {
		if l["msg"] == "task started" && l["kind"] == "remap" {
			victim, _ = l["task_id"].(string)
		}
	}
	if victim == "" || b.has("task done", "task_id", victim) {
		t.Fatalf("b died outside a remap task (victim %q)", victim)
	}
	committed := func() bool {
		for _, p := range []*daemonProc{a, c} {
			for _, l := range p.snapshot() {
				if l["msg"] == "version committed" && l["kind"] == "rewrite" {
					if n, _ := l["tasks"].(float64); n >= 4 { // the rewrites and their three remaps
						return true
					}
				}
			}
		}
		return false
	}
	waitUntil(t, 120*time.Second, "the rewrite committed with its remaps", committed)
	waitUntil(t, 60*time.Second, "b's remap task redelivered and done", func() bool { return a.has("task done", "task_id", victim) || c.has("task done", "task_id", victim) })
	time.Sleep(3 * time.Second) // let the coordinator settle (catch-up of the appended rows)
	doneA, doneC := remapDone(t, httpA), remapDone(t, httpC)
	if doneA == 0 || doneC == 0 || doneA+doneC < 3 {
		t.Fatalf("remap tasks done: a %d, c %d; want both and at least 3", doneA, doneC)
	}
	for _, p := range []*daemonProc{a, c} {
		for _, l := range p.snapshot() {
			if l["level"] == "ERROR" {
				t.Fatalf("%s: %v", p.name, l)
			}
		}
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	<-a.done
	<-c.done

	// Real Lance judges.
	post := checkSameRowsFewerFragments(t, path, pre, wantDigest, wantRows)
	checkIndicesKept(t, pre, post, wantIdx)
	after := oracle.Queries(t, path, ops)
	for i, op := range ops {
		checkThroughIndex(t, op, after[i].Plan)
		if len(before[i].IDs()) == 0 || !slices.Equal(after[i].IDs(), before[i].IDs()) {
			t.Fatalf("%v %v: ids %v after the daemons, %v before", op["op"], op["query"], after[i].IDs(), before[i].IDs())
		}
	}

	// b's half-written segment: referenced by no version, recorded in
	// b's journal entry, and removed by one cleanup pass once that entry
	// counts as dead (a daemon's entry is kept StaleTaskAfter, an hour by
	// default, since its node may run on another host; here 0).
	refData, refIdx := referencedFiles(t, uri), referencedIndexDirs(t, uri)
	var orphans []string
	for _, k := range treeFiles(t, path) {
		if !slices.Contains(filesBefore, k) && !refData[k] && !refIdx[filepath.ToSlash(filepath.Dir(k))] {
			orphans = append(orphans, k)
		}
	}
	if !slices.ContainsFunc(orphans, func(k string) bool { return strings.HasPrefix(k, "_indices/") }) {
		t.Fatalf("no unreferenced index file left by the killed worker: %v", orphans)
	}
	journaledOrphansCleaned(t, path, orphans, "")
	if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
		t.Fatal("rows changed after cleanup")
	}
	t.Logf("fragments %d -> %d; remap tasks done: a %d, c %d; b killed in %s; %d orphan file(s) removed; %d queries same rows through the indices",
		pre.Fragments, post.Fragments, doneA, doneC, victim, len(orphans), len(ops))
}
