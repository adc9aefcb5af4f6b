package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonCompactsAndRepacksTablesRealLanceReadsIdentically runs `lanced
// run` (maintain workload, embedded NATS, poll source) over tables real
// Lance wrote and lets real Lance judge the result: same rows, fewer
// fragments / data files, and Lance keeps appending afterwards.
func TestDaemonCompactsAndRepacksTablesRealLanceReadsIdentically(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	appends := oracle.Build(t, "appends", tables)
	backfill := oracle.Build(t, "backfill", tables)
	before := map[string]oracle.Report{}
	rows := map[string]arrow.Table{}
	for _, uri := range []string{appends, backfill} {
		before[uri] = oracle.Inspect(t, uri, 0)
		rows[uri] = oracle.Scan(t, uri, 0, nil)
	}
	policies := filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := "table \"**/backfill.lance\" {\n  scope = \"repack\"\n  repack {\n    max_data_files_per_fragment = 1\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeTestDaemonConfig(t, root, "")
	logs, stop := startInProcessDaemon(t, "--config", cfgPath)
	committed := func(table string) bool {
		return logs.find("version committed", func(l map[string]any) bool {
			return l["table"] == "file://"+table
		}) != nil
	}
	deadline := time.Now().Add(90 * time.Second)
	for !(committed(appends) && committed(backfill)) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	// Let the coordinators settle on the converged layout, then stop.
	time.Sleep(3 * time.Second)
	stop()
	if !committed(appends) || !committed(backfill) {
		for i, l := range logs.lines() {
			if i < 300 {
				t.Logf("%v", l)
			}
		}
		t.Fatalf("no commit on both tables (appends %v, backfill %v)", committed(appends), committed(backfill))
	}

	after := oracle.Inspect(t, appends, 0)
	if after.Rows != before[appends].Rows || after.Fragments >= before[appends].Fragments {
		t.Fatalf("appends: rows %d→%d, fragments %d→%d", before[appends].Rows, after.Rows, before[appends].Fragments, after.Fragments)
	}
	oracle.EqualByKey(t, rows[appends], oracle.Scan(t, appends, 0, nil), "id")
	afterB := oracle.Inspect(t, backfill, 0)
	if afterB.Rows != before[backfill].Rows || afterB.DataFiles >= before[backfill].DataFiles || afterB.Fragments != before[backfill].Fragments {
		t.Fatalf("backfill: rows %d→%d, data files %d→%d, fragments %d→%d", before[backfill].Rows, afterB.Rows,
			before[backfill].DataFiles, afterB.DataFiles, before[backfill].Fragments, afterB.Fragments)
	}
	oracle.Equal(t, rows[backfill], oracle.Scan(t, backfill, 0, nil))
	// Real Lance keeps writing on top of what the daemon committed.
	oracle.RunOps(t, appends, []oracle.Op{{"op": "add", "rows": 10, "seed": 7}})
	if got := oracle.Inspect(t, appends, 0).Rows; got != before[appends].Rows+10 {
		t.Fatalf("after a real-Lance append: %d rows", got)
	}
	t.Logf("appends: %d fragments → %d; backfill: %d data files → %d",
		before[appends].Fragments, after.Fragments, before[backfill].DataFiles, afterB.DataFiles)
}

// writeTestDaemonConfig writes the config the daemon tests run with: tables,
// policies and state under root, a fast poll and debounce, HTTP on httpAddr
// ("" disables it). It returns the config path.
func writeTestDaemonConfig(t *testing.T, root, httpAddr string) string {
	t.Helper()
	cfgPath := filepath.Join(root, "lanced.hcl")
	cfg := `
state_dir = "state"
tables    = ["tables"]
policies  = "policies"
source "poll" { interval = "1s" }
events {
  debounce  = "100ms"
  max_delay = "500ms"
}
queue { commit_max_wait = "300ms" }
http { listen = "` + httpAddr + `" }
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}
