package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonCommitsCatchUpsOfOnePlanTogether: `lanced run` (index scope)
// over a real-Lance table whose IVF_PQ vec_idx and BTree id_idx are both
// past max_unindexed_rows after one append plans a catch-up of each; their
// results commit in one CreateIndex version adding a segment of each
// index, as lance's optimize_indices commits, not one version per index.
// Real Lance then reports no unindexed row in either index and searches
// through both.
func TestDaemonCommitsCatchUpsOfOnePlanTogether(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	path := indexedTableWithPolicy(t, root, 100)
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 600, "seed": 11}})
	pre := oracle.Inspect(t, path, 0)
	for _, name := range []string{"vec_idx", "id_idx"} {
		if ix := pre.Index(t, name); ix.UnindexedRows != 600 {
			t.Fatalf("setup: %s %+v, want 600 unindexed rows", name, ix)
		}
	}
	// Index maintenance only (no compaction of the appended fragment).
	writePolicy(t, filepath.Join(root, "policies"), "defaults {\n  scope = \"index\"\n  index {\n    max_unindexed_rows = 100\n  }\n}\n")
	// A result read while its sibling still runs waits for it (the table
	// is not quiet) up to commit_max_wait: long enough for both here.
	cfgPath := writeTestDaemonConfig(t, root, "")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(cfg), `commit_max_wait = "300ms"`, `commit_max_wait = "5s"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, stop := startInProcessDaemon(t, "--config", cfgPath)
	defer stop()
	logDaemonOnFailure(t, logs)
	var final oracle.Report
	deadline := time.Now().Add(60 * time.Second)
	for {
		final = oracle.Inspect(t, path, 0)
		if final.Index(t, "vec_idx").UnindexedRows == 0 && final.Index(t, "id_idx").UnindexedRows == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up after 60 s: vec_idx %+v, id_idx %+v", final.Index(t, "vec_idx"), final.Index(t, "id_idx"))
		}
		time.Sleep(time.Second)
	}
	time.Sleep(3 * time.Second) // a second catch-up commit, if any, would come now
	stop()
	var versions []uint64
	for _, l := range logs.lines() {
		if l["msg"] == "version committed" && l["kind"] == "create_index" {
			versions = append(versions, uint64(l["version"].(float64)))
		}
	}
	if len(versions) != 1 {
		t.Fatalf("create_index versions %v, want one", versions)
	}
	// Its transaction adds a segment of each index.
	ctx := context.Background()
	b, err := store.Open(ctx, "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tbl := table.At(b)
	m, err := tbl.Load(ctx, versions[0])
	if err != nil {
		t.Fatal(err)
	}
	txn, err := tbl.LoadTransaction(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ix := range txn.GetCreateIndex().GetNewIndices() {
		names = append(names, ix.GetName())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"id_idx", "vec_idx"}) {
		t.Fatalf("version %d's transaction adds segments of %v, want id_idx and vec_idx", versions[0], names)
	}
	// Real Lance searches through both indices.
	res := oracle.RunOps(t, path, []oracle.Op{
		{"op": "vector_search", "column": "vec", "vector": make([]float64, 32), "k": 10, "columns": []string{"id"}},
		{"op": "query", "where": "id >= 3590", "columns": []string{"id"}},
	})
	for i, want := range []int{10, 10} {
		var hits struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(res[i], &hits); err != nil || len(hits.Data) != want {
			t.Fatalf("query %d: %v, %d rows (want %d): %s", i, err, len(hits.Data), want, res[i])
		}
	}
	t.Logf("one CreateIndex (version %d) added %v; %d rows, both indices current", versions[0], names, final.Rows)
}
