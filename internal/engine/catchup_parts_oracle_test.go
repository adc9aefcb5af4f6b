package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/heapwatch"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// partsVector is the vector index of the catch-up-in-parts tests;
// TestCatchUpInPartsOracle also runs with partsRQ.
var (
	partsVector = catchUpCase{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 8, "numSubVectors": 4, "distanceType": "l2"}}
	partsRQ     = catchUpCase{name: "ivf_rq_2bit", typ: "ivf_rq", options: map[string]any{"numPartitions": 8, "numBits": 2, "distanceType": "l2"}}
)

// partsTable builds a real-Lance table with a btree (id), an FTS (body)
// and a vector (vec: partsVector) index and then appends appends x rows
// rows, with a delete, by real Lance.
func partsTable(t *testing.T, dest string, appends, rows int) string {
	return partsTableWith(t, dest, appends, rows, partsVector)
}

// partsTableWith is partsTable with vec's vector index.
func partsTableWith(t *testing.T, dest string, appends, rows int, vec catchUpCase) string {
	t.Helper()
	path := oracle.Build(t, "sized-2x1500-v32-t12-d0", dest)
	ops := []oracle.Op{
		{"op": "create_index", "column": "id", "type": "btree"},
		{"op": "create_index", "column": "body", "type": "fts"},
		{"op": "create_index", "column": "vec", "type": vec.typ, "options": vec.options},
	}
	for i := range appends {
		ops = append(ops, oracle.Op{"op": "add", "rows": rows, "seed": 40 + i})
		if i == appends/2 {
			ops = append(ops, oracle.Op{"op": "delete", "where": "id >= 3000 AND id % 13 = 4"})
		}
	}
	oracle.RunOps(t, path, ops)
	return path
}

// partsPolicy: catch-up only, in parts of at most partRows rows.
func partsPolicy(partRows uint64) func(*policy.Effective) {
	return func(e *policy.Effective) {
		e.Scope.Value = policy.ScopeIndex
		e.Index.CatchUpPartRows.Value = partRows
	}
}

// TestCatchUpInPartsOracle: a real-Lance table with btree, FTS and IVF_PQ
// (then IVF_RQ, 2 bits per dimension) indices, then 8 appends and a delete by real Lance. lanced plans one
// catch-up per index in at least 3 delta tasks (catchup_part_rows) merged
// by one task each (folding the btree's and the vector's deltas two at a
// time first), and commits them as one CreateIndex. Real Lance's
// optimize() on a copy is the reference: both end with every live row
// indexed (indexStats); scalar and FTS queries return the same rows;
// recall@10 against exact search is no worse than the copy's; the delta
// segments were never committed and are gone; real Lance keeps
// appending, optimizing and searching.
func TestCatchUpInPartsOracle(t *testing.T) {
	oracle.Require(t)
	for _, vec := range []catchUpCase{partsVector, partsRQ} {
		t.Run(vec.name, func(t *testing.T) { catchUpInParts(t, vec) })
	}
}

// catchUpInParts is TestCatchUpInPartsOracle with vec's vector index.
func catchUpInParts(t *testing.T, vec catchUpCase) {
	dir := t.TempDir()
	path := partsTableWith(t, filepath.Join(dir, "ours"), 8, 300, vec)
	pre := oracle.Inspect(t, path, 0)
	preM := readTableManifest(t, path, pre.Version)
	tune := partsPolicy(700)
	p := planFor(t, path, preM, tune)
	if len(p.CatchUps) != 3 {
		t.Fatalf("planned %d catch-ups, want 3: %+v", len(p.CatchUps), p.Indices)
	}
	for _, c := range p.CatchUps {
		if len(c.Slices) < 3 {
			t.Fatalf("catch-up of %s in %d parts, want at least 3", c.Index, len(c.Slices))
		}
		t.Logf("%s: %d rows of %d fragments in %d delta tasks", c.Index, c.Rows, len(c.Fragments), len(c.Slices))
	}

	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	// Every merge reads at most 2 deltas: the btree's and the vector's
	// deltas are folded into intermediate deltas first (FTS: not folded).
	defer engine.SetCatchUpMergeFanIn(2)()
	if n := compactUntilSettled(t, path, tune); n != 3 {
		t.Fatalf("%d catch-up tasks, want 3", n)
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if ours.Rows != pre.Rows || lance.Rows != pre.Rows || ours.Fragments != pre.Fragments {
		t.Fatalf("rows ours %d, Lance %d, before %d; fragments %d, before %d", ours.Rows, lance.Rows, pre.Rows, ours.Fragments, pre.Fragments)
	}
	for _, name := range []string{"id_idx", "body_idx", "vec_idx"} {
		oi, li := indexByName(t, ours, name), indexByName(t, lance, name)
		t.Logf("%s: ours %+v; Lance's optimize %+v", name, oi, li)
		if oi.UnindexedRows != 0 || oi.IndexedRows != ours.Rows || li.UnindexedRows != 0 {
			t.Fatalf("%s: ours %+v, Lance %+v, rows %d", name, oi, li, ours.Rows)
		}
		if name != "vec_idx" && oi.Segments != 1 {
			t.Fatalf("%s: %d segments", name, oi.Segments)
		}
	}
	checkPartsCommit(t, path, preM, ours.Version)
	checkPartsQueries(t, path, ours.Version, control, lance.Version, vec)

	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 120, "seed": 99}, {"op": "optimize"}})
	after := oracle.Inspect(t, path, 0)
	for _, name := range []string{"id_idx", "body_idx", "vec_idx"} {
		if ix := indexByName(t, after, name); ix.UnindexedRows != 0 || after.Rows != ours.Rows+120 {
			t.Fatalf("after real Lance's append and optimize: %s %+v, rows %d", name, ix, after.Rows)
		}
	}
}

// checkPartsCommit: one CreateIndex after the read version adds one
// segment per index; every directory under _indices/ is a segment of the
// version before or after (the deltas were deleted, never committed).
func checkPartsCommit(t *testing.T, path string, preM *format.Manifest, v uint64) {
	t.Helper()
	m := readTableManifest(t, path, v)
	tbl, _ := tabletest.Open(t, "file://"+path)
	txn, err := tbl.LoadTransaction(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	ci := txn.GetCreateIndex()
	var names []string
	for _, ix := range ci.GetNewIndices() {
		names = append(names, ix.GetName())
	}
	slices.Sort(names)
	if v != preM.PB.GetVersion()+1 || !slices.Equal(names, []string{"body_idx", "id_idx", "vec_idx"}) {
		t.Fatalf("version %d after %d: CreateIndex of %v", v, preM.PB.GetVersion(), names)
	}
	known := map[string]bool{}
	for _, mm := range []*format.Manifest{preM, m} {
		for _, ix := range mm.Indices.GetIndices() {
			u, _ := uuid.FromBytes(ix.GetUuid().GetUuid())
			known[u.String()] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(path, format.IndicesDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		files, err := os.ReadDir(filepath.Join(path, format.IndicesDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !known[e.Name()] && len(files) > 0 {
			t.Fatalf("%s/%s (%d files) is no committed segment (a delta left behind)", format.IndicesDir, e.Name(), len(files))
		}
	}
	t.Logf("one CreateIndex of %v (removed %d); %d segment directories, none left by a delta", names, len(ci.GetRemovedIndices()), len(ents))
}

// checkPartsQueries: scalar and FTS queries return the same rows on our
// table and on Lance's optimized copy; recall@10 no worse than the copy's.
func checkPartsQueries(t *testing.T, path string, v uint64, control string, cv uint64, vec catchUpCase) {
	t.Helper()
	scalar := []string{"id = 3123", "id >= 2990 AND id < 3700", "id IN (5, 1499, 3001, 3150, 3599, 3777)", "id > 4000"}
	var ops []oracle.Op
	for _, w := range scalar {
		ops = append(ops, oracle.Op{"op": "query", "where": w, "columns": []string{"id"}, "limit": 1 << 20})
	}
	got, want := oracle.Queries(t, path, ops), oracle.Queries(t, control, ops)
	for i, w := range scalar {
		if !slices.Equal(got[i].IDs(), want[i].IDs()) || len(got[i].IDs()) == 0 && i != 3 {
			t.Fatalf("%q: ours %d rows, Lance's optimize %d", w, len(got[i].IDs()), len(want[i].IDs()))
		}
	}
	var fts []oracle.Op
	for _, w := range []string{"river", "harbour", "copper", "mountain", "stone"} {
		fts = append(fts, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 10000, "columns": []string{"id"}, "explain": true})
	}
	fo, fl := ftsSearch(t, path, fts), ftsSearch(t, control, fts)
	matched := 0
	for i, s := range fts {
		if !slices.Equal(hitIDs(fo[i]), hitIDs(fl[i])) {
			t.Fatalf("%q: ours %d rows, Lance's optimize %d", s["query"], len(fo[i]), len(fl[i]))
		}
		matched += len(fo[i])
	}
	if matched == 0 {
		t.Fatal("no FTS query matched a row")
	}
	queries := catchUpQueries(32, 32)
	ro, rl := catchUpSearch(t, path, v, queries, vec), catchUpSearch(t, control, cv, queries, vec)
	t.Logf("%d scalar and %d FTS queries (%d hits) alike; recall@10 ours %.3f, Lance's optimize %.3f", len(scalar), len(fts), matched, ro.recall, rl.recall)
	if ro.recall+0.03 < rl.recall {
		t.Fatalf("recall@10 %.3f after our catch-up, %.3f after Lance's optimize", ro.recall, rl.recall)
	}
}

// heapPeak runs fn and returns the high-water of the heap in use above
// what was in use before it (sampled every millisecond, after a GC), with
// the GC target at 5% so that garbage awaiting collection does not hide
// what the task holds.
func heapPeak(fn func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	return heapwatch.Peak(fn, time.Millisecond, heapwatch.HeapInuse)
}

// partsPeaks runs every delta task and the merge task of each catch-up
// planned on path, one at a time, and returns per index the largest heap
// high-water of a delta task and that of its merge task (nothing is
// committed; the outputs are deleted).
func partsPeaks(t *testing.T, path string, partRows uint64) (delta, merge map[string]uint64, parts map[string]int) {
	t.Helper()
	ctx := context.Background()
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, partsPolicy(partRows))
	delta, merge, parts = map[string]uint64{}, map[string]uint64{}, map[string]int{}
	for i := range p.CatchUps {
		c := &p.CatchUps[i]
		parent := job.Task{CatchUp: c}
		var outs []*job.SliceOutput
		for _, st := range parent.Slices() {
			var o *job.SliceOutput
			var err error
			peak := heapPeak(func() { o, err = engine.ExecuteSlice(ctx, tbl, m.PB, st.Slice) })
			if err != nil {
				t.Fatalf("%s: %v", st.Key(), err)
			}
			outs = append(outs, o)
			delta[c.Index] = max(delta[c.Index], peak)
		}
		jt, err := job.NewJoin(parent, outs)
		if err != nil {
			t.Fatal(err)
		}
		var j job.Job
		merge[c.Index] = heapPeak(func() { j, err = engine.ExecuteJoin(ctx, tbl, m.PB, jt.Join) })
		if err != nil {
			t.Fatalf("merge of %s: %v", c.Index, err)
		}
		if o := j.(*job.CatchUpOutput); o.Rows+o.Dropped != c.Rows && c.Index != "body_idx" {
			t.Fatalf("%s: merged %d+%d rows of %d", c.Index, o.Rows, o.Dropped, c.Rows)
		}
		parts[c.Index] = len(outs)
		for _, o := range append(outs, nil) {
			var keys []string
			if o == nil {
				keys = j.Written()
			} else {
				keys = o.Written()
			}
			for _, k := range keys {
				_ = tbl.Bucket().Delete(ctx, k)
			}
		}
	}
	return delta, merge, parts
}

// median3 returns per key the median of three measurements.
func median3(runs []map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k := range runs[0] {
		v := []uint64{runs[0][k], runs[1][k], runs[2][k]}
		slices.Sort(v)
		out[k] = v[1]
	}
	return out
}

// TestCatchUpPartsMemoryFlat measures the heap high-water of every delta
// and merge task of a btree, FTS and IVF_PQ catch-up in parts (real-Lance
// tables, same run). Delta tasks: parts of 8,000 rows on a backlog of 4
// and of 32 appends of 8,000 rows: a delta holds its part's rows, so its
// peak stays flat as the backlog grows eight-fold. Merges: the 32-append
// backlog caught up in 4, 16 and 32 deltas (parts of 64,000, 16,000 and
// 8,000 rows): the same rows merged into the same segment, only the
// number of deltas differs. A btree or vector merge reads at most 8
// deltas at once (more are folded into intermediate deltas first) with a
// read-ahead budget shared among them, so its peak stays flat from 4 to
// 32 deltas; an FTS merge copies each delta's partition through one
// buffer. The 32-delta merge is also measured without folding (all 32
// read at once) for comparison. Each peak is the median of three runs: a
// 1 ms sampler can miss a short peak, and one run in a few catches a
// transient one (a vector merge of 32 deltas measured 10.8 MiB once where
// its other runs and the unfolded merge measured 8.5-9.7 MiB).
func TestCatchUpPartsMemoryFlat(t *testing.T) {
	oracle.Require(t)
	dir := t.TempDir()
	const rows = 8000
	small := partsTable(t, filepath.Join(dir, "small"), 4, rows)
	large := partsTable(t, filepath.Join(dir, "large"), 32, rows)
	type peaks struct {
		delta, merge map[string]uint64
		parts        map[string]int
	}
	measure := func(path string, partRows uint64) peaks {
		var p peaks
		var ds, ms []map[string]uint64
		for range 3 {
			d, m, parts := partsPeaks(t, path, partRows)
			ds, ms, p.parts = append(ds, d), append(ms, m), parts
		}
		p.delta, p.merge = median3(ds), median3(ms)
		return p
	}
	ds := measure(small, rows)
	var got []peaks
	for _, partRows := range []uint64{8 * rows, 2 * rows, rows} {
		got = append(got, measure(large, partRows))
	}
	restore := engine.SetCatchUpMergeFanIn(64)
	_, unfolded, _ := partsPeaks(t, large, rows)
	restore()
	const mib = 1 << 20
	for _, name := range []string{"id_idx", "body_idx", "vec_idx"} {
		dl := got[2].delta[name]
		t.Logf("%s: delta peak %.2f MiB (%d deltas), %.2f MiB (%d deltas)", name, float64(ds.delta[name])/mib, ds.parts[name], float64(dl)/mib, got[2].parts[name])
		// An 8 times larger backlog: a delta task's peak within 1.5x
		// (plus 1 MiB of sampling noise).
		if dl > ds.delta[name]*3/2+mib {
			t.Errorf("%s: delta peaks grow with the backlog", name)
		}
		line := name + " merge of the same rows:"
		for i, p := range got {
			line += fmt.Sprintf(" %d deltas %.2f MiB;", p.parts[name], float64(p.merge[name])/mib)
			if want := []int{4, 16, 32}[i]; p.parts[name] != want {
				t.Fatalf("%s: %d deltas, want %d", name, p.parts[name], want)
			}
		}
		t.Logf("%s 32 deltas read at once %.2f MiB", line, float64(unfolded[name])/mib)
		// 8 times the deltas: the merge's peak within 1.3x plus 1 MiB of
		// noise.
		m4 := got[0].merge[name]
		for _, p := range got[1:] {
			if p.merge[name] > m4*13/10+mib {
				t.Errorf("%s: merge peak grows with the number of deltas: %d deltas %d B, %d deltas %d B", name, got[0].parts[name], m4, p.parts[name], p.merge[name])
			}
		}
	}
}
