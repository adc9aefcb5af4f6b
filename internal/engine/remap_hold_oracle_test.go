package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestUnremappableIndexHoldsTable: a real-Lance table whose BTree segment
// has a damaged file. The compaction's remap of that segment fails, the
// rewrite is dropped (nothing committed but the fragment-id reservation),
// and the table is held with a reason naming the index and what to do, so
// the daemon does not plan, reserve and fail again on every new version.
func TestUnremappableIndexHoldsTable(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
	})
	pre := oracle.Inspect(t, path, 0)
	// Damage every file of the segment: keep its first half only.
	damaged := 0
	dirs, _ := filepath.Glob(filepath.Join(path, "_indices", "*"))
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*"))
		for _, f := range files {
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, st.Size()/2); err != nil {
				t.Fatal(err)
			}
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no index files found")
	}
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, nil)
	if len(p.Rewrites) == 0 {
		t.Fatalf("nothing planned: %+v", p.Decisions)
	}
	sum, _ := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{})
	if sum.TasksCommitted != 0 || len(sum.Dropped) == 0 {
		t.Fatalf("a rewrite committed without its index remapped: %+v", sum)
	}
	h, err := hold.Get(context.Background(), tbl.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || !strings.Contains(h.Reason, `"id_idx"`) || !strings.Contains(h.Reason, "holds release") {
		t.Fatalf("table not held with a reason naming the index: %+v", h)
	}
	_, latest := tabletest.Open(t, "file://"+path)
	if len(latest.PB.GetFragments()) != pre.Fragments {
		t.Fatalf("fragments %d -> %d", pre.Fragments, len(latest.PB.GetFragments()))
	}
	t.Logf("held: %s", h.Reason)
}
