package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonRemapInPartsSurvivesKill9: the daemon remaps a table's IVF_PQ
// (8 partitions) and BTree (3 pages) in parts (index.remap_part_bytes =
// 16 KiB: 8 and 3 part tasks, then one join each) while a process dies by
// kill -9:
//
//   - part: a worker process (b) dies right after the first remap part it
//     runs wrote its piece (failpoint remap.part), its result not handed on;
//     a (embedded NATS, coordinator) and c finish, b's part runs again there;
//   - join: the only worker process (b; a coordinates with no worker) dies
//     right after the first join it runs wrote the joined segment
//     (failpoint remap.written), before its result reaches the coordinator;
//     c, started after the kill, runs the joins again;
//   - coordinator: NATS runs in the test process and the coordinator (a)
//     dies once the workers' join results are in and the Rewrite commit has
//     not begun (failpoint remap.commit); b or c takes the table's lease and
//     gets it compacted.
//
// The table's lease range is a's home whichever of b and c are live
// (homeTablePath): the daemons keep home ranges, and a joining node that
// became the home of a busy range would be handed it.
//
// After each, real Lance reads the same rows in fewer fragments, lists both
// indices with the indexed/unindexed rows they had, finds the same ids
// through the BTree and searches through the IVF_PQ with recall@10 no worse
// than before; every file any version references exists with the size it
// records; every file left unreferenced is in a journal entry and one
// cleanup pass removes it; real Lance's delete afterwards keeps both
// indices.
func TestDaemonRemapInPartsSurvivesKill9(t *testing.T) {
	bin, root := daemonProcsTest(t, "stage")
	base := newPartsKillBase(t, filepath.Join(root, "stage"))
	t.Run("part", func(t *testing.T) { base.killPart(t, bin) })
	t.Run("join", func(t *testing.T) { base.killJoin(t, bin) })
	t.Run("coordinator", func(t *testing.T) { base.killCoordinator(t, bin) })
}

// partsKillBase is real Lance's table of the remap-in-parts daemon tests
// (remapPartsTable) and what real Lance reads from it before the daemons.
type partsKillBase struct {
	src            string
	pre            oracle.Report
	digest         string
	rows           int
	qs             [][]float32
	idOps          []oracle.Op
	idsBefore      []oracle.QueryResult
	recallBefore   float64
	wantIdx        []string
	partsPolicyDir string
}

func newPartsKillBase(t *testing.T, stage string) *partsKillBase {
	b := &partsKillBase{src: remapPartsTable(t, stage), wantIdx: []string{"id_idx", "vec_idx"}}
	b.pre = oracle.Inspect(t, b.src, 0)
	if got := b.pre.IndexNames(); !slices.Equal(got, b.wantIdx) {
		t.Fatalf("indices before: %v", got)
	}
	b.digest, b.rows = rowsDigest(oracle.Scan(t, b.src, 0, nil))
	b.qs, b.idOps = partsQueries()
	b.recallBefore = partsRecall(t, b.src, b.qs)
	b.idsBefore = oracle.Queries(t, b.src, b.idOps)
	b.partsPolicyDir = writePolicy(t, filepath.Join(stage, "policies"), partsPolicy)
	return b
}

// partsKillRun is one kill test's daemons on a copy of the base table.
type partsKillRun struct {
	root, tables, path string
	before             []string
	nats               string // the nats block of a client
}

// newRun makes a directory with an empty tables directory; the table is
// copied in by place, under a name whose lease range has a as its home
// whichever of b and c are live (homeTablePath), so a coordinates it
// throughout.
func (b *partsKillBase) newRun(t *testing.T) *partsKillRun {
	root := t.TempDir()
	r := &partsKillRun{root: root, tables: filepath.Join(root, "tables")}
	if err := os.MkdirAll(r.tables, 0o755); err != nil {
		t.Fatal(err)
	}
	r.path = homeTablePath(r.tables, "parts", "a", "b", "c")
	return r
}

// place copies the base table into the tables directory (through a
// staging copy and a rename, so no daemon sees half a table).
func (b *partsKillBase) place(t *testing.T, r *partsKillRun) {
	stage := filepath.Join(r.root, "parts.lance")
	oracle.CopyTree(t, b.src, stage)
	r.before = treeFiles(t, stage)
	if err := os.Rename(stage, r.path); err != nil {
		t.Fatal(err)
	}
}

// start starts daemon name with workers workers under the base's policy
// and natsBlock (without the policies line), with env.
func (b *partsKillBase) start(t *testing.T, bin string, r *partsKillRun, name, natsBlock string, workers int, env ...string) *daemonProc {
	cfg := writeWorkersConfig(t, r.root, name, r.tables, fmt.Sprintf("policies = %q\n%s", b.partsPolicyDir, natsBlock), freeAddr(t), workers)
	return startDaemonProcEnv(t, bin, name, cfg, filepath.Join(r.root, name), env...)
}

// startCoordinator starts daemon a (natsBlock, workers, env), then places
// the table, and waits until a coordinates it; the table's range stays
// a's home (newRun), so the daemons started after it only work.
func (b *partsKillBase) startCoordinator(t *testing.T, bin string, r *partsKillRun, natsBlock string, workers int, env ...string) *daemonProc {
	a := b.start(t, bin, r, "a", natsBlock, workers, env...)
	waitUntil(t, 60*time.Second, "a running", func() bool { return a.has("lanced running", "", "") })
	b.place(t, r)
	waitCoordinating(t, a, r.path)
	return a
}

// embedded returns the nats blocks of the embedded server (on a) and of
// its clients.
func embedded(t *testing.T, root string) (server, client string) {
	addr := freeAddr(t)
	auth := natsAuth(t, root, "remap-parts-kill-password")
	return fmt.Sprintf("nats {\n  embedded = true\n  listen = %q\n%s}", addr, auth), fmt.Sprintf("nats {\n  url = \"nats://%s\"\n%s}", addr, auth)
}

// waitKilled waits until p dies and fails unless it died by SIGKILL.
func waitKilled(t *testing.T, p *daemonProc, point string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(300 * time.Second):
		t.Fatalf("%s was not killed at %s", p.name, point)
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s ended without kill -9: %v", p.name, p.cmd.ProcessState)
	}
}

// unfinished are the tasks with the key prefix that p started and did not
// finish.
func unfinished(p *daemonProc, prefix string) []string {
	var out []string
	for _, l := range p.snapshot() {
		k, _ := l["task_id"].(string)
		if l["msg"] == "task started" && strings.HasPrefix(k, prefix) && !p.has("task done", "task_id", k) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// rewriteCommitted reports whether one of procs committed a Rewrite that
// carried remap joins (more tasks than the rewrites alone).
func rewriteCommitted(procs ...*daemonProc) bool {
	for _, p := range procs {
		for _, l := range p.snapshot() {
			if n, _ := l["tasks"].(float64); l["msg"] == "version committed" && l["kind"] == "rewrite" && n >= 3 {
				return true
			}
		}
	}
	return false
}

// settle waits until one of procs committed the Rewrite with the joins
// and every task procs started ended, then stops them.
func settle(t *testing.T, procs ...*daemonProc) {
	t.Helper()
	waitUntil(t, 400*time.Second, "a Rewrite committed with the remap joins", func() bool { return rewriteCommitted(procs...) })
	waitUntil(t, 120*time.Second, "every task ended", func() bool { return tasksEnded(procs...) })
	time.Sleep(3 * time.Second) // what the last tasks returned is committed
	stopByTERM(t, 120*time.Second, procs...)
}

// doneOn fails t unless every task of keys was done by one of procs,
// exactly once over all of them.
func doneOn(t *testing.T, keys []string, procs ...*daemonProc) {
	t.Helper()
	for _, k := range keys {
		n := 0
		for _, p := range procs {
			for _, l := range p.snapshot() {
				if l["msg"] == "task done" && l["task_id"] == k {
					n++
				}
			}
		}
		if n != 1 {
			t.Fatalf("task %s done %d times on the surviving processes, want once", k, n)
		}
	}
}

// judge is what real Lance and the table's files say after the daemons:
// see the test's doc. wantOrphan requires an unreferenced file under
// _indices/ (what the killed process wrote). It returns the orphans.
func (b *partsKillBase) judge(t *testing.T, r *partsKillRun, wantOrphan bool) []string {
	t.Helper()
	uri := "file://" + r.path
	post := checkSameRowsFewerFragments(t, r.path, b.pre, b.digest, b.rows)
	b.checkIndices(t, r.path, post, "after the daemons")
	for i, q := range oracle.Queries(t, r.path, b.idOps) {
		checkThroughIndex(t, b.idOps[i], q.Plan)
		if want := b.idsBefore[i].IDs(); len(want) == 0 || !slices.Equal(q.IDs(), want) {
			t.Fatalf("%v: ids %v after the daemons, %v before", b.idOps[i]["where"], q.IDs(), want)
		}
	}
	if rc := partsRecall(t, r.path, b.qs); rc < b.recallBefore {
		t.Fatalf("recall@10 %.4f after the daemons, %.4f before", rc, b.recallBefore)
	}
	referencedWhole(t, uri)
	refData, refIdx := referencedFiles(t, uri), referencedIndexDirs(t, uri)
	var orphans []string
	for _, k := range treeFiles(t, r.path) {
		if !slices.Contains(r.before, k) && !refData[k] && !refIdx[filepath.ToSlash(filepath.Dir(k))] {
			orphans = append(orphans, k)
		}
	}
	if wantOrphan && !slices.ContainsFunc(orphans, func(k string) bool { return strings.HasPrefix(k, "_indices/") }) {
		t.Fatalf("no unreferenced index file left by the killed process: %v", orphans)
	}
	journaledOrphansCleaned(t, r.path, orphans, "")
	if d, n := rowsDigest(oracle.Scan(t, r.path, 0, nil)); n != b.rows || d != b.digest {
		t.Fatal("rows changed after cleanup")
	}
	referencedWhole(t, uri)
	oracle.RunOps(t, r.path, []oracle.Op{{"op": "delete", "where": "id = 5"}})
	if got := oracle.Inspect(t, r.path, 0).IndexNames(); !slices.Equal(got, b.wantIdx) {
		t.Fatalf("indices after real Lance's delete: %v", got)
	}
	return orphans
}

// checkIndices fails t unless real Lance lists both indices at path with
// the indexed and unindexed rows they had before (the policy keeps the
// appended rows out of a catch-up).
func (b *partsKillBase) checkIndices(t *testing.T, path string, post oracle.Report, when string) {
	t.Helper()
	if got := post.IndexNames(); !slices.Equal(got, b.wantIdx) {
		t.Fatalf("indices %s: %v", when, got)
	}
	for _, name := range b.wantIdx {
		x, y := b.pre.Index(t, name), post.Index(t, name)
		if y.IndexedRows != x.IndexedRows || y.UnindexedRows != x.UnindexedRows {
			t.Fatalf("%s %s: indexStats %d/%d, before %d/%d", name, when, y.IndexedRows, y.UnindexedRows, x.IndexedRows, x.UnindexedRows)
		}
	}
}

// killPart: b dies after the first remap part it runs wrote its piece.
func (b *partsKillBase) killPart(t *testing.T, bin string) {
	r := b.newRun(t)
	server, client := embedded(t, r.root)
	a := b.startCoordinator(t, bin, r, server, 1)
	pb := b.start(t, bin, r, "b", client, 2, "LANCED_FAILPOINT=remap.part:1")
	c := b.start(t, bin, r, "c", client, 1)
	waitKilled(t, pb, "remap.part")
	victims := unfinished(pb, "slice/remap/")
	if len(victims) == 0 {
		t.Fatalf("b died outside a remap part: %v", unfinished(pb, ""))
	}
	settle(t, a, c)
	doneOn(t, victims, a, c)
	orphans := b.judge(t, r, true)
	t.Logf("b killed in remap part(s) %v, done again on a/c; %d orphan file(s) journaled and removed: %v", victims, len(orphans), orphans)
}

// killJoin: the only worker (b) dies after the first join it runs wrote
// the joined segment; c starts after the kill.
func (b *partsKillBase) killJoin(t *testing.T, bin string) {
	r := b.newRun(t)
	server, client := embedded(t, r.root)
	a := b.startCoordinator(t, bin, r, server, 0)
	pb := b.start(t, bin, r, "b", client, 2, "LANCED_FAILPOINT=remap.written:1")
	waitKilled(t, pb, "remap.written")
	victims := unfinished(pb, "join/remap/")
	if len(victims) == 0 {
		t.Fatalf("b died outside a remap join: %v", unfinished(pb, ""))
	}
	if rewriteCommitted(a) {
		t.Fatal("a committed the Rewrite before b's join result could reach it")
	}
	c := b.start(t, bin, r, "c", client, 2)
	settle(t, a, c)
	doneOn(t, victims, c)
	orphans := b.judge(t, r, true)
	t.Logf("b killed after writing the joined segment of %v, joined again on c; %d orphan file(s) journaled and removed: %v", victims, len(orphans), orphans)
}

// killCoordinator: NATS runs here; a coordinates and dies once the join
// results are in, before the Rewrite commit; b or c takes over.
func (b *partsKillBase) killCoordinator(t *testing.T, bin string) {
	r := b.newRun(t)
	ns := natstest.Server(t)
	client := fmt.Sprintf("nats { url = %q }", ns.ClientURL())
	a := b.startCoordinator(t, bin, r, client, 1, "LANCED_FAILPOINT=remap.commit:1")
	pb := b.start(t, bin, r, "b", client, 2)
	c := b.start(t, bin, r, "c", client, 1)
	waitKilled(t, a, "remap.commit")
	joined := 0
	for _, p := range []*daemonProc{a, pb, c} {
		for _, l := range p.snapshot() {
			if k, _ := l["task_id"].(string); l["msg"] == "task done" && strings.HasPrefix(k, "join/remap/") {
				joined++
			}
		}
	}
	if joined < 2 || rewriteCommitted(a) {
		t.Fatalf("a killed with %d remap joins done (want both), Rewrite committed %v", joined, rewriteCommitted(a))
	}
	settle(t, pb, c)
	var commits []string
	for _, p := range []*daemonProc{pb, c} {
		for _, l := range p.snapshot() {
			if l["msg"] == "version committed" || l["msg"] == "task dropped at commit" {
				commits = append(commits, fmt.Sprintf("%s: %v %v tasks %v", p.name, l["msg"], l["kind"], l["tasks"]))
			}
		}
	}
	orphans := b.judge(t, r, false)
	t.Logf("coordinator a killed with %d joins done and the Rewrite not committed; then %v; %d orphan file(s) journaled and removed: %v", joined, commits, len(orphans), orphans)
}
