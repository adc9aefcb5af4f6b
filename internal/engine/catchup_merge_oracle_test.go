package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// Cases whose partitions stay above lance's join bound, so a catch-up is a
// delta segment unless max_segments asks for a merge.
var mergeCases = []catchUpCase{
	{name: "ivf_flat", typ: "ivf_flat", options: map[string]any{"numPartitions": 2, "distanceType": "l2"}},
	{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 1, "numSubVectors": 4, "distanceType": "l2"}},
	{name: "hnsw_sq", typ: "hnsw_sq", options: map[string]any{"numPartitions": 1, "distanceType": "l2"}},
	{name: "ivf_rq", typ: "ivf_rq", options: map[string]any{"numPartitions": 2, "distanceType": "l2"}},
}

// TestCatchUpMaxSegmentsOracle: a vector index caught up once by lanced
// (a delta: two segments), then more appends and deletes by real Lance;
// lanced with max_segments = 1 merges both segments and the new rows into
// one, committed as one CreateIndex that removes the two. Real Lance's
// optimize() on a copy is the reference: both index every live row, our one
// segment holds every live row exactly once, recall@10 no worse, and real
// Lance keeps appending, optimizing, searching and re-creating the index.
func TestCatchUpMaxSegmentsOracle(t *testing.T) {
	runCatchUpCases(t, mergeCases, testCatchUpMaxSegments)
}

func testCatchUpMaxSegments(t *testing.T, c catchUpCase) {
	dir := t.TempDir()
	path := oracle.Build(t, "sized-1x4000-v32-t0-d0", filepath.Join(dir, "ours"))
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options},
		{"op": "add", "rows": 300, "seed": 11},
	})
	indexOnly := func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex }
	if compactUntilSettled(t, path, indexOnly) == 0 {
		t.Fatal("setup: no catch-up planned")
	}
	if ix := indexByName(t, oracle.Inspect(t, path, 0), "vec_idx"); ix.Segments != 2 || ix.UnindexedRows != 0 {
		t.Fatalf("setup: after a delta catch-up %+v, want 2 segments", ix)
	}
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "add", "rows": 250, "seed": 12},
		{"op": "delete", "where": "id % 11 = 5"},
		{"op": "add", "rows": 200, "seed": 13},
	})
	pre := oracle.Inspect(t, path, 0)
	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	merged := func(e *policy.Effective) {
		indexOnly(e)
		e.Index.MaxSegments.Value = 1
	}
	if compactUntilSettled(t, path, merged) != 1 {
		t.Fatal("want one catch-up task that merges")
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	oi, li := indexByName(t, ours, "vec_idx"), indexByName(t, lance, "vec_idx")
	t.Logf("%s: ours %+v; Lance's optimize %+v", c.name, oi, li)
	if ours.Rows != pre.Rows || oi.Segments != 1 || oi.UnindexedRows != 0 || oi.IndexedRows != ours.Rows || li.UnindexedRows != 0 {
		t.Fatalf("after the merge: ours %+v (rows %d, before %d), Lance %+v", oi, ours.Rows, pre.Rows, li)
	}
	// One CreateIndex: one new segment, both old ones removed.
	m := readTableManifest(t, path, ours.Version)
	tbl, _ := tabletest.Open(t, "file://"+path)
	txn, err := tbl.LoadTransaction(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	ci := txn.GetCreateIndex()
	if len(ci.GetNewIndices()) != 1 || len(ci.GetRemovedIndices()) != 2 {
		t.Fatalf("commit: %d new, %d removed segments, want 1 and 2", len(ci.GetNewIndices()), len(ci.GetRemovedIndices()))
	}
	// Every live row with a vector exactly once (lance's optimize leaves
	// null vectors out of the index).
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "query", "where": "vec IS NULL", "columns": []string{"id"}, "limit": 1 << 20}})
	var nulls searchHits
	if err := json.Unmarshal(res[0], &nulls); err != nil {
		t.Fatal(err)
	}
	null := map[int64]bool{}
	for _, h := range nulls.Data {
		null[h.ID] = true
	}
	held := segmentRowAddrs(t, path, m)
	var checked int
	for id, a := range oracle.RowAddrsByID(t, path, ours.Version) {
		want := 1
		if null[id] {
			want = 0
		}
		if held[a] != want {
			t.Fatalf("row id=%d (address %d, null vector %v) held %d times by the merged segment", id, a, null[id], held[a])
		}
		checked++
	}
	t.Logf("%d live rows checked, %d with a null vector", checked, len(null))

	queries := catchUpQueries(32, 32)
	ro := catchUpSearch(t, path, ours.Version, queries, c)
	rl := catchUpSearch(t, control, lance.Version, queries, c)
	t.Logf("%s: recall@10 ours %.3f, Lance's optimize %.3f", c.name, ro.recall, rl.recall)
	if ro.recall+0.03 < rl.recall {
		t.Fatalf("recall@10 %.3f after our merge, %.3f after Lance's optimize", ro.recall, rl.recall)
	}

	lanceKeepsGoing(t, path, c, queries[0], ours.Rows, 10)
}

// segmentRowAddrs counts the row ids every vec_idx segment of m holds.
func segmentRowAddrs(t *testing.T, path string, m *format.Manifest) map[uint64]int {
	t.Helper()
	out := map[uint64]int{}
	for _, ix := range m.Indices.GetIndices() {
		if ix.GetName() != "vec_idx" {
			continue
		}
		u, err := uuid.FromBytes(ix.GetUuid().GetUuid())
		if err != nil {
			t.Fatal(err)
		}
		s, err := vector.OpenStorageFile(lancefiletest.Open(t, filepath.Join(path, format.IndicesDir, u.String(), vector.AuxiliaryFileName)))
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < s.NumPartitions(); p++ {
			rec, err := s.ReadPartition(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			for i, fl := range rec.Schema().Fields() {
				if fl.Name == vector.RowIDColumn {
					for _, a := range rec.Column(i).(*array.Uint64).Uint64Values() {
						out[a]++
					}
				}
			}
			rec.Release()
		}
	}
	return out
}
