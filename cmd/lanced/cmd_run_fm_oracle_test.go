package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonMaintainsFMIndex: the daemon (embedded NATS, default policy)
// on a table real Lance wrote with an FM index, deletions in the fragments
// it covers and two unindexed appends: it compacts the covered fragments
// (the FM index rebuilt in the Rewrite commit, as a remap task) and the
// appended ones, and catches the index up (rebuilt over every fragment),
// until real Lance's indexStats shows every row indexed. Substring queries
// through the index then return the rows of a copy real Lance optimized.
func TestDaemonMaintainsFMIndex(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	path := oracle.Build(t, "sized-4x500-v0-t12-d0", filepath.Join(root, "tables"))
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "update", "where": "id = 8", "values_sql": map[string]string{"body": "'héllo wörld ünïcode 日本語 river'"}},
		{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		{"op": "delete", "where": "id % 7 = 0"},
		{"op": "add", "rows": 150, "seed": 5},
		{"op": "add", "rows": 150, "seed": 6},
	})
	pre := oracle.Inspect(t, path, 0)
	control := filepath.Join(t.TempDir(), "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})
	writePolicy(t, filepath.Join(root, "policies"), "defaults {\n}\n")
	logs, stop := startInProcessDaemon(t, "--config", writeTestDaemonConfig(t, root, ""))
	defer stop()
	deadline := time.Now().Add(3 * time.Minute)
	var r oracle.Report
	for {
		time.Sleep(2 * time.Second)
		r = oracle.Inspect(t, path, 0)
		if ix := r.Index(t, "body_idx"); ix.UnindexedRows == 0 && r.Fragments < pre.Fragments {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not settle: %d fragments (before %d), body_idx %+v\n%v", r.Fragments, pre.Fragments, r.Index(t, "body_idx"), logs.lines())
		}
	}
	stop()
	if r.Rows != pre.Rows {
		t.Fatalf("rows %d, before %d", r.Rows, pre.Rows)
	}
	var qs []oracle.Op
	for _, w := range []string{"river", "th", "ünïcode 日本", "qqxqq"} {
		qs = append(qs, oracle.Op{"op": "query", "where": "contains(body, '" + w + "')", "columns": []string{"id"}, "explain": true})
	}
	ours, theirs := oracle.Queries(t, path, qs), oracle.Queries(t, control, qs)
	for i := range qs {
		if !slices.Equal(ours[i].IDs(), theirs[i].IDs()) || !strings.Contains(ours[i].Plan, "body_idx") {
			t.Fatalf("%v: %d rows, Lance's optimize %d; plan:\n%s", qs[i]["where"], len(ours[i].IDs()), len(theirs[i].IDs()), ours[i].Plan)
		}
	}
	t.Logf("daemon: %d fragments -> %d, body_idx %+v; %d substring queries return Lance's rows", pre.Fragments, r.Fragments, r.Index(t, "body_idx"), len(qs))
}
