package engine_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// fmDocOps give the body column documents an FM index must handle:
// empty, null, non-ASCII, words spanning a word boundary.
var fmDocOps = []oracle.Op{
	{"op": "update", "where": "id = 3", "values_sql": map[string]string{"body": "''"}},
	{"op": "update", "where": "id = 5 OR id = 611", "values_sql": map[string]string{"body": "NULL"}},
	{"op": "update", "where": "id = 8 OR id = 1500", "values_sql": map[string]string{"body": "'héllo wörld ünïcode 日本語 river'"}},
	{"op": "update", "where": "id = 1004", "values_sql": map[string]string{"body": "'zeta starts here and ends at omega'"}},
}

// fmQueries are substring queries over body: within words, across a word
// boundary, at a document's start and end, non-ASCII, no match, and a
// filter combined with one.
var fmQueries = []string{
	"contains(body, 'river')", "contains(body, 'th')", "contains(body, 's here an')", "contains(body, 'zeta st')",
	"contains(body, 'at omega')", "contains(body, 'ünïcode 日本')", "contains(body, '本語')", "contains(body, 'qqxqq')",
	"contains(body, 'e') AND id < 700",
}

// fmQueryOps are fmQueries as query ops.
func fmQueryOps(explain bool) []oracle.Op {
	var ops []oracle.Op
	for _, q := range fmQueries {
		ops = append(ops, oracle.Op{"op": "query", "where": q, "columns": []string{"id"}, "explain": explain})
	}
	return ops
}

// sameFMResults fails unless every fmQuery returns the same rows on both
// tables (all but two of them a match), and the plans of ours search the
// FM index body_idx.
func sameFMResults(t *testing.T, ours, control string) {
	t.Helper()
	sameFMResultsOf(t, ours, control, "body_idx", len(fmQueries)-2)
}

// sameFMResultsOf fails unless every fmQuery returns the same rows on both
// tables, at least minMatched of them a match, and the plans of ours
// search the FM index named idx.
func sameFMResultsOf(t *testing.T, ours, control, idx string, minMatched int) {
	t.Helper()
	mine := oracle.Queries(t, ours, fmQueryOps(true))
	theirs := oracle.Queries(t, control, fmQueryOps(false))
	matched := 0
	for i, r := range mine {
		a, b := r.IDs(), theirs[i].IDs()
		if !slices.Equal(a, b) {
			t.Fatalf("%s: ours %d rows, Lance's optimize %d", fmQueries[i], len(a), len(b))
		}
		t.Logf("%s: %d rows", fmQueries[i], len(a))
		if len(a) > 0 {
			matched++
		}
		if !strings.Contains(r.Plan, idx) {
			t.Fatalf("%s: plan does not search the FM index:\n%s", fmQueries[i], r.Plan)
		}
	}
	if matched < minMatched {
		t.Fatalf("only %d of %d queries match a row", matched, len(fmQueries))
	}
}

// TestCatchUpFMOracle: an FM index (lancedb 0.31.0's Index.fm()) with
// appended rows is caught up by lanced as lance 8.0.0's optimize() catches
// it up: rebuilt from the column over every fragment, one segment under a
// new uuid replacing the old one (a CreateIndex). Judged by real Lance on
// a copy optimized by real Lance: indexStats, substring queries (plans
// through the FM index), and real Lance writing on afterwards with the
// index still covering what it should.
func TestCatchUpFMOracle(t *testing.T) {
	oracle.Require(t)
	ops := append(slices.Clone(fmDocOps),
		oracle.Op{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		oracle.Op{"op": "add", "rows": 150, "seed": 5},
		oracle.Op{"op": "add", "rows": 150, "seed": 6},
		oracle.Op{"op": "delete", "where": "id % 9 = 4"},
	)
	path := lanceTable(t, "sized-4x500-v0-t12-d0", ops...)
	pre := oracle.Inspect(t, path, 0)
	preIx := indextest.Index(t, indextest.ReadManifest(t, path, pre.Version), "body_idx")
	if ix := indexByName(t, pre, "body_idx"); ix.UnindexedRows == 0 {
		t.Fatalf("setup: nothing unindexed: %+v", ix)
	}
	control := t.TempDir() + "/control.lance"
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	_, m := tabletest.Open(t, "file://"+path)
	d := planIndex(planFor(t, path, m, nil), "body_idx")
	if d.CatchUp == nil || d.CatchUp.Action != plan.CatchUpPlanned || !strings.Contains(d.CatchUp.Reason, "rebuilt from the column") {
		t.Fatalf("body_idx catch-up decision %+v", d.CatchUp)
	}
	t.Logf("lanced plan: %s: %s", d.CatchUp.Action, d.CatchUp.Reason)
	if n := compactUntilSettled(t, path, nil); n == 0 {
		t.Fatal("no catch-up ran")
	}
	ours := oracle.Inspect(t, path, 0)
	om := indextest.ReadManifest(t, path, ours.Version)
	var segs int
	for _, ix := range om.Indices.GetIndices() {
		if ix.GetName() == "body_idx" {
			segs++
		}
	}
	oix := indextest.Index(t, om, "body_idx")
	all := roaring.New()
	for _, f := range om.PB.GetFragments() {
		all.Add(uint32(f.GetId()))
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(oix.GetFragmentBitmap()); err != nil {
		t.Fatal(err)
	}
	oi, li := indexByName(t, ours, "body_idx"), indexByName(t, oracle.Inspect(t, control, 0), "body_idx")
	if ours.Rows != pre.Rows || segs != 1 || !bm.Equals(all) || oi.UnindexedRows != 0 || oi.IndexedRows != li.IndexedRows || li.UnindexedRows != 0 ||
		indextest.UUID(t, oix.GetUuid()) == indextest.UUID(t, preIx.GetUuid()) || oix.GetIndexVersion() != 10 {
		t.Fatalf("after lanced: rows %d (before %d), %d segment(s) on %v of %v, stats %+v (Lance's optimize %+v), version %d", ours.Rows, pre.Rows, segs, bm.ToArray(), all.ToArray(), oi, li, oix.GetIndexVersion())
	}
	t.Logf("lanced: FM segment %s rebuilt over %d fragments (was %s); indexStats %d/%d, Lance's optimize %d/%d",
		indextest.UUID(t, oix.GetUuid()), all.GetCardinality(), indextest.UUID(t, preIx.GetUuid()), oi.IndexedRows, oi.UnindexedRows, li.IndexedRows, li.UnindexedRows)
	sameFMResults(t, path, control)
	checkLanceKeepsFM(t, path, control)
}

// checkLanceKeepsFM has real Lance delete, update, merge_insert, add
// columns, optimize and replace the FM index on both tables: every op
// succeeds, the FM index is there afterwards covering every row, and
// both answer the substring queries alike.
func checkLanceKeepsFM(t *testing.T, ours, control string) {
	t.Helper()
	ops := []oracle.Op{
		{"op": "delete", "where": "id % 13 = 2"},
		{"op": "update", "where": "id % 17 = 1", "values_sql": map[string]string{"body": "concat(body, ' river mouth')"}},
		{"op": "merge_insert", "rows": 40, "seed": 9, "id_start": 1990},
		{"op": "add_columns", "columns": []map[string]string{{"name": "extra", "value_sql": "id * 2"}}},
		{"op": "optimize"},
	}
	for _, p := range []string{ours, control} {
		oracle.RunOps(t, p, ops)
		if ix := indexByName(t, oracle.Inspect(t, p, 0), "body_idx"); ix.UnindexedRows != 0 || ix.IndexedRows == 0 {
			t.Fatalf("%s after Lance's writes and optimize: body_idx %+v", p, ix)
		}
	}
	sameFMResults(t, ours, control)
	oracle.RunOps(t, ours, []oracle.Op{{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx", "replace": true}})
	if ix := indexByName(t, oracle.Inspect(t, ours, 0), "body_idx"); ix.UnindexedRows != 0 || ix.IndexedRows == 0 {
		t.Fatalf("after Lance's createIndex(replace): body_idx %+v", ix)
	}
}
