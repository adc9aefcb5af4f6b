package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadinessWaitsForEveryRoot: a root that cannot be listed keeps
// /readyz failing (naming the root), logs an error and counts an error
// sweep on every sweep; an empty root logs "root X: 0 tables" at start-up.
// Once the missing root exists and is swept, /readyz is ok. A daemon
// asked to stop while a root has never been swept stops at once (it
// waited up to 30s for start-up before).
func TestReadinessWaitsForEveryRoot(t *testing.T) {
	dir := t.TempDir()
	missing, empty := filepath.Join(dir, "missing"), filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "lanced.hcl")
	if err := os.WriteFile(cfg, []byte(`tables    = ["`+missing+`", "`+empty+`"]
state_dir = "`+filepath.Join(dir, "state")+`"
http { listen = "`+addr+`" }
source "poll" { interval = "500ms" }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, stop := startInProcessDaemon(t, "--config", cfg)
	defer stop()
	base := "http://" + addr
	waitUntil(t, 60*time.Second, "two failed sweeps of the missing root", func() bool {
		return countMsg(logs, "poll sweep failed: root cannot be listed") >= 2
	})
	if code, body := httpGet(base + "/readyz"); code == 200 || !strings.Contains(body, "file://"+missing) {
		t.Fatalf("/readyz with a root never listed: %d %s", code, body)
	}
	if logs.find("root file://"+empty+": 0 tables", nil) == nil {
		t.Errorf("no 'root %s: 0 tables' line", empty)
	}
	_, metrics := httpGet(base + "/metrics")
	if !strings.Contains(metrics, `lanced_watch_poll_sweeps_total{outcome="error"}`) {
		t.Errorf("no error sweeps counted in /metrics")
	}
	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "/readyz ok once every root was listed", func() bool {
		code, _ := httpGet(base + "/readyz")
		return code == 200
	})
	stop()

	// Stopped during start-up: a root that is never listed.
	if err := os.RemoveAll(missing); err != nil {
		t.Fatal(err)
	}
	logs, stop = startInProcessDaemon(t, "--config", cfg)
	waitUntil(t, 60*time.Second, "a failed sweep", func() bool {
		return countMsg(logs, "poll sweep failed: root cannot be listed") > 0
	})
	began := time.Now()
	stop()
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("stopping during start-up took %v", took)
	}
}

// countMsg counts the log records with message msg.
func countMsg(logs *syncBuffer, msg string) int {
	n := 0
	for _, l := range logs.lines() {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}
