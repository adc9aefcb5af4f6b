package engine_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// textQueries are match queries and, for a positional index, phrases of
// two adjacent longer words cut from live rows.
func textQueries(t *testing.T, path string, phrases bool) []oracle.Op {
	t.Helper()
	var ops []oracle.Op
	for _, w := range []string{"river", "harbour", "copper winter", "table"} {
		ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 10000, "columns": []string{"id"}, "explain": true})
	}
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "query", "where": "id % 37 = 5", "columns": []string{"id", "body"}, "limit": 40}})
	var r struct {
		Data []struct {
			Body string `json:"body"`
		} `json:"data"`
	}
	if err := json.Unmarshal(res[0], &r); err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Data {
		w := strings.Fields(d.Body)
		for k := 0; phrases && k+1 < len(w); k++ {
			if len(w[k]) >= 5 && len(w[k+1]) >= 5 {
				ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w[k] + " " + w[k+1], "phrase": true, "k": 10000, "columns": []string{"id"}, "explain": true})
				break
			}
		}
	}
	return ops
}

func textSearch(t *testing.T, path string, ops []oracle.Op) []queryResult {
	t.Helper()
	return oracle.Queries(t, path, ops)
}

// TestRemapTextCompactOracle: real Lance builds a table with a positional
// FTS index (deletes, index, appends, deletes); lanced compact with the
// default policy rewrites the indexed fragments and remaps the FTS index
// in the same commit; real Lance's optimize() does the same on a copy.
// Match and phrase queries through lanced's remapped index return the rows
// they returned before, and Lance's, indexStats is unchanged, and the
// index survives real Lance's delete and optimize. An FM index whose
// partitions pass index.fm_max_bytes keeps its fragments, with the numbers
// (TestRemapFMCompactOracle rebuilds one within the bound).
func TestRemapTextCompactOracle(t *testing.T) {
	oracle.Require(t)
	t.Run("fts", func(t *testing.T) {
		t.Parallel()
		path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
		oracle.RunOps(t, path, []oracle.Op{
			{"op": "delete", "where": "id % 10 = 0"},
			{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}, "name": "body_idx"},
			{"op": "add", "rows": 200, "seed": 5},
			{"op": "add", "rows": 200, "seed": 6},
			{"op": "delete", "where": "id % 7 = 3"},
		})
		control := filepath.Join(t.TempDir(), "control.lance")
		oracle.CopyTree(t, path, control)
		pre := oracle.Inspect(t, path, 0)
		ops := textQueries(t, path, true)
		before := textSearch(t, path, ops)

		p := compactWith(t, path, nil)
		if d := planIndex(p, "body_idx"); d.Action != plan.IndexRemap || len(d.Rewritten) == 0 {
			t.Fatalf("body_idx decision %+v", d)
		}
		oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})
		post := oracle.Inspect(t, path, 0)
		if post.Rows != pre.Rows || post.Fragments >= pre.Fragments {
			t.Fatalf("rows %d -> %d, fragments %d -> %d", pre.Rows, post.Rows, pre.Fragments, post.Fragments)
		}
		b, a := indexByName(t, pre, "body_idx"), indexByName(t, post, "body_idx")
		if a.IndexedRows != b.IndexedRows || a.UnindexedRows != b.UnindexedRows {
			t.Fatalf("indexStats %d/%d before, %d/%d after", b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
		}
		after := textSearch(t, path, ops)
		lance := textSearch(t, control, ops)
		for i := range ops {
			kind := "MatchQuery"
			if ops[i]["phrase"] == true {
				kind = "PhraseQuery"
			}
			if !oracle.PlanHasNode(after[i].Plan, kind) {
				t.Fatalf("%v: plan has no %s:\n%s", ops[i]["query"], kind, after[i].Plan)
			}
			if !slices.Equal(after[i].IDs(), before[i].IDs()) || len(before[i].IDs()) == 0 {
				t.Fatalf("%v: %d rows after lanced's compaction, %d before", ops[i]["query"], len(after[i].IDs()), len(before[i].IDs()))
			}
			// Lance's optimize() also indexes the appended rows (ids from
			// 2000), which unindexed phrase search can miss; on the rows
			// both indices cover the answers are equal.
			for _, id := range after[i].IDs() {
				if !slices.Contains(lance[i].IDs(), id) {
					t.Fatalf("%v: row %d found through lanced's index, not after Lance's optimize", ops[i]["query"], id)
				}
			}
			for _, id := range lance[i].IDs() {
				if id < 2000 && !slices.Contains(after[i].IDs(), id) {
					t.Fatalf("%v: indexed row %d found after Lance's optimize, not through lanced's index", ops[i]["query"], id)
				}
			}
		}
		// Real Lance keeps using and maintaining the index.
		oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id % 11 = 4"}, {"op": "optimize"}})
		last := oracle.Inspect(t, path, 0)
		if ix := indexByName(t, last, "body_idx"); ix.IndexedRows != int64(last.Rows) {
			t.Fatalf("after Lance's delete+optimize: body_idx indexes %d of %d rows", ix.IndexedRows, last.Rows)
		}
		again := textSearch(t, path, ops[:1])
		if len(again[0].IDs()) == 0 || !oracle.PlanHasNode(again[0].Plan, "MatchQuery") {
			t.Fatalf("after Lance's optimize: %d rows, plan:\n%s", len(again[0].IDs()), again[0].Plan)
		}
		t.Logf("%d match/phrase queries: same rows through lanced's remapped FTS index as before, and as after Lance's optimize() on the rows both indices cover", len(ops))
	})
	t.Run("fm", func(t *testing.T) {
		t.Parallel()
		path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
		oracle.RunOps(t, path, []oracle.Op{
			{"op": "delete", "where": "id % 10 = 0"},
			{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		})
		pre := oracle.Inspect(t, path, 0)
		p := compactWith(t, path, func(e *policy.Effective) { e.Index.FMMaxBytes.Value = 4 << 10 })
		d := planIndex(p, "body_idx")
		if d.Action != plan.IndexKeep || !strings.Contains(d.Reason, "over index.fm_max_bytes 4096") {
			t.Fatalf("body_idx decision %+v", d)
		}
		post := oracle.Inspect(t, path, 0)
		if post.Fragments != pre.Fragments || post.Rows != pre.Rows {
			t.Fatalf("fragments %d -> %d, rows %d -> %d: FM-covered fragments were rewritten", pre.Fragments, post.Fragments, pre.Rows, post.Rows)
		}
		t.Logf("fm: %s", d.Reason)
	})
}
