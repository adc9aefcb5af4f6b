package engine_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRemapRaceAtCommitOracle lands a real-Lance commit at the last moment
// of lanced's remapping compaction: its new fragment ids are reserved and
// every remapped index segment is written (failpoint remap.commit), the
// Rewrite not yet committed. The table has an IVF_PQ and a BTree over four
// fragments; the compaction rewrites fragments 0 and 1 only. Judged by
// Lance's rules: a delete or update of rewritten rows, createIndex(replace)
// and optimize() make the rewrite retryable (nothing of ours committed, our
// files deleted); a delete of rows in the other (indexed, not rewritten)
// fragments is rebased over, and a dropIndex of a remapped index commits
// the rewrite without that index's segment. Either way real Lance then
// reads the same rows as a control table that only got Lance's commit,
// counts the same indexed rows, and answers through each index (explain
// plan) what the control answers: BTree filters the same ids, vector
// recall@10 no worse. Real Lance's optimize() afterwards keeps the indices.
func TestRemapRaceAtCommitOracle(t *testing.T) {
	oracle.Require(t)
	both := []string{"id_idx", "vec_idx"}
	for _, c := range []remapRaceCase{
		{"delete of rewritten rows", oracle.Op{"op": "delete", "where": "id < 2000 AND id % 7 = 3"}, false, both, false},
		{"update of rewritten rows", oracle.Op{"op": "update", "where": "id < 2000 AND id % 9 = 4", "values_sql": map[string]string{"id": "id"}}, false, both, false},
		{"delete of other indexed rows", oracle.Op{"op": "delete", "where": "id >= 2000 AND id % 7 = 3"}, true, both, false},
		{"dropIndex of a remapped index", oracle.Op{"op": "drop_index", "name": "vec_idx"}, true, []string{"id_idx"}, false},
		{"createIndex replace", oracle.Op{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "replace": true,
			"options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}}, false, both, false},
		{"optimize", oracle.Op{"op": "optimize"}, false, both, false},
		{"queued: delete of rewritten rows", oracle.Op{"op": "delete", "where": "id < 2000 AND id % 7 = 3"}, false, both, true},
		{"queued: delete of other indexed rows", oracle.Op{"op": "delete", "where": "id >= 2000 AND id % 7 = 3"}, true, both, true},
		{"queued: dropIndex of a remapped index", oracle.Op{"op": "drop_index", "name": "vec_idx"}, true, []string{"id_idx"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
			oracle.RunOps(t, path, []oracle.Op{
				{"op": "delete", "where": "id < 2000 AND id % 5 = 0"},
				createVecIdx,
				createIDIdx,
			})
			control := filepath.Join(t.TempDir(), "control.lance")
			oracle.CopyTree(t, path, control)

			tbl, m := tabletest.Open(t, "file://"+path)
			p := planFor(t, path, m, func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 1000 })
			if len(p.Rewrites) != 1 || !slices.Equal(p.Rewrites[0].Fragments, []uint64{0, 1}) {
				t.Fatalf("plan: %+v", p.Decisions)
			}
			r := &engine.Runner{Table: tbl}
			ps := executeAll(t, r, m, []job.Task{{Rewrite: &p.Rewrites[0]}})
			reps, ps, landed := c.commitRacing(t, path, r, m, ps)
			oracle.RunOps(t, control, []oracle.Op{c.op})

			committed, dropped, latest := c.checkOutcome(t, path, reps, ps, landed)
			checkNoStraySegments(t, tbl, path, control, latest)
			if got, want := digestByID(t, path), digestByID(t, control); !maps.Equal(got, want) {
				t.Fatalf("real Lance reads other rows than the control")
			}
			checkRacedIndices(t, path, control, c.indices)
			t.Logf("%s: committed %d (Lance landed %d); dropped %v", c.name, committed, landed, dropped)

			oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
			if got := indexNames(oracle.Inspect(t, path, 0)); !slices.Equal(got, c.indices) {
				t.Fatalf("after real Lance's optimize: indices %v", got)
			}
		})
	}
}

// remapRaceCase is a real-Lance commit that lands at the last moment of a
// remapping compaction.
type remapRaceCase struct {
	name    string
	op      oracle.Op
	commit  bool
	indices []string
	queued  bool // the daemon's way: remaps run as tasks of their own, the rewrite waits
}

// commitRacing commits ps with real Lance's op landing at failpoint
// remap.commit (or, queued, after the remaps ran as tasks of their own and
// before the rewrite commits). It returns the reports, the pending jobs
// (with the queued remaps) and the version Lance's op landed as.
func (c remapRaceCase) commitRacing(t *testing.T, path string, r *engine.Runner, m *format.Manifest, ps []engine.Pending) ([]*engine.CommitReport, []engine.Pending, uint64) {
	t.Helper()
	var once sync.Once
	var landed uint64
	ctx := failpoint.WithHook(context.Background(), "remap.commit", func() {
		once.Do(func() {
			oracle.RunOps(t, path, []oracle.Op{c.op})
			_, lm := tabletest.Open(t, "file://"+path)
			landed = lm.Version()
		})
	})
	if c.queued {
		ps = runQueuedRemaps(t, r, m, ps)
		ctx = context.Background()
		oracle.RunOps(t, path, []oracle.Op{c.op})
		_, lm := tabletest.Open(t, "file://"+path)
		landed = lm.Version()
	}
	reps, err := r.Commit(ctx, ps)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if landed == 0 {
		t.Fatal("the remap.commit hook never ran: nothing was remapped")
	}
	return reps, ps, landed
}

// checkOutcome: the rewrite committed right after Lance's commit, with one
// remapped segment per index left, when the case says so; otherwise
// nothing of ours committed, something was dropped (only ever as
// retryable) and no written file is left. It returns the committed
// version (0 for none), the drops and the latest manifest.
func (c remapRaceCase) checkOutcome(t *testing.T, path string, reps []*engine.CommitReport, ps []engine.Pending, landed uint64) (uint64, []string, *format.Manifest) {
	t.Helper()
	var committed uint64
	var dropped, written []string
	for _, rep := range reps {
		if rep.Op == "rewrite" && rep.Version != 0 {
			committed = rep.Version
		}
		for _, d := range rep.Dropped {
			dropped = append(dropped, d.Verdict.String()+": "+d.Reason)
			if d.Verdict != job.Retryable {
				t.Errorf("dropped %s as %s, want retryable: %s", d.Key, d.Verdict, d.Reason)
			}
		}
	}
	for _, pe := range ps {
		written = append(written, pe.Job.Written()...)
	}
	if (committed != 0) != c.commit {
		t.Fatalf("committed %v, want %v; dropped %v", committed != 0, c.commit, dropped)
	}
	_, latest := tabletest.Open(t, "file://"+path)
	if c.commit {
		if committed != landed+1 || latest.Version() != committed {
			t.Fatalf("committed version %d, Lance landed %d, latest %d", committed, landed, latest.Version())
		}
		if rw := latest.Txn.GetRewrite(); rw == nil || len(rw.GetRewrittenIndices()) != len(c.indices) {
			t.Fatalf("rewritten_indices %v, want one per index left (%v)", rw.GetRewrittenIndices(), c.indices)
		}
		return committed, dropped, latest
	}
	if latest.Version() != landed || len(dropped) == 0 {
		t.Fatalf("latest %d, Lance landed %d; dropped %v", latest.Version(), landed, dropped)
	}
	for _, k := range written {
		if dataFileExists(t, path, k) {
			t.Fatalf("a dropped job left %s behind", k)
		}
	}
	return committed, dropped, latest
}

// checkNoStraySegments: no index segment is left in path that no version
// up to latest references and real Lance did not write into the control
// (a dropped remap's files are deleted at once).
func checkNoStraySegments(t *testing.T, tbl *table.Table, path, control string, latest *format.Manifest) {
	t.Helper()
	keep := map[string]bool{}
	for _, d := range indexDirs(t, control) {
		keep[d] = true
	}
	for v := uint64(1); v <= latest.Version(); v++ {
		mv, err := tbl.Load(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		for _, ix := range mv.Indices.GetIndices() {
			keep[(&index.Segment{Meta: ix}).UUID()] = true
		}
	}
	for _, d := range indexDirs(t, path) {
		if fs, _ := os.ReadDir(filepath.Join(path, "_indices", d)); !keep[d] && len(fs) > 0 {
			t.Fatalf("index directory %s is neither committed nor real Lance's", d)
		}
	}
}

// checkRacedIndices compares the indices real Lance reports on path with
// the control's: same names and indexStats, BTree filters answered through
// id_idx with the control's ids, vector searches through vec_idx with
// recall@10 no worse than the control's (ties aside).
func checkRacedIndices(t *testing.T, path, control string, names []string) {
	t.Helper()
	got, want := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if n := indexNames(got); !slices.Equal(n, names) || !slices.Equal(indexNames(want), names) {
		t.Fatalf("indices %v, control %v, want %v", n, indexNames(want), names)
	}
	for _, name := range names {
		a, b := indexByName(t, got, name), indexByName(t, want, name)
		if a.IndexedRows != b.IndexedRows || a.UnindexedRows != b.UnindexedRows || a.IndexedRows+a.UnindexedRows != got.Rows {
			t.Fatalf("%s indexStats %d/%d, control %d/%d, %d rows", name, a.IndexedRows, a.UnindexedRows, b.IndexedRows, b.UnindexedRows, got.Rows)
		}
	}
	for _, where := range []string{"id IN (1, 3, 10, 13, 1234, 1999, 2003, 2500, 3998)", "id >= 1500 AND id < 2600"} {
		q := oracle.Queries(t, path, []oracle.Op{{"op": "query", "where": where, "columns": []string{"id"}, "explain": true}})[0]
		qc := oracle.Queries(t, control, []oracle.Op{{"op": "query", "where": where, "columns": []string{"id"}}})[0]
		if !slices.Equal(q.IDs(), qc.IDs()) || len(qc.IDs()) == 0 || !strings.Contains(q.Plan, "id_idx") {
			t.Fatalf("%s: ids %v, control %v; plan:\n%s", where, q.IDs(), qc.IDs(), q.Plan)
		}
	}
	if !slices.Contains(names, "vec_idx") {
		return
	}
	qs := remapQueries(40)
	c := remapEngineCase{typ: "ivf_pq"}
	recall, plans := recallAt10(t, path, qs, c)
	recallControl, _ := recallAt10(t, control, qs, c)
	for _, pl := range plans {
		if !strings.Contains(pl, "ANN") {
			t.Fatalf("vector search not through the index:\n%s", pl)
		}
	}
	// With the same codes and centroids only ties (broken by storage
	// order) differ; where real Lance's createIndex(replace) raced, each
	// table was retrained by Lance's own k-means on its own, so the two
	// models differ (0.275 vs 0.375 seen once, and 0.225 vs 0.412 over 8
	// queries): 40 queries keep that noise under the bound, 40 of 400 hits.
	if recall+0.1 < recallControl {
		t.Fatalf("recall@10 %.3f, control %.3f", recall, recallControl)
	}
	// No search through the index returns a row the control does not have.
	checkVectorSearchesLive(t, path, qs, oracle.RowAddrsByID(t, control, 0), false)
}

// digestByID is real Lance's scan of path, digested in id order (a
// compaction may reorder fragments).
func digestByID(t *testing.T, path string) map[string]string {
	t.Helper()
	d, err := oracle.DigestByKey(oracle.Scan(t, path, 0, nil), "id")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// indexDirs lists the segment directories under path's _indices.
func indexDirs(t *testing.T, path string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(path, "_indices"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// runQueuedRemaps commits ps as the daemon's workers do (Runner.QueueRemaps):
// the first commit reserves the new fragment ids and hands back the remap
// tasks, with the rewrites waiting for them; the remaps are executed here,
// as a worker would, and the rewrites and remaps are returned for the
// commit that joins them.
func runQueuedRemaps(t *testing.T, r *engine.Runner, m *format.Manifest, ps []engine.Pending) []engine.Pending {
	t.Helper()
	r.QueueRemaps = true
	defer func() { r.QueueRemaps = false }()
	reps, err := r.Commit(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	var out []engine.Pending
	var tasks []job.Task
	for _, rep := range reps {
		if rep.Version != 0 || len(rep.Dropped) > 0 {
			t.Fatalf("the first commit committed or dropped: %+v", rep)
		}
		tasks = append(tasks, rep.Queued...)
		for _, w := range rep.Waiting {
			out = append(out, w.Pending)
		}
	}
	if len(tasks) == 0 || len(out) != len(ps) {
		t.Fatalf("queued %d remaps, %d of %d rewrites waiting", len(tasks), len(out), len(ps))
	}
	return append(out, executeAll(t, r, m, tasks)...)
}
