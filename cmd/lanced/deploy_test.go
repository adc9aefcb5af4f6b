package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

var metricName = regexp.MustCompile(`\blanced_[a-z0-9_]+`)

// dashboardQueries returns every PromQL expression of the Grafana dashboard
// (panel targets and template variable queries).
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../deploy/grafana/lanced-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		out = append(out, v.Definition)
	}
	return out
}

// TestDeployDashboardAndRulesMatchLiveMetrics: the shipped Grafana dashboard
// parses and every metric its queries and the alert rules name is exported
// by a live daemon maintaining a real-Lance table; promtool accepts the
// rules.
func TestDeployDashboardAndRulesMatchLiveMetrics(t *testing.T) {
	queries := dashboardQueries(t)
	rules, err := os.ReadFile("../../deploy/prometheus/lanced-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed (apt-get install -y prometheus): rules not checked by promtool")
	} else if out, err := exec.Command(promtool, "check", "rules", "../../deploy/prometheus/lanced-rules.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	oracle.Require(t)
	root := t.TempDir()
	tbl := oracle.Build(t, "appends", filepath.Join(root, "tables"))
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs, stop := startInProcessDaemon(t, "--config", writeTestDaemonConfig(t, root, addr))
	defer stop()
	waitUntil(t, 90*time.Second, "a maintenance commit", func() bool {
		return logs.find("version committed", func(l map[string]any) bool { return l["table"] == "file://"+tbl }) != nil
	})
	var body string
	exported := map[string]bool{}
	waitUntil(t, 30*time.Second, "table gauges exported", func() bool {
		_, body = httpGet("http://" + addr + "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), " "); ok && !strings.HasPrefix(line, "#") {
				if i := strings.IndexByte(name, '{'); i >= 0 {
					name = name[:i]
				}
				exported[name] = true
			}
		}
		return exported["lanced_table_fragments"] && exported["lanced_scheduler_task_duration_seconds_bucket"]
	})
	names := map[string]bool{}
	for _, q := range append(queries, string(rules)) {
		for _, n := range metricName.FindAllString(q, -1) {
			names[n] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in the dashboard and rules", len(names))
	}
	for n := range names {
		if !exported[n] {
			t.Errorf("%s is used by deploy/ but not exported by the daemon", n)
		}
	}
	// The documented series exist from the start, before their first event.
	for _, n := range []string{"lanced_commit_conflicts_total", "lanced_cleanup_files_removed_total", "lanced_table_held", "lanced_build_info", "lanced_scheduler_dead_letters_total"} {
		if !exported[n] {
			t.Errorf("%s is not exported", n)
		}
	}
}
