package engine_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func deferPolicy(e *policy.Effective) { e.Compaction.IndexCoverage.Value = policy.CoverageDefer }

// deferQueries are the filters the scalar indices serve (equality, IN and
// range on the BTree, equality and IN on the Bitmap) and FTS matches and a
// phrase, each with its plan.
func deferQueries() []oracle.Op {
	return []oracle.Op{
		{"op": "query", "where": "id IN (1, 5, 777, 1001, 1500, 2999, 3001, 3999, 4100, 4333)", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "id >= 1900 AND id < 3120", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "id = 1234", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "category = 'cat-2'", "columns": []string{"id"}, "explain": true},
		{"op": "query", "where": "category IN ('cat-1', 'cat-5')", "columns": []string{"id"}, "explain": true},
		{"op": "fts_search", "column": "body", "query": "river", "k": 10000, "columns": []string{"id"}, "explain": true},
		{"op": "fts_search", "column": "body", "query": "copper winter", "k": 10000, "columns": []string{"id"}, "explain": true},
		{"op": "fts_search", "column": "body", "query": "table", "k": 10000, "columns": []string{"id"}, "explain": true},
	}
}

// sameRows compares query results as sets of ids (FTS ties have no fixed
// order).
func sameRows(t *testing.T, what string, got, want []queryResult) {
	t.Helper()
	for i := range want {
		g, w := slices.Clone(got[i].IDs()), slices.Clone(want[i].IDs())
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Fatalf("%s: query %d (%v): %d rows, want %d\nplan:\n%s", what, i, deferQueries()[i], len(g), len(w), got[i].Plan)
		}
	}
}

// TestDeferCompactOracle: real Lance builds a table with a BTree, a Bitmap,
// a positional FTS and a vector index (deletes, index, appends, deletes).
// lanced compact with index_coverage = "defer" rewrites every fragment,
// leaves every index file alone and records the rewrite in the fragment
// reuse index (the BTree, which real Lance's optimize() does not read
// through it, is remapped in the same commit); a copy is compacted with
// immediate remap. Real Lance 8.0.0
// then answers every scalar filter and FTS query with the same rows as
// before and as the remapped copy, through its indices (explainPlan), and
// vector search goes through the index with recall@10 no worse than
// before; indexStats counts every row indexed as before. A second round of
// appends, deletes and deferred compaction chains a second reuse version.
// Then real Lance's delete, update, merge_insert, add_columns, optimize and
// createIndex(replace) keep every index, with the same rows as on the
// remapped copy; once every index was rebuilt past the reuse versions
// lanced's next deferred rewrite trims them.
func TestDeferCompactOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []remapEngineCase{
		{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
		{name: "hnsw_sq", typ: "hnsw_sq", options: map[string]any{"numPartitions": 4, "distanceType": "l2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testDeferCompact(t, c)
		})
	}
}

func testDeferCompact(t *testing.T, c remapEngineCase) {
	path := lanceTable(t, "sized-4x1000-v32-t12-d0",
		oracle.Op{"op": "delete", "where": "id % 10 = 0"},
		createIDIdx,
		oracle.Op{"op": "create_index", "column": "category", "type": "bitmap", "name": "cat_idx"},
		oracle.Op{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}, "name": "body_idx"},
		oracle.Op{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx"},
		oracle.Op{"op": "add", "rows": 200, "seed": 5},
		oracle.Op{"op": "add", "rows": 200, "seed": 6},
		oracle.Op{"op": "delete", "where": "id % 7 = 3"},
	)
	remapped := filepath.Join(t.TempDir(), "remapped.lance")
	oracle.CopyTree(t, path, remapped)
	names := []string{"body_idx", "cat_idx", "id_idx", "vec_idx"}

	pre := oracle.Inspect(t, path, 0)
	_, m0 := tabletest.Open(t, "file://"+path)
	before := oracle.Queries(t, path, deferQueries())
	qs := remapQueries(12)
	recallBefore, _ := recallAt10(t, path, qs, c)

	p := compactWith(t, path, deferPolicy)
	for _, n := range names {
		want := plan.IndexRemap // kinds real Lance does not read through it everywhere
		if n == "cat_idx" || (n == "vec_idx" && !strings.HasPrefix(c.typ, "hnsw")) {
			want = plan.IndexDeferred
		}
		if d := planIndex(p, n); d.Action != want || len(d.Rewritten) == 0 {
			t.Fatalf("%s decision %+v", n, d)
		}
	}
	compactWith(t, remapped, nil)

	fri, post := checkFirstDeferral(t, path, m0, pre, names)
	got := oracle.Queries(t, path, deferQueries())
	sameRows(t, "deferred vs before", got, before)
	sameRows(t, "deferred vs remapped", got, oracle.Queries(t, remapped, deferQueries()))
	for i, r := range got {
		through := strings.Contains(r.Plan, "ScalarIndexQuery")
		if i >= 5 {
			through = oracle.FTSThroughIndex(r.Plan)
		}
		if !through {
			t.Fatalf("query %d does not go through the index:\n%s", i, r.Plan)
		}
	}
	recallAfter, plans := recallAt10(t, path, qs, c)
	for _, pl := range plans {
		if !strings.Contains(pl, "ANN") {
			t.Fatalf("vector search does not go through the index:\n%s", pl)
		}
	}
	slack := 0.2 / float64(len(qs))
	if strings.HasPrefix(c.typ, "hnsw") {
		slack = 0.05
	}
	if recallAfter+slack < recallBefore {
		t.Fatalf("recall@10 before %.3f, deferred %.3f", recallBefore, recallAfter)
	}
	t.Logf("%s: fragments %d -> %d; recall@10 before %.3f deferred %.3f; reuse index %d bytes",
		c.name, pre.Fragments, post.Fragments, recallBefore, recallAfter, len(fri.GetIndexDetails().GetValue()))

	fr2 := deferSecondRound(t, path, remapped, qs, c)
	deferUnderLanceWrites(t, path, remapped, names, qs, c)

	// Rebuilt indices no longer need the reuse versions: lanced's next
	// deferred rewrite trims them.
	for _, ix := range []oracle.Op{
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx", "replace": true},
		{"op": "create_index", "column": "category", "type": "bitmap", "name": "cat_idx", "replace": true},
		{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}, "name": "body_idx", "replace": true},
		{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx", "replace": true},
		{"op": "add", "rows": 300, "seed": 10},
		{"op": "delete", "where": "id % 3 = 1"},
	} {
		oracle.RunOps(t, path, []oracle.Op{ix})
		oracle.RunOps(t, remapped, []oracle.Op{ix})
	}
	compactWith(t, path, func(e *policy.Effective) {
		deferPolicy(e)
		e.Compaction.MaterializeDeletionsThreshold.Value = 0.05
	})
	_, m3 := tabletest.Open(t, "file://"+path)
	fr3, err := index.DecodeFragReuse(index.FindFragReuse(m3.Indices.GetIndices()))
	if err != nil || len(fr3.Versions) != 1 || fr3.Versions[0].DatasetVersion <= fr2.Versions[1].DatasetVersion {
		t.Fatalf("after every index was rebuilt: reuse index %+v, %v (want only the newest version)", fr3, err)
	}
	sameRows(t, "after the trim", oracle.Queries(t, path, deferQueries()), oracle.Queries(t, remapped, deferQueries()))
	if got := indexNames(oracle.Inspect(t, path, 0)); !slices.Equal(got, names) {
		t.Fatalf("after the trim: indices %v", got)
	}
}

// checkFirstDeferral checks the table after the first deferred compaction:
// no deferred index's file was rewritten (the same segments, the BTree's
// remapped), the reuse index has one version, real Lance counts the same
// rows in fewer fragments with the same indexStats, and lanced's coverage
// agrees with real Lance's. It returns the reuse index entry and real
// Lance's report.
func checkFirstDeferral(t *testing.T, path string, m0 *format.Manifest, pre oracle.Report, names []string) (*tablepb.IndexMetadata, oracle.Report) {
	_, m1 := tabletest.Open(t, "file://"+path)
	rowSegs := func(m []*tablepb.IndexMetadata) []string {
		var out []string
		for _, x := range m {
			if n := x.GetName(); n != index.FragReuseName && index.Deferrable(index.Detect(x)) {
				out = append(out, (&index.Segment{Meta: x}).UUID())
			}
		}
		slices.Sort(out)
		return out
	}
	if a, b := rowSegs(m1.Indices.GetIndices()), rowSegs(m0.Indices.GetIndices()); !slices.Equal(a, b) {
		t.Fatalf("index segments %v, before %v: an index was rewritten", a, b)
	}
	fri := index.FindFragReuse(m1.Indices.GetIndices())
	if fri == nil {
		t.Fatal("no fragment reuse index committed")
	}
	fr, err := index.DecodeFragReuse(fri)
	if err != nil || len(fr.Versions) != 1 || fr.Versions[0].DatasetVersion != m0.Version() {
		t.Fatalf("reuse index %+v, %v", fr, err)
	}

	post := oracle.Inspect(t, path, 0)
	if post.Rows != pre.Rows || post.Fragments >= pre.Fragments {
		t.Fatalf("rows %d -> %d, fragments %d -> %d", pre.Rows, post.Rows, pre.Fragments, post.Fragments)
	}
	for _, n := range names {
		b, a := indexByName(t, pre, n), indexByName(t, post, n)
		if a.IndexedRows != b.IndexedRows || a.UnindexedRows != b.UnindexedRows {
			t.Fatalf("%s indexStats %d/%d before, %d/%d after", n, b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
		}
	}
	cov, err := index.CoverageOf(m1.PB.GetFragments(), m1.Indices.GetIndices())
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range cov {
		wantVersions := 1
		if !index.Deferrable(cv.Kind) {
			wantVersions = 0 // remapped in the same commit
		}
		if cv.IndexedRows != uint64(indexByName(t, post, cv.Name).IndexedRows) || cv.ReuseVersions != wantVersions {
			t.Fatalf("lanced's coverage of %s: %+v, real Lance %+v", cv.Name, cv, indexByName(t, post, cv.Name))
		}
	}
	return fri, post
}

// deferSecondRound appends and deletes on both copies, compacts path
// deferred and the copy remapped, and checks that the reuse index chains a
// second version and both answer alike. It returns that reuse index.
func deferSecondRound(t *testing.T, path, remapped string, qs [][]float32, c remapEngineCase) *index.FragReuse {
	round2 := []oracle.Op{
		{"op": "add", "rows": 300, "seed": 8},
		{"op": "delete", "where": "id % 11 = 4"},
	}
	oracle.RunOps(t, path, round2)
	oracle.RunOps(t, remapped, round2)
	compactWith(t, path, func(e *policy.Effective) {
		deferPolicy(e)
		e.Compaction.MaterializeDeletionsThreshold.Value = 0.05
	})
	compactWith(t, remapped, func(e *policy.Effective) { e.Compaction.MaterializeDeletionsThreshold.Value = 0.05 })
	_, m2 := tabletest.Open(t, "file://"+path)
	fr2, err := index.DecodeFragReuse(index.FindFragReuse(m2.Indices.GetIndices()))
	if err != nil || len(fr2.Versions) != 2 {
		t.Fatalf("after the second deferred compaction: reuse index %+v, %v", fr2, err)
	}
	sameRows(t, "second round vs remapped", oracle.Queries(t, path, deferQueries()), oracle.Queries(t, remapped, deferQueries()))
	if _, plans := recallAt10(t, path, qs[:2], c); !strings.Contains(plans[0], "ANN") {
		t.Fatalf("second round: vector search not through the index:\n%s", plans[0])
	}

	return fr2
}

// deferUnderLanceWrites has real Lance write on top of both copies; after
// each write every index stays and answers as on the remapped copy.
func deferUnderLanceWrites(t *testing.T, path, remapped string, names []string, qs [][]float32, c remapEngineCase) {
	for _, op := range []oracle.Op{
		{"op": "delete", "where": "id % 13 = 5"},
		{"op": "update", "where": "id % 17 = 2", "values_sql": map[string]string{"category": "'cat-upd'"}},
		{"op": "merge_insert", "on": "id", "rows": 40, "seed": 9, "id_start": 3990},
		{"op": "add_columns", "columns": []map[string]string{{"name": "twice", "value_sql": "id * 2"}}},
		{"op": "optimize"},
		{"op": "delete", "where": "id % 3 = 0"}, // makes Lance's optimize() compact
		{"op": "optimize"},
	} {
		oracle.RunOps(t, path, []oracle.Op{op})
		oracle.RunOps(t, remapped, []oracle.Op{op})
		r := oracle.Inspect(t, path, 0)
		if got := indexNames(r); !slices.Equal(got, names) {
			t.Fatalf("after real Lance's %v: indices %v, want %v", op["op"], got, names)
		}
		if ix := indexByName(t, r, "vec_idx"); ix.IndexedRows == 0 {
			t.Fatalf("after real Lance's %v: vec_idx indexes nothing: %+v", op["op"], ix)
		}
		sameRows(t, "after real Lance's "+op["op"].(string), oracle.Queries(t, path, deferQueries()), oracle.Queries(t, remapped, deferQueries()))
		ra, plans := recallAt10(t, path, qs[:4], c)
		rb, _ := recallAt10(t, remapped, qs[:4], c)
		if ra+0.1 < rb || !strings.Contains(plans[0], "ANN") {
			t.Fatalf("after real Lance's %v: recall@10 %.3f, remapped copy %.3f\n%s", op["op"], ra, rb, plans[0])
		}
	}
}
