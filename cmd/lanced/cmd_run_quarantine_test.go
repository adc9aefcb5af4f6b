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

// A truncated data file in one fragment of a real-Lance table under the
// daemon: that fragment is quarantined and reported (log line with file and
// reason, metric, `lanced stats`, `lanced plan`), every other fragment is
// compacted, and with the file's bytes put back real Lance reads exactly the
// rows it read before.
func TestDaemonQuarantinesTruncatedFragmentAndCompactsTheRest(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tt := newTruncatedTable(t, filepath.Join(root, "tables"))
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs, stop := startInProcessDaemon(t, "--config", writeTestDaemonConfig(t, root, addr))
	defer stop()
	uri := "file://" + tt.path
	quarantined := func() map[string]any {
		return logs.find("fragment quarantined", func(l map[string]any) bool {
			return l["table"] == uri && l["file"] == tt.key && l["fragment"] == float64(tt.victim.GetId())
		})
	}
	committed := func() bool {
		return logs.find("version committed", func(l map[string]any) bool { return l["table"] == uri }) != nil
	}
	deadline := time.Now().Add(90 * time.Second)
	for (quarantined() == nil || !committed()) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	_, metrics := httpGet("http://" + addr + "/metrics")
	time.Sleep(2 * time.Second) // let the coordinator settle on the converged layout
	stop()
	if quarantined() == nil || !committed() {
		for i, l := range logs.lines() {
			if i < 300 {
				t.Logf("%v", l)
			}
		}
		t.Fatalf("quarantine logged: %v, commit logged: %v", quarantined() != nil, committed())
	}
	if reason := fmt.Sprint(quarantined()["err"]); reason == "" || reason == "<nil>" {
		t.Errorf("quarantine log line gives no reason: %v", quarantined())
	}
	if !strings.Contains(metrics, "lanced_fragments_quarantined_total 1") {
		t.Errorf("/metrics: lanced_fragments_quarantined_total is not 1:\n%s", grepLines(metrics, "quarantined"))
	}
	tt.checkReported(t)
	tt.checkCompactedAndRestore(t)
}
