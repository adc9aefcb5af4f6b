package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCompactCatchesUpVectorIndex: one `lanced compact` with the default
// policy on a table whose IVF_PQ index misses two small appends rewrites
// the appends and then adds their rows to the index, so real Lance counts
// no unindexed row in it (the BTree, which lanced does not catch up yet,
// keeps its backlog).
func TestCompactCatchesUpVectorIndex(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "indexed", t.TempDir())
	pre := oracle.Inspect(t, path, 0)
	var out, errb bytes.Buffer
	if err := runCompact(context.Background(), []string{path, "--json"}, &out, &errb); err != nil {
		t.Fatalf("compact: %v\n%s", err, errb.String())
	}
	var sum engine.Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	post := oracle.Inspect(t, path, 0)
	var unindexed int64 = -1
	for _, ix := range post.Indices {
		if ix.Name == "vec_idx" {
			unindexed = ix.UnindexedRows
		}
	}
	if post.Rows != pre.Rows || unindexed != 0 || sum.RowsIndexed != 300 || sum.IndexSegments != 1 || len(sum.VersionsCommitted) != 2 {
		t.Fatalf("rows %d -> %d, vec_idx unindexed %d; summary %+v", pre.Rows, post.Rows, unindexed, sum)
	}
}
