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

// TestRemapFMCompactOracle: lanced compacts fragments an FM index covers
// and rebuilds the index from the column over the fragments after the
// rewrite, in the same Rewrite commit (rewritten_indices old -> new), so no
// version has the index covering no live fragment (lance 8.0.0's own
// compaction leaves the segment on the removed fragments until its
// optimize_indices rebuilds it, one commit later). Judged by real Lance
// against a copy real Lance optimized: indexStats, substring queries
// through the index, and real Lance writing on afterwards.
func TestRemapFMCompactOracle(t *testing.T) {
	oracle.Require(t)
	ops := append(slices.Clone(fmDocOps),
		oracle.Op{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		oracle.Op{"op": "delete", "where": "id % 7 = 0"},
	)
	path := lanceTable(t, "sized-4x500-v0-t12-d0", ops...)
	pre := oracle.Inspect(t, path, 0)
	preIx := indextest.Index(t, indextest.ReadManifest(t, path, pre.Version), "body_idx")
	control := t.TempDir() + "/control.lance"
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	_, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, nil)
	d := planIndex(p, "body_idx")
	if d.Action != plan.IndexRemap || !strings.Contains(d.Reason, "rebuilt from the column") || len(d.Rewritten) == 0 || len(p.Rewrites) == 0 {
		t.Fatalf("body_idx decision %+v, %d rewrites", d, len(p.Rewrites))
	}
	t.Logf("lanced plan: %s: %s", d.Action, d.Reason)
	compactUntilSettled(t, path, nil)
	ours := oracle.Inspect(t, path, 0)
	if ours.Rows != pre.Rows || ours.Fragments >= pre.Fragments {
		t.Fatalf("after lanced: %d rows in %d fragments (before %d in %d)", ours.Rows, ours.Fragments, pre.Rows, pre.Fragments)
	}
	// Every version lanced committed: the index covers live fragments
	// only, and every live row is indexed.
	rewrote := false
	for v := pre.Version + 1; v <= ours.Version; v++ {
		vm := indextest.ReadManifest(t, path, v)
		ix := indextest.Index(t, vm, "body_idx")
		bm := roaring.New()
		if err := bm.UnmarshalBinary(ix.GetFragmentBitmap()); err != nil {
			t.Fatal(err)
		}
		live := roaring.New()
		for _, f := range vm.PB.GetFragments() {
			live.Add(uint32(f.GetId()))
		}
		if !bm.Equals(live) {
			t.Fatalf("v%d: FM segment %s covers %v, the fragments are %v", v, indextest.UUID(t, ix.GetUuid()), bm.ToArray(), live.ToArray())
		}
		if len(vm.PB.GetFragments()) < pre.Fragments && !rewrote {
			// The Rewrite commit carries the rebuilt segment.
			if indextest.UUID(t, ix.GetUuid()) == indextest.UUID(t, preIx.GetUuid()) {
				t.Fatalf("v%d: fragments rewritten, FM segment not rebuilt", v)
			}
			rewrote = true
		}
		if got := indexByName(t, oracle.Inspect(t, path, v), "body_idx"); got.UnindexedRows != 0 {
			t.Fatalf("v%d: body_idx %+v", v, got)
		}
	}
	if !rewrote {
		t.Fatal("no Rewrite commit")
	}
	oi, li := indexByName(t, ours, "body_idx"), indexByName(t, oracle.Inspect(t, control, 0), "body_idx")
	if oi.IndexedRows != li.IndexedRows || oi.UnindexedRows != 0 || li.UnindexedRows != 0 {
		t.Fatalf("indexStats: ours %+v, Lance's optimize %+v", oi, li)
	}
	t.Logf("lanced: %d fragments -> %d, FM rebuilt in the Rewrite commit; indexStats %d/%d, Lance's optimize %d/%d", pre.Fragments, ours.Fragments, oi.IndexedRows, oi.UnindexedRows, li.IndexedRows, li.UnindexedRows)
	sameFMResults(t, path, control)
	checkLanceKeepsFM(t, path, control)
}
