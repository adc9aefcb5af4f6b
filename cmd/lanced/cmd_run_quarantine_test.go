package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	tables := filepath.Join(root, "tables")
	path := oracle.Build(t, "appends", tables)
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, path, 0, nil))
	m := latestOf(t, path)
	frags := m.PB.GetFragments()
	if len(frags) < 3 {
		t.Fatalf("appends has %d fragments, want at least 3", len(frags))
	}
	// The first fragment: the others stay adjacent, so all of them can be
	// compacted into one.
	victim := frags[0]
	key := "data/" + victim.GetFiles()[0].GetPath()
	file := filepath.Join(path, filepath.FromSlash(key))
	full, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, full[:len(full)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs, stop := startInProcessDaemon(t, "--config", writeTestDaemonConfig(t, root, addr))
	defer stop()
	uri := "file://" + path
	quarantined := func() map[string]any {
		return logs.find("fragment quarantined", func(l map[string]any) bool {
			return l["table"] == uri && l["file"] == key && l["fragment"] == float64(victim.GetId())
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

	var out, errb bytes.Buffer
	if code := runMain([]string{"stats", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "QUARANTINED fragment "+strconv.FormatUint(victim.GetId(), 10)+": "+key) {
		t.Errorf("stats does not report the quarantined fragment (exit %d):\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"plan", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "quarantined: "+key) {
		t.Errorf("plan does not skip the quarantined fragment (exit %d):\n%s%s", code, out.String(), errb.String())
	}

	after := latestOf(t, path)
	last := frags[len(frags)-1].GetId()
	var kept bool
	for _, f := range after.PB.GetFragments() {
		switch {
		case f.GetId() == victim.GetId():
			kept = len(f.GetFiles()) == 1 && f.GetFiles()[0].GetPath() == victim.GetFiles()[0].GetPath()
		case f.GetId() <= last:
			t.Errorf("fragment %d was not compacted", f.GetId())
		}
	}
	if !kept || len(after.PB.GetFragments()) != 2 {
		t.Fatalf("after compaction: %d fragments, quarantined fragment %d kept as it was: %v", len(after.PB.GetFragments()), victim.GetId(), kept)
	}

	if err := os.WriteFile(file, full, 0o644); err != nil {
		t.Fatal(err)
	}
	gotDigest, gotRows := rowsDigest(oracle.Scan(t, path, 0, nil))
	if gotDigest != wantDigest || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (%s), before %d (%s)", gotRows, gotDigest, wantRows, wantDigest)
	}
	t.Logf("%d fragments → %d (fragment %d quarantined: %s)", len(frags), len(after.PB.GetFragments()), victim.GetId(), key)
}
