package index_test

import (
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCoverageMatchesIndexStats: the indexed and unindexed row counts
// lanced computes from the manifest equal real Lance's indexStats, on a
// table with unindexed appends and deletions and on one real Lance
// compacted and remapped.
func TestCoverageMatchesIndexStats(t *testing.T) {
	oracle.Require(t)
	for _, c := range []struct {
		name, scenario string
		ops            []oracle.Op
	}{
		{name: "indexed", scenario: "indexed"},
		{name: "deleted", scenario: "indexed", ops: []oracle.Op{{"op": "delete", "where": "id % 10 = 0 OR id > 2250"}}},
		{name: "compacted", scenario: "compacted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := oracle.Build(t, c.scenario, t.TempDir())
			if c.ops != nil {
				oracle.RunOps(t, path, c.ops)
			}
			m := tabletest.Latest(t, path)
			cov, err := index.CoverageOf(m.PB.GetFragments(), m.Indices.GetIndices())
			if err != nil {
				t.Fatal(err)
			}
			rep := oracle.Inspect(t, path, 0)
			if len(cov) != len(rep.Indices) {
				t.Fatalf("lanced sees %d indices, Lance %d", len(cov), len(rep.Indices))
			}
			for _, ix := range rep.Indices {
				found := false
				for _, c := range cov {
					if c.Name != ix.Name {
						continue
					}
					found = true
					if int64(c.IndexedRows) != ix.IndexedRows || int64(c.UnindexedRows) != ix.UnindexedRows {
						t.Fatalf("%s: lanced %d indexed / %d unindexed, Lance %d / %d", ix.Name, c.IndexedRows, c.UnindexedRows, ix.IndexedRows, ix.UnindexedRows)
					}
					if ix.Segments >= 0 && int64(c.Segments) != ix.Segments {
						t.Fatalf("%s: %d segments, Lance %d", ix.Name, c.Segments, ix.Segments)
					}
				}
				if !found {
					t.Fatalf("lanced misses index %s", ix.Name)
				}
			}
			t.Logf("%s: %+v", c.scenario, cov)
		})
	}
}
