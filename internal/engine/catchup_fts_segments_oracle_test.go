package engine_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestFTSCatchUpSegmentsOracle: an FTS index (with positions) of two
// segments: one built by real Lance over fragment 0, one built by real
// Lance over fragment 1 on a copy and committed as a second segment (a
// distributed build's shape), then appends by real Lance. lanced's
// catch-up merges both segments' partitions and the new rows' into one
// segment; afterwards every live row is indexed and real Lance's match and
// phrase queries (words and phrases from rows of both segments and of the
// appended rows) return the same rows as real Lance's optimize() on a copy
// and as before the catch-up; real Lance keeps appending and optimizing.
func TestFTSCatchUpSegmentsOracle(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	path := oracle.Build(t, "sized-1x4000-v0-t12-d0", filepath.Join(dir, "ours.lance"))
	buildTwoSegmentIndices(t, path, []scalarSegmentIndex{{"body", "fts", "body_idx"}}, map[string]any{"withPosition": true})
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "add", "rows": 300, "seed": 41},
		{"op": "add", "texts": map[string]any{"body": []string{"Café naïve Façade über", "the river and the mountain", "ZEBRA Zebras zebra's striped"}}, "seed": 42},
		{"op": "delete", "where": "id % 13 = 5"},
	})
	pre := oracle.Inspect(t, path, 0)
	if s := indexByName(t, pre, "body_idx"); s.Segments != 2 || s.UnindexedRows == 0 {
		t.Fatalf("setup: %+v", s)
	}
	searches := ftsSegmentSearches(t, path)
	before := ftsSearch(t, path, searches)

	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	if planned := compactUntilSettled(t, path, func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex }); planned != 1 {
		t.Fatalf("%d catch-ups planned, want 1", planned)
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	oi, li := indexByName(t, ours, "body_idx"), indexByName(t, lance, "body_idx")
	t.Logf("body_idx: ours %d indexed / %d unindexed in %d segment(s); Lance's optimize %d / %d in %d", oi.IndexedRows, oi.UnindexedRows, oi.Segments, li.IndexedRows, li.UnindexedRows, li.Segments)
	if oi.UnindexedRows != 0 || oi.IndexedRows != ours.Rows || oi.Segments != 1 || li.UnindexedRows != 0 || ours.Rows != lance.Rows {
		t.Fatalf("indexStats: ours %+v, Lance %+v", oi, li)
	}
	got, want := ftsSearch(t, path, searches), ftsSearch(t, control, searches)
	nonEmpty := 0
	for i, s := range searches {
		g, w, b := hitIDs(got[i]), hitIDs(want[i]), hitIDs(before[i])
		if !slices.Equal(g, w) {
			t.Errorf("%q (phrase %v): ours %d rows, Lance's optimize %d", s["query"], s["phrase"], len(g), len(w))
		}
		// Lance searches unindexed rows for match queries, not phrases.
		if s["phrase"] == nil && !slices.Equal(g, b) {
			t.Errorf("%q: %d rows after the catch-up, %d before", s["query"], len(g), len(b))
		}
		if len(g) > 0 {
			nonEmpty++
		}
	}
	t.Logf("%d searches (%d with hits): same rows as Lance's optimize", len(searches), nonEmpty)
	if nonEmpty < len(searches)-1 {
		t.Fatalf("only %d of %d searches match a row", nonEmpty, len(searches))
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 90, "seed": 43}, {"op": "optimize"}})
	if s := indexByName(t, oracle.Inspect(t, path, 0), "body_idx"); s.UnindexedRows != 0 {
		t.Fatalf("after real Lance: %+v", s)
	}
	if again := ftsSearch(t, path, searches); len(again[0]) < len(got[0]) {
		t.Fatalf("after more appends: %q matches %d rows, %d before", searches[0]["query"], len(again[0]), len(got[0]))
	}
}

// ftsSegmentSearches are match and phrase searches over body: a word and
// a three-word phrase of rows in fragment 0 (the first segment), fragment
// 1 (the second) and the appended rows, plus fixed words and phrases.
func ftsSegmentSearches(t *testing.T, path string) []oracle.Op {
	t.Helper()
	tbl := oracle.ScanWith(t, path, oracle.ScanOptions{Columns: []string{"id", "body"}, Where: "(id >= 17 AND id < 27) OR (id >= 2500 AND id < 2510) OR (id >= 4321 AND id < 4331) OR (id >= 5000 AND id < 5010) OR (id >= 5600 AND id < 5610)"})
	tr := array.NewTableReader(tbl, 100)
	defer tr.Release()
	// One row of at least 6 words per id range (some rows have no text).
	byRange := map[int64]string{}
	for tr.Next() {
		rec := tr.RecordBatch()
		ids, bodies := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			if r := ids.Value(i) / 100; byRange[r] == "" && !bodies.IsNull(i) && len(strings.Fields(bodies.Value(i))) >= 6 {
				byRange[r] = bodies.Value(i)
			}
		}
	}
	if len(byRange) != 5 {
		t.Fatalf("setup: texts of %d id ranges", len(byRange))
	}
	var texts []string
	for _, r := range slices.Sorted(maps.Keys(byRange)) {
		texts = append(texts, byRange[r])
	}
	var out []oracle.Op
	q := func(query string, phrase bool) {
		op := oracle.Op{"op": "fts_search", "column": "body", "query": query, "k": 10000, "columns": []string{"id"}, "explain": true}
		if phrase {
			op["phrase"] = true
		}
		out = append(out, op)
	}
	for _, text := range texts {
		w := strings.Fields(text)
		q(w[1], false)
		q(strings.Join(w[2:5], " "), true)
	}
	for _, w := range []string{"river", "zebra", "cafe", "naive", "mountain"} {
		q(w, false)
	}
	q("river and the mountain", true)
	q("naïve façade", true)
	return out
}
