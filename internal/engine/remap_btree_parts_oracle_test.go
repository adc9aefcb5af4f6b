package engine_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRemapBTreeInPartsOracle: real Lance builds 4 fragments of 5,000
// rows with a BTree on id (pages of 4,096 rows), appends and deletes; with
// index.remap_part_bytes = 16 KiB the plan says the remap runs in at least
// 3 part tasks by page range. Three copies are compacted: by lanced
// compact (parts and join in its own process), through the daemon's
// queued flow (part tasks, then the join, handed back by commits), and
// with the default policy (one task). Real Lance then reads the same rows
// on all three, counts the same indexed and unindexed rows as before, and
// its equality, range and IN filters go through the index and return the
// same ids as before.
func TestRemapBTreeInPartsOracle(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, oracle.Sized{Fragments: 4, RowsPerFragment: 5000, VectorDim: 8}.Scenario(), t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "add", "rows": 500, "seed": 5},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	queued, oneTask, pre, wantDigest := partsCopies(t, path)
	var ops []oracle.Op
	for _, w := range []string{"id = 12345", "id >= 4000 AND id < 4300", "id > 19990", "id IN (1, 7, 333, 4097, 8193, 12289, 19999)"} {
		ops = append(ops, oracle.Op{"op": "query", "where": w, "columns": []string{"id"}, "explain": true})
	}
	before := oracle.Queries(t, path, ops)

	parts := compactInParts(t, path, queued, "id_idx", "page range")
	compactWith(t, oneTask, nil)

	partsOf := map[string]int{path: parts, queued: parts, oneTask: 1}
	for _, at := range []string{path, queued, oneTask} {
		post, a := checkCompactedIndexed(t, at, pre, wantDigest, "id_idx")
		for i, r := range oracle.Queries(t, at, ops) {
			if !strings.Contains(r.Plan, "ScalarIndexQuery") {
				t.Fatalf("%s: %v does not go through the index:\n%s", at, ops[i]["where"], r.Plan)
			}
			if want := before[i].IDs(); len(want) == 0 || !slices.Equal(r.IDs(), want) {
				t.Fatalf("%s: %v: ids %v, before %v", at, ops[i]["where"], r.IDs(), want)
			}
		}
		t.Logf("%s (%d parts): fragments %d -> %d, id_idx indexStats %d/%d, %d filters same ids through the index",
			filepath.Base(at), partsOf[at], pre.Fragments, post.Fragments, a.IndexedRows, a.UnindexedRows, len(ops))
	}
	want := btreeLookup(t, oneTask)
	for _, at := range []string{path, queued} {
		if !bytes.Equal(btreeLookup(t, at), want) {
			t.Fatalf("%s: page_lookup.lance of the joined segment differs from the one-task remap's", at)
		}
	}
}

// btreeLookup reads id_idx's page_lookup.lance at the latest version of
// the table at path.
func btreeLookup(t *testing.T, path string) []byte {
	t.Helper()
	m := indextest.ReadManifest(t, path, oracle.Inspect(t, path, 0).Version)
	b, err := os.ReadFile(filepath.Join(path, "_indices", indextest.UUID(t, indextest.Index(t, m, "id_idx").GetUuid()), scalar.BTreeLookupFileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
