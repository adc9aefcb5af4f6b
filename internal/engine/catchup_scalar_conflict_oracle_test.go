package engine_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestScalarCatchUpConflictsOracle: a btree catch-up executed, real Lance
// commits in between, then the catch-up commits. An append or a delete is
// rebased over (the merged segment replaces the old one; the appended rows
// stay unindexed, the deleted ones are filtered); Lance's optimize() (which
// replaces the segment the catch-up merged) or createIndex(replace) drops
// it, its files deleted. Real Lance then answers a filter through the
// index with the rows a scan gives and optimizes the table.
func TestScalarCatchUpConflictsOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []struct {
		name      string
		ops       []oracle.Op
		committed bool
		unindexed int64 // id_idx unindexed rows after our commit
	}{
		{name: "append", ops: []oracle.Op{{"op": "add", "rows": 90, "seed": 31}}, committed: true, unindexed: 90},
		{name: "delete", ops: []oracle.Op{{"op": "delete", "where": "(id >= 4100 AND id < 4150) OR id % 97 = 1"}}, committed: true},
		{name: "optimize", ops: []oracle.Op{{"op": "optimize"}}},
		{name: "replace", ops: []oracle.Op{{"op": "create_index", "column": "id", "type": "btree", "replace": true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-1x4000-v0-t0-d0", filepath.Join(t.TempDir(), "t"))
			oracle.RunOps(t, path, []oracle.Op{
				{"op": "create_index", "column": "id", "type": "btree"},
				{"op": "add", "rows": 300, "seed": 11},
			})
			raceCatchUp(t, path, c.ops, c.committed)
			rep := oracle.Inspect(t, path, 0)
			ix := indexByName(t, rep, "id_idx")
			if ix.UnindexedRows != c.unindexed || ix.IndexedRows+ix.UnindexedRows != rep.Rows || ix.Segments != 1 {
				t.Fatalf("after %s: %+v, %d rows", c.name, ix, rep.Rows)
			}
			where := "id >= 3990 AND id < 4400"
			res := oracle.Queries(t, path, []oracle.Op{{"op": "query", "where": where, "columns": []string{"id"}, "explain": true}})
			var want []int64 // the same filter over a full scan
			for id := range oracle.RowAddrsByID(t, path, 0) {
				if id >= 3990 && id < 4400 {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			if !slices.Equal(res[0].IDs(), want) || len(want) == 0 || !strings.Contains(res[0].Plan, "@id_idx(") {
				t.Fatalf("after %s: %s: %d rows through the index, a scan %d:\n%s", c.name, where, len(res[0].IDs()), len(want), res[0].Plan)
			}
			oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
			if ix := indexByName(t, oracle.Inspect(t, path, 0), "id_idx"); ix.UnindexedRows != 0 {
				t.Fatalf("real Lance's optimize after %s: %+v", c.name, ix)
			}
		})
	}
}
