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

// TestCatchUpFMOracle pins what lance 8.0.0's optimize() does with an FM
// index (created through lancedb 0.31.0's Index.fm()) after appends, and
// what lanced does instead. Lance rebuilds the index from the column: one
// segment under a new uuid covering every fragment (not a delta of the new
// rows next to the old segment). lanced builds no FM index, so its plan
// reports the index `due` with that reason, its compaction leaves the
// segment as it is (same uuid, same fragments), substring queries return
// the copy's rows, and real Lance's optimize() afterwards indexes every row.
func TestCatchUpFMOracle(t *testing.T) {
	oracle.Require(t)
	path := lanceTable(t, "sized-4x500-v0-t12-d0",
		oracle.Op{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		oracle.Op{"op": "add", "rows": 150, "seed": 5},
		oracle.Op{"op": "add", "rows": 150, "seed": 6},
		oracle.Op{"op": "delete", "where": "id % 9 = 4"},
	)
	pre := oracle.Inspect(t, path, 0)
	preIx := indextest.Index(t, indextest.ReadManifest(t, path, pre.Version), "body_idx")
	if ix := indexByName(t, pre, "body_idx"); ix.UnindexedRows == 0 {
		t.Fatalf("setup: nothing unindexed: %+v", ix)
	}

	// Real Lance's optimize() on a copy: a rebuilt segment over every
	// fragment.
	control := t.TempDir() + "/control.lance"
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})
	lance := oracle.Inspect(t, control, 0)
	lm := indextest.ReadManifest(t, control, lance.Version)
	var segs int
	for _, ix := range lm.Indices.GetIndices() {
		if ix.GetName() == "body_idx" {
			segs++
		}
	}
	lix := indextest.Index(t, lm, "body_idx")
	all := roaring.New()
	for _, f := range lm.PB.GetFragments() {
		all.Add(uint32(f.GetId()))
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(lix.GetFragmentBitmap()); err != nil {
		t.Fatal(err)
	}
	if li := indexByName(t, lance, "body_idx"); segs != 1 || li.UnindexedRows != 0 || !bm.Equals(all) ||
		indextest.UUID(t, lix.GetUuid()) == indextest.UUID(t, preIx.GetUuid()) {
		t.Fatalf("Lance's optimize: %d segment(s), %+v, segment %s on %v of %v (before: %s)", segs, li, indextest.UUID(t, lix.GetUuid()), bm.ToArray(), all.ToArray(), indextest.UUID(t, preIx.GetUuid()))
	}
	t.Logf("Lance's optimize(): FM segment %s rebuilt over all %d fragments (was %s)", indextest.UUID(t, lix.GetUuid()), all.GetCardinality(), indextest.UUID(t, preIx.GetUuid()))

	// lanced: due, with the reason; the segment is left alone.
	_, m := tabletest.Open(t, "file://"+path)
	d := planIndex(planFor(t, path, m, nil), "body_idx")
	if d.CatchUp == nil || d.CatchUp.Action != plan.CatchUpDue || !strings.Contains(d.CatchUp.Reason, "rebuilds") {
		t.Fatalf("body_idx catch-up decision %+v", d.CatchUp)
	}
	t.Logf("lanced plan: %s: %s", d.CatchUp.Action, d.CatchUp.Reason)
	compactUntilSettled(t, path, nil)
	ours := oracle.Inspect(t, path, 0)
	oix := indextest.Index(t, indextest.ReadManifest(t, path, ours.Version), "body_idx")
	if ours.Rows != pre.Rows || !slices.Equal(oix.GetFragmentBitmap(), preIx.GetFragmentBitmap()) || indextest.UUID(t, oix.GetUuid()) != indextest.UUID(t, preIx.GetUuid()) {
		t.Fatalf("after lanced compact: rows %d (before %d), FM segment %s (before %s)", ours.Rows, pre.Rows, indextest.UUID(t, oix.GetUuid()), indextest.UUID(t, preIx.GetUuid()))
	}
	queries := []oracle.Op{
		{"op": "query", "where": "contains(body, 'river')", "columns": []string{"id"}},
		{"op": "query", "where": "contains(body, 'th')", "columns": []string{"id"}},
	}
	mine, theirs := oracle.Queries(t, path, queries), oracle.Queries(t, control, queries)
	for i := range queries {
		a, b := slices.Sorted(slices.Values(mine[i].IDs())), slices.Sorted(slices.Values(theirs[i].IDs()))
		if len(a) == 0 || !slices.Equal(a, b) {
			t.Fatalf("%v: ours %d rows, Lance %d", queries[i]["where"], len(a), len(b))
		}
	}

	// Real Lance's optimize() catches the index up after lanced.
	oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
	if ix := indexByName(t, oracle.Inspect(t, path, 0), "body_idx"); ix.UnindexedRows != 0 {
		t.Fatalf("after Lance's optimize on our table: %+v", ix)
	}
}
