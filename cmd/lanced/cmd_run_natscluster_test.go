package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// unfinishedTask is a task p started and has not finished, or "".
func unfinishedTask(p *daemonProc) string {
	started, finished := map[string]bool{}, map[string]bool{}
	for _, l := range p.snapshot() {
		id, _ := l["task_id"].(string)
		switch l["msg"] {
		case "task started":
			started[id] = true
		case "task done", "task ended", "task handed back", "task failed, retrying":
			finished[id] = true
		}
	}
	for id := range started {
		if !finished[id] {
			return id
		}
	}
	return ""
}

// coordinating reports whether p has a coordinator running.
func coordinating(p *daemonProc) bool {
	open := map[string]bool{}
	for _, l := range p.snapshot() {
		tb, _ := l["table"].(string)
		switch l["msg"] {
		case "coordinator started":
			open[tb] = true
		case "coordinator stopped":
			delete(open, tb)
		}
	}
	return len(open) > 0
}

// committedAfter reports whether any process committed table at a version
// above v.
func committedAfter(procs []*daemonProc, table string, v uint64) bool {
	for _, p := range procs {
		for _, l := range p.snapshot() {
			if l["msg"] == "version committed" && l["table"] == table {
				if ver, _ := l["version"].(float64); uint64(ver) > v {
					return true
				}
			}
		}
	}
	return false
}

func tableDigest(t *testing.T, uri string, version uint64) (string, int) {
	t.Helper()
	tbl := oracle.Scan(t, uri, version, nil)
	defer tbl.Release()
	return oracle.RowSetDigest(tbl)
}

// TestThreeDaemonsOnThreeNodeNATSCluster runs three `lanced run` processes,
// each connected to a different node of a three-node nats-server cluster
// (separate processes, JetStream with R3 streams and KV buckets), over
// real-Lance tables. It kills -9 a daemon in the middle of a task while it
// coordinates a table, then kills -9 a NATS node, writes more with real
// Lance, restarts the NATS node and the daemon, writes again, and checks:
// work spread over all three daemons, the killed daemon's task and leases
// taken over, no task lost (every started task finished somewhere, queue
// streams drained, nothing dead-lettered), no table version committed twice,
// no table coordinated by two daemons at once, the restarted NATS node
// caught up, and real Lance reads the rows it wrote.
func TestThreeDaemonsOnThreeNodeNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three nats-server and three daemon processes")
	}
	oracle.Require(t)
	root := t.TempDir()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Tables are built aside and moved in once every daemon runs, so all
	// three compete for the first tasks.
	const nTables = 12
	staging, tables := filepath.Join(root, "staging"), filepath.Join(root, "tables")
	uris, built := stageTables(t, staging, tables, nTables)

	nodes := natsCluster(t, filepath.Join(root, "nats"), 3, "")
	for _, nn := range nodes {
		waitJetStream(t, nn.url())
	}
	cfgs := make([]string, 3)
	procs := make([]*daemonProc, 3)
	for i := range 3 {
		name := fmt.Sprintf("l%d", i)
		cfgs[i] = writeProcConfig(t, root, name, tables, fmt.Sprintf("nats {\n  url = %q\n}", nodes[i].url()), "replicas = 3", "")
		procs[i] = startDaemonProc(t, bin, name, cfgs[i], filepath.Join(root, name))
	}
	for _, p := range procs {
		waitRunning(t, p)
	}
	for i := range nTables {
		name := fmt.Sprintf("t%d", i)
		if err := os.Rename(filepath.Join(staging, name), filepath.Join(tables, name)); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Kill -9 a daemon in the middle of a task while it coordinates.
	victim, killedAt := killCoordinatorMidTask(t, procs)
	vp := procs[victim]
	waitUntil(t, 120*time.Second, "every table compacted", func() bool {
		for _, uri := range uris {
			if !committedAfter(procs, "file://"+uri, 0) {
				return false
			}
		}
		return true
	})
	for i, uri := range uris {
		waitCompacted(t, uri, 1200)
		if d, _ := tableDigest(t, uri, 0); d != built[i] {
			t.Errorf("%s: rows after compaction differ from the rows real Lance wrote", uri)
		}
	}

	// 2. Kill -9 the NATS node a live daemon is connected to; real Lance
	// writes more; the daemons carry on with two NATS nodes of three.
	k := (victim + 1) % 3
	nodes[k].kill9(t)
	t.Logf("killed nats node %s (daemon %s's server)", nodes[k].name, procs[k].name)
	wrote := make([]uint64, nTables)
	for i := range nTables / 2 {
		wrote[i] = appendThreeBatches(t, uris[i], 100+10*i)
	}
	waitUntil(t, 60*time.Second, procs[k].name+" reconnected to another NATS node", func() bool {
		return procs[k].has("nats reconnected", "", "")
	})
	for i := range nTables / 2 {
		waitUntil(t, 120*time.Second, "commit after the writes with a NATS node down", func() bool {
			return committedAfter(procs, "file://"+uris[i], wrote[i])
		})
	}

	// 3. Heal: restart the NATS node and the killed daemon; write again.
	nodes[k].start(t)
	waitJetStream(t, nodes[k].url())
	restarted := startDaemonProc(t, bin, vp.name, cfgs[victim], vp.state)
	waitRunning(t, restarted)
	all := append(append([]*daemonProc{}, procs...), restarted)
	for i := nTables / 2; i < nTables; i++ {
		wrote[i] = appendThreeBatches(t, uris[i], 100+10*i)
	}
	for i := range nTables {
		waitUntil(t, 120*time.Second, "commit after the last writes", func() bool {
			return committedAfter(all, "file://"+uris[i], wrote[i])
		})
	}
	for i, uri := range uris {
		waitCompacted(t, uri, 1500)
		want, _ := tableDigest(t, uri, wrote[i])
		if got, _ := tableDigest(t, uri, 0); got != want {
			t.Errorf("%s: rows after compaction differ from real Lance's version %d", uri, wrote[i])
		}
	}

	checkClusterHealed(t, nodes[k].url())
	started, committed := checkEveryTaskFinishedOnce(t, procs, all)
	// No table coordinated by two daemons at once.
	now := time.Now()
	ends := map[*daemonProc]time.Time{restarted: now}
	for i, p := range procs {
		ends[p] = now
		if i == victim {
			ends[p] = killedAt
		}
	}
	assertNoCoordinatorOverlap(t, ends)
	t.Logf("%d tasks, %d commits over %d tables", started, committed, nTables)
}

// waitRunning waits until p logs that it runs.
func waitRunning(t *testing.T, p *daemonProc) {
	t.Helper()
	waitUntil(t, 60*time.Second, p.name+" running", func() bool { return p.has("lanced running", "", "") })
}

// stageTables builds n real-Lance "appends" tables t0..t(n-1) under
// staging and returns the URIs they will have once moved under tables
// (created here) and their row digests.
func stageTables(t *testing.T, staging, tables string, n int) (uris, digests []string) {
	t.Helper()
	if err := os.MkdirAll(tables, 0o755); err != nil {
		t.Fatal(err)
	}
	uris, digests = make([]string, n), make([]string, n)
	for i := range n {
		src := oracle.Build(t, "appends", filepath.Join(staging, fmt.Sprintf("t%d", i)))
		digests[i], _ = tableDigest(t, src, 0)
		rel, err := filepath.Rel(staging, src)
		if err != nil {
			t.Fatal(err)
		}
		uris[i] = filepath.Join(tables, rel)
	}
	return uris, digests
}

// anyProcHas reports whether any of ps logged msg (with key = val).
func anyProcHas(ps []*daemonProc, msg, key, val string) bool {
	for _, p := range ps {
		if p.has(msg, key, val) {
			return true
		}
	}
	return false
}

// killCoordinatorMidTask kills -9 a daemon of procs while it runs a task
// and coordinates a table, then waits until the others finish its task and
// take over its lease. It returns the victim's index and the kill's time.
func killCoordinatorMidTask(t *testing.T, procs []*daemonProc) (int, time.Time) {
	t.Helper()
	victim, victimTask := -1, ""
	waitUntil(t, 60*time.Second, "a daemon running a task while coordinating a table", func() bool {
		for i, p := range procs {
			if id := unfinishedTask(p); id != "" && coordinating(p) {
				victim, victimTask = i, id
				return true
			}
		}
		return false
	})
	vp := procs[victim]
	killedAt := time.Now()
	if err := vp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-vp.done
	if vp.has("task done", "task_id", victimTask) {
		t.Fatalf("victim task %s finished before the kill; the test proves nothing", victimTask)
	}
	t.Logf("killed %s during task %s", vp.name, victimTask)
	var live []*daemonProc
	for i, p := range procs {
		if i != victim {
			live = append(live, p)
		}
	}
	waitUntil(t, 60*time.Second, "the killed daemon's task "+victimTask+" finished elsewhere", func() bool {
		return anyProcHas(live, "task done", "task_id", victimTask)
	})
	waitUntil(t, 60*time.Second, "the killed daemon's lease taken over", func() bool {
		return anyProcHas(live, "lease taken over", "previous_holder", vp.name)
	})
	return victim, killedAt
}

// appendThreeBatches has real Lance append three batches of 100 rows to
// uri (seeds seed, seed+1, seed+2) and returns the last version written.
func appendThreeBatches(t *testing.T, uri string, seed int) uint64 {
	t.Helper()
	res := oracle.RunOps(t, uri, []oracle.Op{
		{"op": "add", "rows": 100, "seed": seed}, {"op": "add", "rows": 100, "seed": seed + 1}, {"op": "add", "rows": 100, "seed": seed + 2},
	})
	var last struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(res[len(res)-1], &last); err != nil || last.Version == 0 {
		t.Fatalf("add result %s: %v", res[len(res)-1], err)
	}
	return last.Version
}

// checkClusterHealed: seen from the NATS node at url, every stream and
// bucket has three current replicas, the work queues drained, nothing was
// dead-lettered.
func checkClusterHealed(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streamInfo := func(name string) *jetstream.StreamInfo {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil
		}
		return info
	}
	for _, name := range []string{scheduler.TasksStream, scheduler.ResultsStream, scheduler.DeadStream, "KV_" + scheduler.LeaseBucket} {
		waitUntil(t, 60*time.Second, name+" replicated on three current nodes", func() bool {
			info := streamInfo(name)
			if info == nil || info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return false
				}
			}
			return true
		})
	}
	waitUntil(t, 60*time.Second, "task and result queues drained", func() bool {
		ti, ri := streamInfo(scheduler.TasksStream), streamInfo(scheduler.ResultsStream)
		return ti != nil && ri != nil && ti.State.Msgs == 0 && ri.State.Msgs == 0
	})
	if di := streamInfo(scheduler.DeadStream); di == nil || di.State.Msgs != 0 {
		t.Errorf("dead-letter stream: %+v, want empty", di)
	}
}

// checkEveryTaskFinishedOnce: each of procs executed a task; every task
// started by any of all finished somewhere; no table version was committed
// twice. It returns the counts of tasks started and versions committed.
func checkEveryTaskFinishedOnce(t *testing.T, procs, all []*daemonProc) (int, int) {
	t.Helper()
	for _, p := range procs {
		if !p.has("task started", "", "") {
			t.Errorf("daemon %s executed nothing", p.name)
		}
	}
	finished := map[string]bool{}
	started := map[string]string{}
	committed := map[string]string{}
	for _, p := range all {
		for _, l := range p.snapshot() {
			id, _ := l["task_id"].(string)
			switch l["msg"] {
			case "task started":
				started[id] = p.name
			case "task done", "task ended":
				finished[id] = true
			case "version committed":
				key := fmt.Sprintf("%v@%v", l["table"], l["version"])
				if prev, ok := committed[key]; ok {
					t.Errorf("version %s committed twice (by %s and %s)", key, prev, p.name)
				}
				committed[key] = p.name
			}
		}
	}
	for id, who := range started {
		if !finished[id] {
			t.Errorf("task %s (started on %s) never finished", id, who)
		}
	}
	return len(started), len(committed)
}

// waitCompacted waits until real Lance sees uri as one fragment and checks
// its row count.
func waitCompacted(t *testing.T, uri string, rows int64) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		rep := oracle.Inspect(t, uri, 0)
		if rep.Fragments == 1 {
			if rep.Rows != rows {
				t.Errorf("%s: %d rows after compaction, want %d", uri, rep.Rows, rows)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d fragments after 120s, want 1", uri, rep.Fragments)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
