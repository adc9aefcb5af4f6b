package oracle

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

type opResult struct {
	Op       string            `json:"op"`
	Version  uint64            `json:"version"`
	Rows     int64             `json:"rows"`
	Count    int64             `json:"count"`
	Tags     map[string]uint64 `json:"tags"`
	Versions []uint64          `json:"versions"`
	Stats    struct {
		Compaction struct {
			FragmentsRemoved int `json:"fragmentsRemoved"`
			FragmentsAdded   int `json:"fragmentsAdded"`
		} `json:"compaction"`
		Prune struct {
			OldVersionsRemoved int `json:"oldVersionsRemoved"`
		} `json:"prune"`
	} `json:"stats"`
	Data []map[string]any `json:"data"`
}

func decodeResults(t *testing.T, raw []json.RawMessage) []opResult {
	t.Helper()
	out := make([]opResult, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("result %d %s: %v", i, r, err)
		}
	}
	return out
}

// TestOps runs every op kind with real Lance on a copy of the indexed
// scenario and checks the outcomes with independent reads.
func TestOps(t *testing.T) {
	Require(t)
	path := Build(t, "indexed", t.TempDir())
	before := Inspect(t, path, 0)
	raw := RunOps(t, path, []Op{
		{"op": "add", "rows": 50, "seed": 3}, // ids 2300..2349
		{"op": "delete", "where": "id < 10"}, // -10
		{"op": "update", "where": "id = 20", "values_sql": map[string]string{"category": "'updated'"}},
		{"op": "query", "where": "id = 20", "columns": []string{"id", "category"}},
		{"op": "vector_search", "column": "vec", "vector": make([]float32, 32), "k": 3, "columns": []string{"id"}},
		{"op": "add_columns", "columns": []map[string]string{{"name": "twice", "value_sql": "id * 2"}}},
		{"op": "drop_columns", "columns": []string{"twice"}},
		{"op": "create_index", "column": "category", "type": "bitmap"},
		{"op": "tag", "name": "keep", "version": before.Version},
		{"op": "count_rows", "where": "category = 'updated'"},
		{"op": "optimize"},
	})
	res := decodeResults(t, raw)
	wantEq(t, "ops", len(res), 11)
	wantEq(t, "rows after add", res[0].Rows, before.Rows+50)
	wantEq(t, "rows after delete", res[1].Rows, before.Rows+40)
	if len(res[3].Data) != 1 || res[3].Data[0]["category"] != "updated" {
		t.Errorf("query after update: %v", res[3].Data)
	}
	wantEq(t, "vector search hits", len(res[4].Data), 3)
	wantEq(t, "tag", res[8].Tags["keep"], before.Version)
	wantEq(t, "count where updated", res[9].Count, int64(1))
	if res[10].Stats.Compaction.FragmentsRemoved == 0 {
		t.Errorf("optimize compacted nothing: %+v", res[10].Stats)
	}
	for i, r := range raw {
		if d := Elapsed(t, r); d <= 0 {
			t.Errorf("op %d (%s): elapsed %v", i, res[i].Op, d)
		}
	}

	after := Inspect(t, path, 0)
	wantEq(t, "version", after.Version, res[10].Version)
	wantEq(t, "rows", after.Rows, before.Rows+40)
	wantEq(t, "indices", len(after.Indices), 3)
	if after.Fragments >= before.Fragments+1 {
		t.Errorf("fragments %d after optimize, %d before plus one add", after.Fragments, before.Fragments)
	}

	// A tag on an old version makes cleanup fail in real Lance; after
	// deleting the tag it removes every old version.
	_, err := TryOps(t, path, []Op{{"op": "cleanup", "older_than_ms": 0}})
	if err == nil || !strings.Contains(err.Error(), "tagged") {
		t.Fatalf("cleanup with a tag on an old version: err = %v", err)
	}
	raw = RunOps(t, path, []Op{
		{"op": "tag", "action": "delete", "name": "keep"},
		{"op": "cleanup", "older_than_ms": 0, "delete_unverified": true},
	})
	res = decodeResults(t, raw)
	if res[1].Stats.Prune.OldVersionsRemoved == 0 {
		t.Errorf("cleanup removed no versions: %s", raw[1])
	}
	final := Inspect(t, path, 0)
	// optimize prunes after compacting, then commits its index optimization
	// as one more version: at most the pruned-to version and that one stay.
	if len(final.Versions) > 2 || len(final.Versions) >= len(after.Versions) {
		t.Errorf("versions after cleanup %v (before %v)", final.Versions, after.Versions)
	}
	wantEq(t, "rows after cleanup", final.Rows, before.Rows+40)

	// checkout_version reads an old version inside one ops call.
	raw = RunOps(t, path, []Op{
		{"op": "add", "rows": 5, "seed": 1},
		{"op": "alter_columns", "alterations": []map[string]any{{"path": "category", "rename": "kind"}}},
		{"op": "checkout_version", "version": final.Version},
		{"op": "count_rows"},
	})
	res = decodeResults(t, raw)
	wantEq(t, "rows at checked-out version", res[3].Count, final.Rows)
	renamed := Inspect(t, path, 0)
	var names []string
	for _, f := range renamed.Schema {
		names = append(names, f.Name)
	}
	wantEq(t, "columns after rename", strings.Join(names, ","), "id,kind,vec")
}

// TestOptimizeKeepsData: real Lance's own compaction of deletes_arrow keeps
// every live row (by id) and, as observed in lance 8.0.0, the scan order.
func TestOptimizeKeepsData(t *testing.T) {
	Require(t)
	path := Build(t, "deletes_arrow", t.TempDir())
	before := Scan(t, path, 0, nil)
	res := decodeResults(t, RunOps(t, path, []Op{{"op": "optimize"}}))
	if res[0].Stats.Compaction.FragmentsRemoved == 0 {
		t.Fatalf("optimize did not compact: %+v", res[0].Stats)
	}
	after := Scan(t, path, 0, nil)
	EqualByKey(t, before, after, "id")
	if d := Diff(before, after); d != "" {
		t.Errorf("scan order changed by compaction:\n%s", d)
	}
	wantEq(t, "fragments after optimize", Inspect(t, path, 0).Fragments, 1)
}

// TestConcurrentWriters: two real-Lance writers (RunOpsContext: two calls
// in the shared server; RunOpsProcess: a node process each) append to one
// table at once; every append lands.
func TestConcurrentWriters(t *testing.T) {
	Require(t)
	path := Build(t, "v1_paths", t.TempDir())
	before := Inspect(t, path, 0)
	ops := func(seed int) []Op {
		var o []Op
		for i := 0; i < 8; i++ {
			o = append(o, Op{"op": "add", "rows": 1, "seed": seed + i, "id_start": 100000 + seed*100 + i})
		}
		return o
	}
	ctx, cancel := testContext(t)
	defer cancel()
	errs := make(chan error, 2)
	run := []func(context.Context, string, []Op, ...Options) ([]json.RawMessage, error){RunOpsContext, RunOpsContext, RunOpsProcess, RunOpsProcess}
	for i, f := range run {
		go func() {
			_, err := f(ctx, path, ops(i+1))
			errs <- err
		}()
	}
	for range run {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	after := Inspect(t, path, 0)
	wantEq(t, "rows", after.Rows, before.Rows+32)
	wantEq(t, "version", after.Version, before.Version+32)
	ids := Scan(t, path, 0, []string{"id"})
	seen := map[int64]bool{}
	for _, c := range ids.Column(0).Data().Chunks() {
		for _, v := range c.(*array.Int64).Int64Values() {
			if seen[v] {
				t.Fatalf("id %d twice", v)
			}
			seen[v] = true
		}
	}
	for w := 1; w <= 4; w++ {
		for i := 0; i < 8; i++ {
			if !seen[int64(100000+w*100+i)] {
				t.Errorf("writer %d append %d missing", w, i)
			}
		}
	}
}
