package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonRemapsIndicesRealLanceQueriesThrough runs `lanced run` (embedded
// NATS, poll source, short debounce, default policy) over a table real Lance
// built with an IVF_FLAT on vec, a BTree on id and a positional FTS on body,
// then appended to and deleted from. The daemon compacts it with index
// remap: fewer fragments, one rewrite commit per read version, every index
// remapped ("index remapped" in its log), nothing dropped or failed. Real
// Lance then lists the same indices with the same coverage, and the same
// vector (all partitions probed), IN-filter and match queries return the
// same rows as before through the indices (explainPlan); the indices
// survive real Lance's delete, update and optimize.
// remapDaemonTable builds, under tables, the daemon remap tests' table:
// real Lance's 4x500 rows with an IVF_FLAT on vec, a BTree on id and a
// positional FTS on body, then two appends and a delete. It returns the
// path and the queries the tests compare through the indices (vector with
// every partition probed, an IN filter, FTS matches).
func remapDaemonTable(t *testing.T, tables string) (string, []oracle.Op) {
	t.Helper()
	path := oracle.Build(t, "sized-4x500-v32-t12-d0", tables)
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": "ivf_flat", "name": "vec_idx", "options": map[string]any{"numPartitions": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "create_index", "column": "body", "type": "fts", "name": "body_idx", "options": map[string]any{"withPosition": true}},
		{"op": "add", "rows": 150, "seed": 5},
		{"op": "add", "rows": 150, "seed": 6},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	var ops []oracle.Op
	for i, seed := range []float32{0.1, -0.4, 0.7, 0.25} {
		q := make([]float32, 32)
		for j := range q {
			q[j] = seed * float32((j*7+i*3)%11-5) / 5
		}
		ops = append(ops, oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "nprobes": 4, "columns": []string{"id"}, "explain": true})
	}
	ops = append(ops, oracle.Op{"op": "query", "where": "id IN (1, 7, 333, 1234, 1999, 2100)", "columns": []string{"id"}, "explain": true})
	for _, w := range []string{"river", "harbour", "table"} {
		ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 10000, "columns": []string{"id"}, "explain": true})
	}
	return path, ops
}

func TestDaemonRemapsIndicesRealLanceQueriesThrough(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	path, ops := remapDaemonTable(t, tables)
	pre := oracle.Inspect(t, path, 0)
	wantIdx := []string{"body_idx", "id_idx", "vec_idx"}
	if got := pre.IndexNames(); !slices.Equal(got, wantIdx) {
		t.Fatalf("indices before: %v", got)
	}
	before := oracle.Queries(t, path, ops)

	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs, stop := startInProcessDaemon(t, "--config", writeTestDaemonConfig(t, root, ""))
	defer stop()
	rewrote := func() bool {
		return logs.find("version committed", func(l map[string]any) bool { return l["kind"] == "rewrite" }) != nil
	}
	deadline := time.Now().Add(120 * time.Second)
	for !rewrote() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(4 * time.Second) // let the coordinator settle on the new layout
	stop()
	lines := logs.lines()
	dump := func() {
		for i, l := range lines {
			if i < 300 {
				t.Logf("%v", l)
			}
		}
	}
	if !rewrote() {
		dump()
		t.Fatal("the daemon committed no rewrite")
	}
	remapped := map[string]int{}
	rewriteAt := map[any]int{}
	rewriteTasks := map[any]map[any]bool{} // read version -> rewrite task ids done
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		switch {
		case msg == "index remapped":
			remapped[l["task_id"].(string)]++
		case msg == "version committed" && l["kind"] == "rewrite":
			rewriteAt[l["read_version"]]++
		case msg == "task done" && l["kind"] == "rewrite":
			if rewriteTasks[l["read_version"]] == nil {
				rewriteTasks[l["read_version"]] = map[any]bool{}
			}
			rewriteTasks[l["read_version"]][l["task_id"]] = true
		case l["level"] == "ERROR" || strings.Contains(msg, "dropped") || strings.Contains(msg, "dead"):
			dump()
			t.Fatalf("daemon log: %v", l)
		}
	}
	// A rewrite whose remaps are still running commits after the
	// plan's other rewrites, so one read version may see several rewrite
	// commits, never more than the rewrite tasks done on it.
	for rv, n := range rewriteAt {
		if n > len(rewriteTasks[rv]) {
			dump()
			t.Fatalf("%d rewrite commits planned on read version %v, from %d rewrite tasks", n, rv, len(rewriteTasks[rv]))
		}
	}
	if len(remapped) < len(wantIdx) {
		dump()
		t.Fatalf("index remaps logged: %v, want one per index (%d)", remapped, len(wantIdx))
	}

	post := oracle.Inspect(t, path, 0)
	if post.Rows != pre.Rows || post.Fragments >= pre.Fragments {
		t.Fatalf("rows %d -> %d, fragments %d -> %d", pre.Rows, post.Rows, pre.Fragments, post.Fragments)
	}
	checkIndicesKept(t, pre, post, wantIdx)
	after := oracle.Queries(t, path, ops)
	for i, op := range ops {
		checkThroughIndex(t, op, after[i].Plan)
		if len(before[i].IDs()) == 0 || !slices.Equal(after[i].IDs(), before[i].IDs()) {
			t.Fatalf("%v %v: ids %v after the daemon, %v before", op["op"], op["query"], after[i].IDs(), before[i].IDs())
		}
	}
	for _, op := range []oracle.Op{
		{"op": "delete", "where": "id % 13 = 5"},
		{"op": "update", "where": "id % 17 = 2", "values_sql": map[string]string{"id": "id"}},
		{"op": "optimize"},
	} {
		oracle.RunOps(t, path, []oracle.Op{op})
		r := oracle.Inspect(t, path, 0)
		if got := r.IndexNames(); !slices.Equal(got, wantIdx) {
			t.Fatalf("after real Lance's %v: indices %v", op["op"], got)
		}
		for _, ix := range r.Indices {
			if ix.IndexedRows == 0 {
				t.Fatalf("after real Lance's %v: %s indexes nothing", op["op"], ix.Name)
			}
		}
	}
	t.Logf("fragments %d -> %d, %d remaps, rewrite commits %v; %d queries same rows through the indices", pre.Fragments, post.Fragments, len(remapped), rewriteAt, len(ops))
}

// checkIndicesKept fails t unless real Lance lists exactly the indices
// wantIdx after the daemon and each counts as many rows as before, no
// fewer of them indexed (a catch-up after the remap may index the
// appended rows too).
func checkIndicesKept(t *testing.T, pre, post oracle.Report, wantIdx []string) {
	t.Helper()
	if got := post.IndexNames(); !slices.Equal(got, wantIdx) {
		t.Fatalf("indices after the daemon: %v", got)
	}
	for _, name := range wantIdx {
		b, a := pre.Index(t, name), post.Index(t, name)
		if a.IndexedRows < b.IndexedRows || a.IndexedRows+a.UnindexedRows != b.IndexedRows+b.UnindexedRows {
			t.Fatalf("%s indexStats %d/%d before, %d/%d after", name, b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
		}
		t.Logf("%s: indexed/unindexed %d/%d -> %d/%d", name, b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
	}
}

// checkSameRowsFewerFragments fails t unless real Lance reads the rows
// wantDigest and wantRows describe from path, in fewer fragments than
// pre; it returns real Lance's report.
func checkSameRowsFewerFragments(t *testing.T, path string, pre oracle.Report, wantDigest string, wantRows int) oracle.Report {
	t.Helper()
	if d, n := rowsDigest(oracle.Scan(t, path, 0, nil)); n != wantRows || d != wantDigest {
		t.Fatalf("rows changed: %d, want %d", n, wantRows)
	}
	post := oracle.Inspect(t, path, 0)
	if post.Fragments >= pre.Fragments {
		t.Fatalf("fragments %d -> %d", pre.Fragments, post.Fragments)
	}
	return post
}

// checkThroughIndex fails t unless real Lance's plan for op reads an
// index: ANN for a vector_search, ScalarIndexQuery for a query's filter, a
// MatchQuery node (not FlatMatchQuery, a scan of unindexed rows) for an
// fts_search.
func checkThroughIndex(t *testing.T, op oracle.Op, plan string) {
	t.Helper()
	var ok bool
	want := map[any]string{"vector_search": "ANN", "query": "ScalarIndexQuery", "fts_search": "MatchQuery"}[op["op"]]
	switch want {
	case "":
		t.Fatalf("%v: no index plan known for this op", op)
	case "MatchQuery":
		ok = oracle.PlanHasNode(plan, want)
	default:
		ok = strings.Contains(plan, want)
	}
	if !ok {
		t.Fatalf("%v %v: plan has no %s:\n%s", op["op"], op["query"], want, plan)
	}
}
