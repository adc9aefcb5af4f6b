package engine_test

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

type ftsHit struct {
	ID    int64   `json:"id"`
	Score float64 `json:"_score"`
}

// ftsSearch runs the searches on path; every plan must read the FTS
// index (a FlatMatchQuery scan alone does not count).
func ftsSearch(t *testing.T, path string, ops []oracle.Op) [][]ftsHit {
	t.Helper()
	res := oracle.RunOps(t, path, ops)
	out := make([][]ftsHit, len(res))
	for i, raw := range res {
		var r struct {
			Data []ftsHit `json:"data"`
			Plan string   `json:"plan"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if !oracle.FTSThroughIndex(r.Plan) {
			t.Fatalf("%v: plan is no FTS query:\n%s", ops[i]["query"], r.Plan)
		}
		out[i] = r.Data
	}
	return out
}

func hitIDs(h []ftsHit) []int64 {
	ids := make([]int64, len(h))
	for i, x := range h {
		ids[i] = x.ID
	}
	slices.Sort(ids)
	return ids
}

// TestFTSCatchUpOracle: a table with an FTS index (lancedb's default
// params, and with positions), then many small appends (with accented and
// uppercase words) and some deletes by real Lance. lanced (plan + compact
// with the default policy until nothing is planned, and catch-up only)
// and real Lance's optimize() on a copy must both end with every live row
// indexed (indexStats) in one segment; match and phrase queries return
// the same rows on both, ranked alike; real Lance then keeps appending,
// optimizing and re-creating the index.
func TestFTSCatchUpOracle(t *testing.T) {
	oracle.Require(t)
	indexOnly := func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex }
	for _, c := range []struct {
		name     string
		position bool
		tune     func(*policy.Effective)
	}{
		{"default", false, nil},
		{"positions", true, nil},
		{"positions catch-up only", true, indexOnly},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testFTSCatchUp(t, c.position, c.tune)
		})
	}
}

func testFTSCatchUp(t *testing.T, position bool, tune func(*policy.Effective)) {
	dir := t.TempDir()
	path := oracle.Build(t, "sized-3x400-v0-t12-d0", filepath.Join(dir, "ours"))
	ops := []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": position}}}
	extra := []string{"Café naïve Façade über", "ZEBRA Zebras zebra's striped", "running runners ran quickly", "Ærøskøbing Łódź harbour", "the river and the mountain"}
	for i := range 8 {
		if i%2 == 0 {
			ops = append(ops, oracle.Op{"op": "add", "rows": 30 + 11*i, "seed": 100 + i})
		} else {
			ops = append(ops, oracle.Op{"op": "add", "texts": map[string]any{"body": extra[:2+i%4]}, "seed": 100 + i})
		}
		if i == 3 {
			ops = append(ops, oracle.Op{"op": "delete", "where": "id % 11 = 4"})
		}
	}
	ops = append(ops, oracle.Op{"op": "delete", "where": "id >= 1200 AND id % 9 = 2"})
	oracle.RunOps(t, path, ops)
	pre := oracle.Inspect(t, path, 0)
	if s := indexByName(t, pre, "body_idx"); s.UnindexedRows == 0 {
		t.Fatalf("setup: nothing unindexed: %+v", s)
	}
	var searches []oracle.Op
	q := func(query string, phrase bool) {
		op := oracle.Op{"op": "fts_search", "column": "body", "query": query, "k": 10000, "columns": []string{"id"}, "explain": true}
		if phrase {
			op["phrase"] = true
		}
		searches = append(searches, op)
	}
	for _, w := range []string{"river", "zebra", "run", "cafe", "café", "naive", "aerøskøbing", "aeroskobing", "lodz", "harbour copper", "stripe", "quick"} {
		q(w, false)
	}
	if position {
		q("river and the mountain", true)
		q("naïve façade", true)
	}
	before := ftsSearch(t, path, searches)

	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	if planned := compactUntilSettled(t, path, tune); planned < 1 {
		t.Fatalf("%d catch-up tasks planned", planned)
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if tune != nil && ours.Fragments != pre.Fragments {
		t.Fatalf("catch-up only: %d fragments, %d before", ours.Fragments, pre.Fragments)
	}
	oi, li := indexByName(t, ours, "body_idx"), indexByName(t, lance, "body_idx")
	t.Logf("fragments: before %d, ours %d, Lance's optimize %d; body_idx: ours %d indexed / %d unindexed in %d segment(s); Lance's %d / %d in %d",
		pre.Fragments, ours.Fragments, lance.Fragments, oi.IndexedRows, oi.UnindexedRows, oi.Segments, li.IndexedRows, li.UnindexedRows, li.Segments)
	if ours.Rows != lance.Rows || ours.Rows != pre.Rows || oi.UnindexedRows != 0 || oi.IndexedRows != ours.Rows || li.UnindexedRows != 0 || oi.Segments != 1 || li.Segments != 1 {
		t.Fatalf("indexStats: ours %+v, Lance %+v, rows %d/%d/%d", oi, li, ours.Rows, lance.Rows, pre.Rows)
	}
	got, want := ftsSearch(t, path, searches), ftsSearch(t, control, searches)
	nonEmpty, worst := 0, 0.0
	for i, s := range searches {
		g, w, b := hitIDs(got[i]), hitIDs(want[i]), hitIDs(before[i])
		if !slices.Equal(g, w) {
			t.Errorf("%q: ours %d rows, Lance's optimize %d", s["query"], len(g), len(w))
		}
		// Lance searches unindexed rows for match queries, not phrases.
		if s["phrase"] == nil && !slices.Equal(g, b) {
			t.Errorf("%q: %d rows after the catch-up, %d before", s["query"], len(g), len(b))
		}
		if len(g) > 0 {
			nonEmpty++
		}
		// Scores: BM25 over the same live documents; the partitions may
		// hold different rows (Lance compacts first), which moves scores
		// only slightly.
		d := maxScoreDiff(got[i], want[i])
		worst = math.Max(worst, d)
		if d > 0.05 {
			t.Errorf("%q: scores differ from Lance's by up to %.3f (relative)", s["query"], d)
		}
	}
	t.Logf("%d searches: same rows as Lance's optimize; scores within %.2g (relative)", len(searches), worst)
	if nonEmpty < len(searches)-2 {
		t.Fatalf("only %d of %d searches match a row", nonEmpty, len(searches))
	}

	// Real Lance keeps going on our table.
	more := []oracle.Op{{"op": "add", "rows": 90, "seed": 300}, {"op": "optimize"},
		{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": position}, "replace": true}}
	oracle.RunOps(t, path, more)
	after := oracle.Inspect(t, path, 0)
	if s := indexByName(t, after, "body_idx"); s.UnindexedRows != 0 || after.Rows != ours.Rows+90 {
		t.Fatalf("after real Lance: %+v, rows %d", s, after.Rows)
	}
	if again := ftsSearch(t, path, searches); len(again[0]) < len(got[0]) {
		t.Fatalf("after more appends: %q matches %d rows, %d before", searches[0]["query"], len(again[0]), len(got[0]))
	}
}

// maxScoreDiff is the largest relative score difference of a row both
// result lists hold.
func maxScoreDiff(a, b []ftsHit) float64 {
	sb := map[int64]float64{}
	for _, h := range b {
		sb[h.ID] = h.Score
	}
	worst := 0.0
	for _, h := range a {
		if s, ok := sb[h.ID]; ok && s != 0 {
			worst = math.Max(worst, math.Abs(h.Score-s)/math.Abs(s))
		}
	}
	return worst
}
