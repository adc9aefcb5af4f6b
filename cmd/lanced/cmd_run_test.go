package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/scheduler"
)

// syncBuffer collects the daemon's JSON log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the parsed log records so far.
func (b *syncBuffer) lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (b *syncBuffer) find(msg string, match func(map[string]any) bool) map[string]any {
	for _, l := range b.lines() {
		if l["msg"] == msg && (match == nil || match(l)) {
			return l
		}
	}
	return nil
}

// copyRealTable builds a table directory from manifests real Lance wrote
// (internal/format/testdata): the daemon's inspect workload reads them.
func copyRealTable(t *testing.T, fixture, dest string) {
	t.Helper()
	src := filepath.Join("..", "..", "internal", "format", "testdata", fixture)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dest, "_versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".manifest") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dest, "_versions", e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

func TestDaemonMaintainsTablesHoldsCorruptOnesAndReloadsPolicies(t *testing.T) {
	root := t.TempDir()
	tables, policies, cfgPath, addr := maintainTestSetup(t, root)
	state := filepath.Join(root, "state")
	notify := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "400000") // WATCHDOG=1 every 200ms
	t.Setenv("WATCHDOG_PID", "")

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, []string{"--config", cfgPath, "--workload", "inspect"}, &logs, &logs) }()
	stopped := false
	defer func() {
		if stopped {
			return
		}
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("daemon did not stop")
		}
	}()

	checkReadyAndWatchdog(t, notify, addr)
	checkReportsHoldAndMetrics(t, &logs, tables, state, addr)
	checkPolicyReloads(t, &logs, policies, addr)

	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("daemon exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		ls := logs.lines()
		for _, l := range ls[max(0, len(ls)-15):] {
			t.Log(l)
		}
		t.Fatal("daemon did not drain")
	}
	if logs.find("lanced stopped", nil) == nil {
		t.Fatal("no clean stop logged")
	}
}

// maintainTestSetup writes the daemon test's tables (two real ones and a
// corrupt one), its policy directory and its config; it returns the
// tables and policy directories, the config path and the HTTP address.
func maintainTestSetup(t *testing.T, root string) (tables, policies, cfgPath, addr string) {
	tables = filepath.Join(root, "tables")
	copyRealTable(t, "appends_v2", filepath.Join(tables, "good.lance"))
	copyRealTable(t, "bitmap_v1", filepath.Join(tables, "v1.lance"))
	if err := os.MkdirAll(filepath.Join(tables, "bad.lance", "_versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tables, "bad.lance", "_versions", "3.manifest"), []byte("not a lance manifest, but long enough to have a footer"), 0o644); err != nil {
		t.Fatal(err)
	}
	policies = filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	good := "defaults {\n  enabled = true\n}\n"
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	addr = freeAddr(t)
	cfgPath = filepath.Join(root, "lanced.hcl")
	cfg := fmt.Sprintf(`
state_dir = "state"
tables    = ["tables"]
policies  = "policies"
workers   = 2
source "poll" { interval = "1s" }
events {
  debounce  = "100ms"
  max_delay = "500ms"
}
queue {
  commit_max_wait = "200ms"
  drain_timeout   = "5s"
}
http { listen = %q }
`, addr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return tables, policies, cfgPath, addr
}

// checkReadyAndWatchdog checks sd_notify READY=1, /readyz after it, then
// WATCHDOG=1, keeps reading notifications as systemd does, and checks
// /healthz.
func checkReadyAndWatchdog(t *testing.T, notify *net.UnixConn, addr string) {
	if got := readNotify(t, notify, 20*time.Second); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first sd_notify message %q", got)
	}
	if code, body := httpGet("http://" + addr + "/readyz"); code != 200 {
		t.Fatalf("/readyz after READY=1: %d %s", code, body)
	}
	if got := readNotify(t, notify, 5*time.Second); got != "WATCHDOG=1" {
		t.Fatalf("sd_notify after READY: %q, want WATCHDOG=1", got)
	}
	go func() { // keep reading, as systemd does
		buf := make([]byte, 4096)
		for {
			_ = notify.SetReadDeadline(time.Time{})
			if _, err := notify.Read(buf); err != nil {
				return
			}
		}
	}()
	if code, _ := httpGet("http://" + addr + "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}

}

// checkReportsHoldAndMetrics checks that both good tables get a report at
// their latest version, the corrupt table is held (gauge and a log line
// naming the manifest), the metrics count the tasks and commits, and task
// log lines carry the fixed keys.
func checkReportsHoldAndMetrics(t *testing.T, logs *syncBuffer, tables, state, addr string) {
	reports := filepath.Join(state, "reports")
	for table, version := range map[string]float64{"good.lance": 6, "v1.lance": 2} {
		uri := "file://" + filepath.Join(tables, table)
		path := filepath.Join(reports, scheduler.TableID(uri)+".json")
		waitUntil(t, 20*time.Second, "report of "+table, func() bool {
			_, err := os.Stat(path)
			return err == nil
		})
		var rep map[string]any
		b, _ := os.ReadFile(path)
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep["version"] != version || rep["table"] != uri {
			t.Fatalf("report %s", b)
		}
	}
	// The corrupt table is held (gauge), the others were maintained.
	badURI := "file://" + filepath.Join(tables, "bad.lance")
	waitUntil(t, 20*time.Second, "bad table held", func() bool {
		_, body := httpGet("http://" + addr + "/metrics")
		return strings.Contains(body, fmt.Sprintf("lanced_table_held{table=%q} 1", badURI))
	})
	held := logs.find("table held", func(l map[string]any) bool { return l["table"] == badURI })
	if held == nil || !strings.Contains(fmt.Sprint(held["err"]), "_versions/3.manifest") {
		t.Fatalf("held log line %v does not name the manifest", held)
	}
	waitUntil(t, 10*time.Second, "commits", func() bool {
		_, body := httpGet("http://" + addr + "/metrics")
		return strings.Contains(body, `lanced_scheduler_commits_total{outcome="done"} 2`)
	})
	_, metrics := httpGet("http://" + addr + "/metrics")
	for _, want := range []string{
		`lanced_scheduler_tasks_total{kind="inspect",outcome="done"}`,
		`lanced_scheduler_tasks_total{kind="inspect",outcome="corrupt"} 1`,
		"lanced_scheduler_queue_depth",
		`lanced_scheduler_commits_total{outcome="done"}`,
		"lanced_watch_",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Task log lines carry the fixed keys.
	doneLine := logs.find("task done", nil)
	for _, k := range []string{"table", "task_id", "kind", "read_version", "attempt", "duration_ms"} {
		if doneLine == nil || doneLine[k] == nil {
			t.Fatalf("task done line %v lacks %q", doneLine, k)
		}
	}

}

// checkPolicyReloads checks that a bad policy edit keeps the old set and
// says where the problem is, a good edit is applied, and SIGHUP reloads.
func checkPolicyReloads(t *testing.T, logs *syncBuffer, policies, addr string) {
	bad := "defaults {\n  enabled = \"maybe\"\n}\n"
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reload rejected", func() bool {
		return logs.find("policy reload rejected, keeping previous policies", func(l map[string]any) bool {
			return strings.HasPrefix(fmt.Sprint(l["at"]), filepath.Join(policies, "p.hcl")+":2:")
		}) != nil
	})
	if code, _ := httpGet("http://" + addr + "/readyz"); code != 200 {
		t.Fatal("a rejected policy edit made the daemon unready")
	}
	// A good edit is applied.
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte("defaults {\n  enabled = false\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reload applied", func() bool { return logs.find("policies reloaded", nil) != nil })
	// SIGHUP reloads too (systemctl reload).
	count := func() int {
		n := 0
		for _, l := range logs.lines() {
			if l["msg"] == "policies reloaded" {
				n++
			}
		}
		return n
	}
	time.Sleep(time.Second) // let fsnotify's settle timer pass
	before := count()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "reload on SIGHUP", func() bool { return count() > before })

}

// execMainEnv makes the test binary act as the lanced binary, so tests can
// start real daemon processes without a separate build.
const execMainEnv = "LANCED_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	if cfg := os.Getenv(natsServerEnv); cfg != "" {
		os.Exit(runTestNATSServer(cfg))
	}
	os.Exit(m.Run())
}
