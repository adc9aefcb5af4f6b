package engine_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCatchUpStableRowIDsOracle: a table with stable row ids real Lance
// built, with an IVF_PQ (or IVF_RQ), a BTree and a Bitmap index, then appends and
// deletes. lanced compact with the default policy (until nothing is
// planned) and real Lance's optimize() on a copy both end with every live
// row indexed by every index; our segments hold the new rows under their
// stable row ids (every live row with a vector exactly once in the vector
// index); scalar queries go through the index and return the copy's rows;
// recall@10 is no worse than the copy's; real Lance keeps appending,
// optimizing, querying and re-creating the index.
func TestCatchUpStableRowIDsOracle(t *testing.T) {
	runCatchUpCases(t, []catchUpCase{
		{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 1, "numSubVectors": 4, "distanceType": "l2"}},
		{name: "ivf_rq", typ: "ivf_rq", options: map[string]any{"numPartitions": 1, "distanceType": "l2"}},
	}, testCatchUpStableRowIDs)
}

func testCatchUpStableRowIDs(t *testing.T, c catchUpCase) {
	path := oracle.Build(t, "sized-4x1000-v32-t8-d0", t.TempDir(), oracle.Options{StorageOptions: map[string]string{"new_table_enable_stable_row_ids": "true"}})
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx"},
		createIDIdx,
		{"op": "create_index", "column": "category", "type": "bitmap", "name": "category_idx"},
		{"op": "add", "rows": 200, "seed": 5},
		{"op": "add", "rows": 200, "seed": 6},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	pre := oracle.Inspect(t, path, 0)
	names := []string{"vec_idx", "id_idx", "category_idx"}
	for _, n := range names {
		if ix := indexByName(t, pre, n); ix.UnindexedRows == 0 {
			t.Fatalf("setup: %s has nothing unindexed: %+v", n, ix)
		}
	}
	control := t.TempDir() + "/control.lance"
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	if compactUntilSettled(t, path, nil) == 0 {
		t.Fatal("no catch-up task was planned")
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if ours.Rows != pre.Rows || lance.Rows != pre.Rows {
		t.Fatalf("rows: ours %d, Lance %d, before %d", ours.Rows, lance.Rows, pre.Rows)
	}
	for _, n := range names {
		oi, li := indexByName(t, ours, n), indexByName(t, lance, n)
		t.Logf("%s: ours %+v; Lance's optimize %+v", n, oi, li)
		if oi.UnindexedRows != 0 || li.UnindexedRows != 0 || oi.IndexedRows != li.IndexedRows {
			t.Fatalf("%s indexStats: ours %+v, Lance %+v", n, oi, li)
		}
	}

	// The vector index holds every live row with a vector under its
	// stable row id, once.
	held := segmentRowAddrs(t, path, readTableManifest(t, path, ours.Version))
	nulls, checked := heldOnceByRowID(t, path, "vec", held)
	t.Logf("%d live rows checked under their stable row ids, %d null vectors", len(checked), len(nulls))

	queries := []oracle.Op{
		{"op": "query", "where": "id = 1234", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "id IN (1, 5, 777, 4001, 4150, 4199, 4250, 4399)", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "id >= 3950 AND id < 4120", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "category = 'cat-2'", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "category IN ('cat-1', 'cat-6')", "columns": []string{"id"}, "explain": true},
	}
	mine, theirs := oracle.Queries(t, path, queries), oracle.Queries(t, control, queries)
	for i, q := range queries {
		if !strings.Contains(mine[i].Plan, "ScalarIndexQuery") || len(mine[i].IDs()) == 0 {
			t.Fatalf("%v: %d rows, not through the index:\n%s", q["where"], len(mine[i].IDs()), mine[i].Plan)
		}
		if !slices.Equal(mine[i].IDs(), theirs[i].IDs()) {
			t.Fatalf("%v: ours %v, Lance %v", q["where"], mine[i].IDs(), theirs[i].IDs())
		}
	}

	qs := catchUpQueries(32, 32)
	ro := catchUpSearch(t, path, ours.Version, qs, c)
	rl := catchUpSearch(t, control, lance.Version, qs, c)
	t.Logf("recall@10 ours %.3f, Lance's optimize %.3f", ro.recall, rl.recall)
	if ro.recall+0.03 < rl.recall {
		t.Fatalf("recall@10 %.3f after our catch-up, %.3f after Lance's optimize", ro.recall, rl.recall)
	}

	// Real Lance keeps going on both tables. Its search after its own
	// optimize() on a stable-row-id table may return fewer than k hits
	// (observed on the copy too): both must return the same ones.
	hc := lanceKeepsGoing(t, control, c, qs[0], lance.Rows, 0)
	ho := lanceKeepsGoing(t, path, c, qs[0], ours.Rows, 0)
	if !slices.Equal(ho, hc) {
		t.Fatalf("search after real Lance's appends and optimize: ours %v, the copy %v", ho, hc)
	}
	after, copyAfter := oracle.Queries(t, path, queries[1:2])[0], oracle.Queries(t, control, queries[1:2])[0]
	if !strings.Contains(after.Plan, "ScalarIndexQuery") || !slices.Equal(after.IDs(), copyAfter.IDs()) {
		t.Fatalf("after real Lance: %v, the copy %v\n%s", after.IDs(), copyAfter.IDs(), after.Plan)
	}
}
