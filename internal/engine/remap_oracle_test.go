package engine_test

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

type remapEngineCase struct {
	name    string
	typ     string
	options map[string]any
	btree   bool // also a BTree on id, remapped in the same commit
	refine  int  // refineFactor of the searches through the index (0: none)
}

var remapEngineCases = []remapEngineCase{
	{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
	{name: "ivf_flat", typ: "ivf_flat", options: map[string]any{"numPartitions": 4, "distanceType": "l2"}},
	{name: "ivf_rq", typ: "ivf_rq", options: map[string]any{"numPartitions": 4, "distanceType": "l2"}},
	{name: "ivf_rq_3bit", typ: "ivf_rq", options: map[string]any{"numPartitions": 4, "numBits": 3, "distanceType": "l2"}},
	{name: "hnsw_sq", typ: "hnsw_sq", options: map[string]any{"numPartitions": 4, "distanceType": "l2"}},
	{name: "hnsw_pq", typ: "hnsw_pq", options: map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
	{name: "ivf_pq+btree", typ: "ivf_pq", options: map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}, btree: true},
}

// TestRemapCompactOracle: real Lance builds a table (appends, deletes, a
// vector index, more appends and deletes); lanced compact with the default
// policy rewrites the indexed fragments and remaps the index in the same
// Rewrite commit; real Lance's optimize() does the same on a copy. Real
// Lance then searches through lanced's remapped index (explainPlan), with
// recall@10 against an exact search no worse than before compaction (and
// than Lance's own result, within one hit), counts the same indexed and
// unindexed rows as before, and keeps the index through its own delete,
// update, merge_insert, add_columns, optimize and createIndex(replace).
// The recall bound also holds with Lance's default nprobes and, for
// quantized codes, with a refine factor.
func TestRemapCompactOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range remapEngineCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testRemapCompact(t, c)
		})
	}
}

func testRemapCompact(t *testing.T, c remapEngineCase) {
	path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
	ops := []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx"},
	}
	if c.btree {
		ops = append(ops, oracle.Op{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"})
	}
	control := runThenCopy(t, path, append(ops, appendsThenDeletes...))
	beforeCopy := filepath.Join(t.TempDir(), "before.lance")
	oracle.CopyTree(t, path, beforeCopy)

	pre := oracle.Inspect(t, path, 0)
	qs := remapQueries(16)
	recallBefore, _ := recallAt10(t, path, qs, c)

	p := compactWith(t, path, nil)
	var vd plan.IndexDecision
	for _, d := range p.Indices {
		if d.Name == "vec_idx" {
			vd = d
		}
	}
	if vd.Action != plan.IndexRemap || len(vd.Rewritten) == 0 {
		t.Fatalf("vec_idx decision %+v\n%+v", vd, p.Decisions)
	}
	if c.btree {
		if d := planIndex(p, "id_idx"); d.Action != plan.IndexRemap {
			t.Fatalf("id_idx decision %+v", d)
		}
	}
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	post := oracle.Inspect(t, path, 0)
	if post.Rows != pre.Rows {
		t.Fatalf("rows %d -> %d", pre.Rows, post.Rows)
	}
	if post.Fragments >= pre.Fragments {
		t.Fatalf("fragments %d -> %d", pre.Fragments, post.Fragments)
	}
	for _, ix := range pre.Indices {
		b, a := ix, indexByName(t, post, ix.Name)
		if a.IndexedRows != b.IndexedRows || a.UnindexedRows != b.UnindexedRows {
			t.Fatalf("%s indexStats %d/%d before, %d/%d after", ix.Name, b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
		}
	}
	if c.btree {
		q := oracle.RunOps(t, path, []oracle.Op{{"op": "query", "where": "id IN (1, 7, 555, 1234, 3999, 4100)", "columns": []string{"id"}, "explain": true}})
		qc := oracle.RunOps(t, control, []oracle.Op{{"op": "query", "where": "id IN (1, 7, 555, 1234, 3999, 4100)", "columns": []string{"id"}}})
		var got, want queryResult
		if err := json.Unmarshal(q[0], &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(qc[0], &want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs(), want.IDs()) || !strings.Contains(got.Plan, "ScalarIndexQuery") {
			t.Fatalf("btree filter: ids %v, control %v; plan:\n%s", got.IDs(), want.IDs(), got.Plan)
		}
	}
	a := indexByName(t, post, "vec_idx")
	recallAfter, plans := recallAt10(t, path, qs, c)
	recallLance, _ := recallAt10(t, control, qs, c)
	for _, pl := range plans {
		if !strings.Contains(pl, "ANN") {
			t.Fatalf("vector search does not go through the index:\n%s", pl)
		}
	}
	// Remap keeps codes and centroids: recall may differ only by ties
	// (quantized distances tie often, RQ's most, and ties break by storage
	// order, which compaction changes: up to two hits of all queries) and,
	// for HNSW, by the rebuilt graphs (searched with ef 100).
	slack := 0.2 / float64(len(qs))
	if strings.HasPrefix(c.typ, "hnsw") {
		slack = 0.02
	}
	if recallAfter+slack < recallBefore || recallAfter+slack+0.1/float64(len(qs)) < recallLance {
		t.Fatalf("recall@10 before %.3f, lanced %.3f, lance optimize %.3f", recallBefore, recallAfter, recallLance)
	}
	t.Logf("%s: fragments %d -> %d; vec_idx %s; recall@10 before %.3f lanced %.3f lance %.3f; indexStats %d/%d",
		c.name, pre.Fragments, post.Fragments, vd.Action, recallBefore, recallAfter, recallLance, a.IndexedRows, a.UnindexedRows)
	checkRecallVariants(t, c, qs, beforeCopy, path, control, slack)
	checkLanceWritesKeepVecIndex(t, path, c)
}

// checkRecallVariants checks recall@10 with Lance's default nprobes and,
// for quantized codes, with a refine factor: the same bound as the main
// check, against the same searches before compaction (beforeCopy, as the
// table was before lanced's compaction) and after Lance's optimize()
// (control).
func checkRecallVariants(t *testing.T, c remapEngineCase, qs [][]float32, beforeCopy, path, control string, slack float64) {
	t.Helper()
	refined := c
	refined.refine = 5
	for _, v := range []struct {
		name string
		c    remapEngineCase
		ann  func(oracle.Op)
	}{
		{"default nprobes", c, func(op oracle.Op) { delete(op, "nprobes") }},
		{"refine factor 5", refined, nil},
	} {
		if v.c.refine > 0 && c.typ == "ivf_flat" {
			continue // flat codes are exact: nothing to refine
		}
		b, _ := recallAt10With(t, beforeCopy, qs, v.c, v.ann)
		o, ps := recallAt10With(t, path, qs, v.c, v.ann)
		l, _ := recallAt10With(t, control, qs, v.c, v.ann)
		for _, pl := range ps {
			if !strings.Contains(pl, "ANN") {
				t.Fatalf("%s: vector search does not go through the index:\n%s", v.name, pl)
			}
		}
		if o+slack < b || o+slack+0.1/float64(len(qs)) < l {
			t.Fatalf("%s: recall@10 before %.3f, lanced %.3f, lance optimize %.3f", v.name, b, o, l)
		}
		t.Logf("%s, %s: recall@10 before %.3f lanced %.3f lance %.3f", c.name, v.name, b, o, l)
	}
}

// checkLanceWritesKeepVecIndex runs real Lance's delete, update,
// mergeInsert, addColumns, optimize and createIndex(replace) on the
// compacted table: after each, the table still lists vec_idx (and id_idx
// when the case builds one), and vec_idx still indexes rows.
func checkLanceWritesKeepVecIndex(t *testing.T, path string, c remapEngineCase) {
	t.Helper()
	want := []string{"vec_idx"}
	if c.btree {
		want = []string{"id_idx", "vec_idx"}
	}
	for _, op := range []oracle.Op{
		{"op": "delete", "where": "id % 13 = 5"},
		{"op": "update", "where": "id % 17 = 2", "values_sql": map[string]string{"id": "id"}},
		{"op": "merge_insert", "on": "id", "rows": 40, "seed": 9, "id_start": 3990},
		{"op": "add_columns", "columns": []map[string]string{{"name": "twice", "value_sql": "id * 2"}}},
		{"op": "optimize"},
		{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx", "replace": true},
	} {
		oracle.RunOps(t, path, []oracle.Op{op})
		r := oracle.Inspect(t, path, 0)
		if got := indexNames(r); !slices.Equal(got, want) {
			t.Fatalf("after real Lance's %v: indices %v, want %v", op["op"], got, want)
		}
		if ix := indexByName(t, r, "vec_idx"); ix.IndexedRows == 0 {
			t.Fatalf("after real Lance's %v: vec_idx indexes nothing: %+v", op["op"], ix)
		}
	}
}

// appendsThenDeletes are what real Lance does to the remap tests' tables
// once they are indexed: two appends, then a delete.
var appendsThenDeletes = []oracle.Op{
	{"op": "add", "rows": 200, "seed": 5},
	{"op": "add", "rows": 200, "seed": 6},
	{"op": "delete", "where": "id % 7 = 3"},
}

// runThenCopy has real Lance run ops on the table at path and returns the
// path of a copy (the control a test gives to Lance's optimize()).
func runThenCopy(t *testing.T, path string, ops []oracle.Op) string {
	t.Helper()
	oracle.RunOps(t, path, ops)
	control := filepath.Join(t.TempDir(), "control.lance")
	oracle.CopyTree(t, path, control)
	return control
}

func planIndex(p *plan.Plan, name string) plan.IndexDecision {
	for _, d := range p.Indices {
		if d.Name == name {
			return d
		}
	}
	return plan.IndexDecision{}
}

func remapQueries(n int) [][]float32 {
	r := rand.New(rand.NewPCG(3, 5))
	out := make([][]float32, n)
	for i := range out {
		out[i] = make([]float32, 32)
		for j := range out[i] {
			out[i][j] = r.Float32()*2 - 1
		}
	}
	return out
}

// recallAt10 is the mean recall@10 of searches through the index (all 4
// partitions probed; HNSW with ef 100; refined when the case says so)
// against exact searches, and the explain plans.
func recallAt10(t *testing.T, path string, qs [][]float32, c remapEngineCase) (float64, []string) {
	t.Helper()
	return recallAt10With(t, path, qs, c, nil)
}

// recallAt10With is recallAt10 with each search through the index changed
// by ann first (nil: unchanged).
func recallAt10With(t *testing.T, path string, qs [][]float32, c remapEngineCase, ann func(oracle.Op)) (float64, []string) {
	t.Helper()
	var ops []oracle.Op
	for _, q := range qs {
		op := oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "nprobes": 4, "columns": []string{"id"}, "explain": true}
		if strings.HasPrefix(c.typ, "hnsw") {
			op["ef"] = 100
		}
		if c.refine > 0 {
			op["refine_factor"] = c.refine
		}
		if ann != nil {
			ann(op)
		}
		ops = append(ops,
			oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "columns": []string{"id"}, "bypass_vector_index": true}, op)
	}
	res := oracle.RunOps(t, path, ops)
	var sum float64
	var plans []string
	for i := 0; i < len(res); i += 2 {
		var exact, ann queryResult
		if err := json.Unmarshal(res[i], &exact); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(res[i+1], &ann); err != nil {
			t.Fatal(err)
		}
		want := exact.IDs()
		hit := 0
		for _, id := range ann.IDs() {
			if slices.Contains(want, id) {
				hit++
			}
		}
		if len(want) > 0 {
			sum += float64(hit) / float64(len(want))
		}
		plans = append(plans, ann.Plan)
	}
	return sum / float64(len(qs)), plans
}

// TestRemapConflictsOracle: lanced executes a remapping compaction's
// rewrites on a table with an IVF_PQ and a BTree, real Lance commits
// something else before lanced's commit (the remaps run between), and the
// commit is judged by Lance's rules: a delete of rewritten rows, a
// createIndex(replace) of the remapped index and Lance's own optimize()
// make the rewrite and its remaps retryable (nothing of ours is committed,
// the table reads exactly what real Lance left, both indices intact); an
// append is compatible (committed with both indices remapped). Afterwards a
// fresh run compacts, and real Lance keeps both indices through a delete.
func TestRemapConflictsOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []struct {
		name   string
		op     oracle.Op
		commit bool
	}{
		{"delete of rewritten rows", oracle.Op{"op": "delete", "where": "id % 11 = 1"}, false},
		{"createIndex replace", oracle.Op{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "replace": true,
			"options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}}, false},
		{"optimize", oracle.Op{"op": "optimize"}, false},
		{"append", oracle.Op{"op": "add", "rows": 50, "seed": 3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
			oracle.RunOps(t, path, []oracle.Op{
				{"op": "delete", "where": "id % 10 = 0"},
				createVecIdx,
				createIDIdx,
				{"op": "delete", "where": "id % 7 = 3"},
			})
			want := []string{"id_idx", "vec_idx"}
			ctx := context.Background()
			tbl, m := tabletest.Open(t, "file://"+path)
			p := planFor(t, path, m, nil)
			if len(p.Rewrites) != 1 {
				t.Fatalf("plan %+v", p.Decisions)
			}
			r := &engine.Runner{Table: tbl}
			ps := executeAll(t, r, m, p.Tasks())
			oracle.RunOps(t, path, []oracle.Op{c.op})
			theirs := oracle.Inspect(t, path, 0)
			wantDigest := oracle.Digest(oracle.Scan(t, path, 0, nil))
			reps, err := r.Commit(ctx, ps)
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			committed := false
			var dropped []string
			for _, rep := range reps {
				if rep.Op == "rewrite" && rep.Version != 0 {
					committed = true
				}
				for _, d := range rep.Dropped {
					dropped = append(dropped, d.Verdict.String()+": "+d.Reason)
				}
			}
			if committed != c.commit {
				t.Fatalf("committed %v, want %v; dropped %v", committed, c.commit, dropped)
			}
			after := oracle.Inspect(t, path, 0)
			if got := indexNames(after); !slices.Equal(got, want) {
				t.Fatalf("indices %v", got)
			}
			if after.Rows != theirs.Rows {
				t.Fatalf("rows %d, real Lance left %d", after.Rows, theirs.Rows)
			}
			if !c.commit {
				if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, wantDigest) {
					t.Fatalf("table content differs from what real Lance left")
				}
				if len(dropped) == 0 {
					t.Fatalf("nothing dropped")
				}
			} else {
				for _, ix := range after.Indices {
					b := indexByName(t, theirs, ix.Name)
					if ix.IndexedRows != b.IndexedRows || ix.UnindexedRows != b.UnindexedRows {
						t.Fatalf("%s: indexStats %d/%d, before our commit %d/%d", ix.Name, ix.IndexedRows, ix.UnindexedRows, b.IndexedRows, b.UnindexedRows)
					}
				}
			}
			_, plans := recallAt10(t, path, remapQueries(2), remapEngineCase{typ: "ivf_pq"})
			if !strings.Contains(plans[0], "ANN") {
				t.Fatalf("vector search not through the index:\n%s", plans[0])
			}
			t.Logf("%s: committed %v, dropped %v", c.name, committed, dropped)
			// A fresh run finishes what is left.
			tbl2, m2 := tabletest.Open(t, "file://"+path)
			p2 := planFor(t, path, m2, nil)
			if _, err := engine.Compact(ctx, tbl2, m2, p2.Tasks(), engine.CompactOptions{}); err != nil {
				t.Fatal(err)
			}
			oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id = 5"}})
			if got := indexNames(oracle.Inspect(t, path, 0)); !slices.Equal(got, want) {
				t.Fatalf("indices after the follow-up and real Lance's delete: %v", got)
			}
		})
	}
}

// TestRemapInCommitBatches: two rewrite groups covered by the same IVF_PQ,
// committed in two batches (commit_batch_tasks = 1). The second batch
// remaps the segment the first batch wrote, so both commit, and real Lance
// counts every row indexed and searches through the index.
func TestRemapInCommitBatches(t *testing.T) {
	oracle.Require(t)
	path := lanceTable(t, "sized-4x1000-v32-t0-d0",
		oracle.Op{"op": "delete", "where": "id % 10 = 0"},
		createVecIdx,
	)
	pre := oracle.Inspect(t, path, 0)
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 1800 })
	if len(p.Rewrites) != 2 {
		t.Fatalf("want two rewrite groups: %+v", p.Decisions)
	}
	sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{CommitBatchTasks: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.TasksCommitted != 4 || len(sum.Dropped) != 0 {
		t.Fatalf("summary %+v", sum)
	}
	post := oracle.Inspect(t, path, 0)
	b, a := indexByName(t, pre, "vec_idx"), indexByName(t, post, "vec_idx")
	if post.Rows != pre.Rows || a.IndexedRows != b.IndexedRows || a.UnindexedRows != 0 || post.Fragments != 2 {
		t.Fatalf("before %+v %+v, after %+v %+v", pre, b, post, a)
	}
	rec, plans := recallAt10(t, path, remapQueries(8), remapEngineCase{typ: "ivf_pq"})
	if !strings.Contains(plans[0], "ANN") {
		t.Fatalf("not through the index:\n%s", plans[0])
	}
	t.Logf("versions %v; recall@10 %.3f", sum.VersionsCommitted, rec)
}
