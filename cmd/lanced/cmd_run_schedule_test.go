package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonAppliesPolicySchedule: the daemon takes each table's debounce
// and maintenance windows from its policy (the config's events block is
// the default). Three real-Lance tables: appends (no schedule: the events
// block's 100ms), deletes_bitmap (schedule { debounce = "10s" }) and
// backfill (a window that opens at the next minute boundary, UTC). The
// first task of appends starts within seconds of the first sweep, that of
// deletes_bitmap not before 10s, and backfill gets no task until its window
// opens (the daemon logs when it will), then is maintained.
func TestDaemonAppliesPolicySchedule(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	a := "file://" + oracle.Build(t, "appends", tables)
	b := "file://" + oracle.Build(t, "deletes_bitmap", tables)
	c := "file://" + oracle.Build(t, "backfill", tables)
	// The window opens at a minute boundary at least 15s away.
	opens := time.Now().UTC().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute)
	closes := opens.Add(10 * time.Minute)
	window := fmt.Sprintf("%s-%s", opens.Format("15:04"), closes.Format("15:04"))
	pol := `table "**/deletes_bitmap.lance" {
  schedule {
    debounce  = "10s"
    max_delay = "30s"
  }
}
table "**/backfill.lance" {
  schedule {
    windows = ["` + window + `"]
  }
}
`
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "policies", "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeTestDaemonConfig(t, root, "")
	logs, stop := startInProcessDaemon(t, "--config", cfgPath)
	defer stop()

	// policy explain with the daemon's config gives the same answer.
	out := runCLI(t, "policy", "explain", b, "--no-table", "--config", cfgPath)
	for _, want := range []string{"schedule.debounce", " 10s ", `table "**/deletes_bitmap.lance"`} {
		if !contains(out, want) {
			t.Errorf("explain %s lacks %q:\n%s", b, want, out)
		}
	}
	out = runCLI(t, "policy", "explain", a, "--no-table", "--config", cfgPath)
	if !contains(out, " 100ms ") || !contains(out, "daemon config (events block of "+cfgPath+")") {
		t.Errorf("explain %s: want debounce 100ms from the events block:\n%s", a, out)
	}

	logTime := func(l map[string]any) time.Time {
		ts, _ := l["time"].(string)
		v, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("log time %q: %v", ts, err)
		}
		return v
	}
	started := func(uri string) map[string]any {
		return logs.find("task started", func(l map[string]any) bool { return l["table"] == uri })
	}
	sweepLine := func() map[string]any {
		for _, l := range logs.lines() {
			if n, _ := l["tables"].(float64); n == 3 && l["root"] != nil {
				return l
			}
		}
		return nil
	}
	waitUntil(t, 60*time.Second, "the first sweep finding 3 tables", func() bool { return sweepLine() != nil })
	sweep := logTime(sweepLine())
	waitUntil(t, 60*time.Second, "appends and deletes_bitmap maintained", func() bool { return started(a) != nil && started(b) != nil })
	ta, tb := logTime(started(a)), logTime(started(b))
	if d := tb.Sub(sweep); d < 9*time.Second {
		t.Errorf("deletes_bitmap's first task %v after it was found; its policy's debounce is 10s", d)
	}
	if d := ta.Sub(sweep); d >= 9*time.Second {
		t.Errorf("appends' first task %v after the sweep; the events block's debounce is 100ms", d)
	}
	if w := logs.find("table waits for its maintenance window", func(l map[string]any) bool { return l["table"] == c }); w == nil || w["opens_at"] != opens.Format(time.RFC3339) {
		t.Errorf("no wait logged for %s until %s: %v", c, opens.Format(time.RFC3339), w)
	}
	if l := started(c); l != nil {
		t.Fatalf("backfill maintained at %v, before its window opens at %v", logTime(l), opens)
	}
	waitUntil(t, time.Until(opens)+60*time.Second, "backfill maintained once its window opens", func() bool { return started(c) != nil })
	if at := logTime(started(c)); at.Before(opens) {
		t.Fatalf("backfill's first task at %v, before its window opens at %v", at, opens)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
