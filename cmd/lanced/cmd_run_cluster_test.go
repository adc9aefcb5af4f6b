package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// daemonProc is one `lanced run` OS process with its JSON log.
type daemonProc struct {
	name  string
	cmd   *exec.Cmd
	state string
	mu    sync.Mutex
	logs  []map[string]any
	done  chan struct{}
}

func startDaemonProc(t *testing.T, bin, name, cfgPath, state string) *daemonProc {
	t.Helper()
	return startDaemonProcEnv(t, bin, name, cfgPath, state)
}

// homeTablePath returns dir/<base>-<i>.lance for the first i whose
// table's lease range has node as its home whichever of others are live
// too (scheduler.HomeNode, on the URI the watch reports): lanced run
// keeps home ranges, so node takes the table's range and keeps
// coordinating the table while the others join and leave (a range whose
// home moved to a node that joined is handed to it).
func homeTablePath(dir, base, node string, others ...string) string {
	for i := 0; ; i++ {
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.lance", base, i))
		home := true
		for mask := range 1 << len(others) {
			live := []string{node}
			for j, o := range others {
				if mask&(1<<j) != 0 {
					live = append(live, o)
				}
			}
			home = home && scheduler.HomeNode("file://"+path, live) == node
		}
		if home {
			return path
		}
	}
}

// waitCoordinating waits until p started a coordinator and fails t
// unless it started one for the table at path (whose URI picks the
// table's home node, see homeTablePath).
func waitCoordinating(t *testing.T, p *daemonProc, path string) {
	t.Helper()
	waitUntil(t, 60*time.Second, p.name+" coordinating the table", func() bool { return p.has("coordinator started", "", "") })
	if uri := "file://" + path; !p.has("coordinator started", "table", uri) {
		var got []any
		for _, l := range p.snapshot() {
			if l["msg"] == "coordinator started" {
				got = append(got, l["table"])
			}
		}
		t.Fatalf("%s coordinates %v, not %s", p.name, got, uri)
	}
}

// daemonProcsTest readies a test that runs daemon processes on tables
// real Lance builds: it is skipped under -short and without real Lance.
// It returns the binary startDaemonProc runs (this test binary) and a
// new root directory with the subdirectories dirs made.
func daemonProcsTest(t *testing.T, dirs ...string) (bin, root string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs several daemon processes")
	}
	oracle.Require(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, root
}

// startDaemonProcEnv is startDaemonProc with extra environment variables.
func startDaemonProcEnv(t *testing.T, bin, name, cfgPath, state string, env ...string) *daemonProc {
	t.Helper()
	p := &daemonProc{name: name, state: state, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "run", "--config", cfgPath, "--node-id", name, "--debug-task-delay", "1500ms")
	p.cmd.Env = append(append(os.Environ(), execMainEnv+"=1"), env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"msg": "raw", "line": sc.Text()}
			}
			m["_at"] = time.Now()
			p.mu.Lock()
			p.logs = append(p.logs, m)
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			p.mu.Lock()
			for _, l := range p.logs {
				t.Logf("%s: %v", p.name, l)
			}
			p.mu.Unlock()
		}
	})
	return p
}

func (p *daemonProc) snapshot() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.logs...)
}

func (p *daemonProc) has(msg, key, val string) bool {
	for _, l := range p.snapshot() {
		if l["msg"] == msg && (key == "" || l[key] == val) {
			return true
		}
	}
	return false
}

// stopByTERM sends SIGTERM to every process and waits up to d for each
// to exit (the test's cleanup kills one that does not).
func stopByTERM(t *testing.T, d time.Duration, procs ...*daemonProc) {
	t.Helper()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(d):
			t.Fatalf("%s did not stop within %v of SIGTERM", p.name, d)
		}
	}
}

func TestTwoDaemonProcessesShareWorkAndSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two daemon processes")
	}
	root := t.TempDir()
	bin, err := os.Executable() // the test binary runs lanced's main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	oracle.Require(t)
	tables := filepath.Join(root, "tables")
	const nTables = 8
	var uris []string
	for i := range nTables {
		uris = append(uris, oracle.Build(t, "appends", filepath.Join(tables, fmt.Sprintf("t%d", i))))
	}
	natsAddr := freeAddr(t)
	// The embedded listener requires a user; both nodes use it.
	pwFile := filepath.Join(root, "nats.pass")
	if err := os.WriteFile(pwFile, []byte("two-daemon-test-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := fmt.Sprintf("  user = \"lanced\"\n  password_file = %q\n", pwFile)
	cfgA := writeProcConfig(t, root, "a", tables, fmt.Sprintf("nats {\n  embedded = true\n  listen = %q\n%s}", natsAddr, auth), "", "")
	cfgB := writeProcConfig(t, root, "b", tables, fmt.Sprintf("nats {\n  url = \"nats://%s\"\n%s}", natsAddr, auth), "", "")

	a := startDaemonProc(t, bin, "a", cfgA, filepath.Join(root, "a"))
	waitUntil(t, 30*time.Second, "a running", func() bool { return a.has("lanced running", "", "") })
	b := startDaemonProc(t, bin, "b", cfgB, filepath.Join(root, "b"))
	waitUntil(t, 30*time.Second, "b running", func() bool { return b.has("lanced running", "", "") })

	// Kill -9 b while it is in the middle of a task.
	var victim string
	waitUntil(t, 30*time.Second, "b to start a task", func() bool {
		victim = unfinishedTask(b)
		return victim != ""
	})
	killedAt := time.Now()
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.done
	for _, l := range b.snapshot() {
		if l["msg"] == "task done" && l["task_id"] == victim {
			t.Fatalf("victim task %s finished before the kill; the test proves nothing", victim)
		}
	}

	// a finishes the victim task and every table gets inspected.
	waitUntil(t, 60*time.Second, "a to finish b's task "+victim, func() bool { return a.has("task done", "task_id", victim) })
	waitUntil(t, 90*time.Second, "every table compacted", func() bool {
		for _, uri := range uris {
			if !a.has("version committed", "table", "file://"+uri) && !b.has("version committed", "table", "file://"+uri) {
				return false
			}
		}
		return true
	})
	// Real Lance judges: every table compacted to one fragment, no row lost.
	for _, uri := range uris {
		rep := oracle.Inspect(t, uri, 0)
		if rep.Rows != 1200 || rep.Fragments != 1 {
			t.Errorf("%s: %d rows in %d fragments after the daemons, want 1200 in 1", uri, rep.Rows, rep.Fragments)
		}
	}
	// Work was spread: both processes executed tasks.
	for _, p := range []*daemonProc{a, b} {
		if !p.has("task started", "", "") {
			t.Errorf("process %s executed nothing", p.name)
		}
	}
	// No table was coordinated by both at once (b's spans end at the kill).
	assertNoCoordinatorOverlap(t, map[*daemonProc]time.Time{a: time.Now(), b: killedAt})
}

// writeProcConfig writes the config of one daemon process of the
// multi-process tests: state under root/name, the tables directory, a fast
// poll and debounce, short leases, HTTP on httpAddr ("" disables it);
// natsBlock configures NATS and queueExtra is added to the queue block. It
// returns the config path.
func writeProcConfig(t *testing.T, root, name, tables, natsBlock, queueExtra, httpAddr string) string {
	t.Helper()
	cfg := fmt.Sprintf(`
state_dir = %q
tables    = [%q]
workers   = 2
%s
source "poll" { interval = "1s" }
events {
  debounce  = "50ms"
  max_delay = "200ms"
}
queue {
  ack_wait        = "2s"
  lease_ttl       = "3s"
  drain_timeout   = "2s"
  commit_max_wait = "200ms"
  %s
}
http { listen = %q }
`, filepath.Join(root, name), tables, natsBlock, queueExtra, httpAddr)
	path := filepath.Join(root, name+".hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeWorkersConfig is writeProcConfig with the given number of workers
// (writeProcConfig writes 2).
func writeWorkersConfig(t *testing.T, root, name, tables, natsBlock, httpAddr string, workers int) string {
	t.Helper()
	p := writeProcConfig(t, root, name, tables, natsBlock, "", httpAddr)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "workers   = 2") {
		t.Fatalf("%s: no workers line to replace:\n%s", p, data)
	}
	data = []byte(strings.Replace(string(data), "workers   = 2", fmt.Sprintf("workers   = %d", workers), 1))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// natsAuth writes password to a file under root and returns the user and
// password_file lines of a nats block that use it.
func natsAuth(t *testing.T, root, password string) string {
	t.Helper()
	pwFile := filepath.Join(root, "nats.pass")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("  user = \"lanced\"\n  password_file = %q\n", pwFile)
}

type span struct{ from, to time.Time }

// coordinatorSpans are the intervals in which p coordinated each table, from
// its "coordinator started/stopped" logs; spans still open end at end.
func coordinatorSpans(p *daemonProc, end time.Time) map[string][]span {
	out := map[string][]span{}
	open := map[string]time.Time{}
	for _, l := range p.snapshot() {
		tb, _ := l["table"].(string)
		at := l["_at"].(time.Time)
		switch l["msg"] {
		case "coordinator started":
			open[tb] = at
		case "coordinator stopped":
			// A coordinator that failed to open its results (NATS down)
			// stops without having started: no span.
			if from, ok := open[tb]; ok {
				out[tb] = append(out[tb], span{from, at})
				delete(open, tb)
			}
		}
	}
	for tb, from := range open {
		out[tb] = append(out[tb], span{from, end})
	}
	return out
}

// assertNoCoordinatorOverlap fails when two processes coordinated one table
// at the same time. ends gives each process the time its open spans end
// (its kill, or now).
func assertNoCoordinatorOverlap(t *testing.T, ends map[*daemonProc]time.Time) {
	t.Helper()
	var procs []*daemonProc
	spans := map[*daemonProc]map[string][]span{}
	for p, end := range ends {
		procs = append(procs, p)
		spans[p] = coordinatorSpans(p, end)
	}
	for i, p := range procs {
		for _, q := range procs[i+1:] {
			for tb, ps := range spans[p] {
				for _, x := range ps {
					for _, y := range spans[q][tb] {
						// Log lines are stamped when read, so allow a little slack.
						if x.from.Before(y.to.Add(-100*time.Millisecond)) && y.from.Before(x.to.Add(-100*time.Millisecond)) {
							t.Errorf("table %s coordinated by %s %v–%v and by %s %v–%v", tb, p.name, x.from, x.to, q.name, y.from, y.to)
						}
					}
				}
			}
		}
	}
}
