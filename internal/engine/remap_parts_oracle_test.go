package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// logLines collects a runner's log records as JSON objects.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// smallParts makes the remap of any vector segment over 16 KiB split.
func smallParts(e *policy.Effective) { e.Index.RemapPartBytes.Value = 16 << 10 }

// TestRemapInPartsOracle: real Lance builds a table with an IVF_PQ (or an
// IVF_HNSW_SQ) of 8 partitions, appends and deletes; with
// index.remap_part_bytes = 16 KiB the plan says the remap runs in at least
// 3 part tasks. Three copies are compacted: by lanced compact (parts and
// join run in its own process), through the queued flow the daemon uses
// (the first commit reserves the ids and hands back the part tasks, the
// next commit of their results hands back the join, the rewrites and
// parts waiting for it, and the last commit takes the join's segment),
// and with the default policy (one remap task). Real Lance then reads the
// same rows on all three, counts the same indexed rows as before, and
// searches through the index with recall@10 no worse than before (within
// 8 of 80 hits); the segments made in parts equal the one-task segment
// partition by partition (rows, codes, graphs).
func TestRemapInPartsOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []remapEngineCase{
		{name: "ivf_pq", typ: "ivf_pq", options: map[string]any{"numPartitions": 8, "numSubVectors": 4, "distanceType": "l2"}},
		{name: "hnsw_sq", typ: "hnsw_sq", options: map[string]any{"numPartitions": 8, "distanceType": "l2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testRemapInParts(t, c)
		})
	}
}

func testRemapInParts(t *testing.T, c remapEngineCase) {
	path := lanceTable(t, "sized-4x1000-v32-t0-d0",
		oracle.Op{"op": "delete", "where": "id % 10 = 0"},
		oracle.Op{"op": "create_index", "column": "vec", "type": c.typ, "options": c.options, "name": "vec_idx"},
		oracle.Op{"op": "add", "rows": 200, "seed": 5},
		oracle.Op{"op": "delete", "where": "id % 7 = 3"},
	)
	queued, oneTask, pre, wantDigest := partsCopies(t, path)
	qs := remapQueries(16)
	recallBefore, _ := recallAt10(t, path, qs, c)

	parts := compactInParts(t, path, queued, "vec_idx", "IVF partition range")

	// One task (default remap_part_bytes).
	compactWith(t, oneTask, nil)

	for _, at := range []string{path, queued, oneTask} {
		post, a := checkCompactedIndexed(t, at, pre, wantDigest, "vec_idx")
		rec, plans := recallAt10(t, at, qs, c)
		for _, pl := range plans {
			if !strings.Contains(pl, "ANN") {
				t.Fatalf("%s: vector search does not go through the index:\n%s", at, pl)
			}
		}
		if rec+0.1 < recallBefore {
			t.Fatalf("%s: recall@10 %.3f after, %.3f before", at, rec, recallBefore)
		}
		t.Logf("%s %s (%d parts): fragments %d -> %d, indexStats %d/%d, recall@10 before %.3f after %.3f", c.name, filepath.Base(at), parts, pre.Fragments, post.Fragments, a.IndexedRows, a.UnindexedRows, recallBefore, rec)
	}
	sameVectorSegment(t, oneTask, path)
	sameVectorSegment(t, oneTask, queued)
}

// partsCopies copies the table at path twice (queued, oneTask: to be
// compacted through the daemon's flow and in one task) and returns the
// copies with real Lance's report and digest of path.
func partsCopies(t *testing.T, path string) (queued, oneTask string, pre oracle.Report, digest map[string]string) {
	t.Helper()
	queued = filepath.Join(t.TempDir(), "queued.lance")
	oneTask = filepath.Join(t.TempDir(), "one.lance")
	oracle.CopyTree(t, path, queued)
	oracle.CopyTree(t, path, oneTask)
	return queued, oneTask, oracle.Inspect(t, path, 0), oracle.Digest(oracle.Scan(t, path, 0, nil))
}

// checkCompactedIndexed fails t unless real Lance reads the rows of
// wantDigest from the table at, in fewer fragments than pre, with index
// name counting the indexed and unindexed rows it counted in pre. It
// returns real Lance's report and its index.
func checkCompactedIndexed(t *testing.T, at string, pre oracle.Report, wantDigest map[string]string, name string) (oracle.Report, oracle.Index) {
	t.Helper()
	post := oracle.Inspect(t, at, 0)
	if got := oracle.Digest(oracle.Scan(t, at, 0, nil)); post.Rows != pre.Rows || !maps.Equal(got, wantDigest) {
		t.Fatalf("%s: rows changed (%d -> %d)", at, pre.Rows, post.Rows)
	}
	if post.Fragments >= pre.Fragments {
		t.Fatalf("%s: fragments %d -> %d", at, pre.Fragments, post.Fragments)
	}
	b, a := indexByName(t, pre, name), indexByName(t, post, name)
	if a.IndexedRows != b.IndexedRows || a.UnindexedRows != b.UnindexedRows {
		t.Fatalf("%s: %s indexStats %d/%d before, %d/%d after", at, name, b.IndexedRows, b.UnindexedRows, a.IndexedRows, a.UnindexedRows)
	}
	return post, a
}

// compactInParts compacts the table at path with lanced compact (parts
// and join in this process) and the one at queued through the daemon's
// flow (commitQueued), index.remap_part_bytes 16 KiB: the plan must say
// index's remap runs in at least 3 part tasks by the unit named by, and
// both must run as many part tasks and one join. It returns the parts.
func compactInParts(t *testing.T, path, queued, index, by string) int {
	t.Helper()
	var logs logLines
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, smallParts)
	d := planIndex(p, index)
	if d.Action != plan.IndexRemap || d.RemapParts < 3 || !strings.Contains(d.Reason, "part tasks by "+by) {
		t.Fatalf("%s decision %+v", index, d)
	}
	sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil || sum.TasksFailed != 0 || len(sum.Dropped) != 0 {
		t.Fatalf("compact: %v %+v", err, sum)
	}
	split := logs.records("index remap split into parts")
	joined := logs.records("index remapped")
	if len(split) != 1 || split[0]["parts"].(float64) < 3 || len(joined) != 1 || joined[0]["parts"] != split[0]["parts"] || !strings.HasPrefix(joined[0]["task_id"].(string), "join/remap/") {
		t.Fatalf("split %v, remapped %v", split, joined)
	}
	parts := int(split[0]["parts"].(float64))
	if n := len(logs.records("slice written")); n != parts {
		t.Fatalf("%d parts written, want %d", n, parts)
	}
	// The daemon's flow: part tasks and the join handed back by commits.
	if n := commitQueued(t, queued); n != parts {
		t.Fatalf("queued flow ran %d part tasks, lanced compact %d", n, parts)
	}
	return parts
}

// commitQueued compacts the table at path as the daemon's coordinator
// does: each commit's queued tasks are executed and their results
// committed with the jobs that wait for them, until nothing is queued. It
// returns how many part tasks ran.
func commitQueued(t *testing.T, path string) int {
	t.Helper()
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, smallParts)
	r := &engine.Runner{Table: tbl, QueueRemaps: true, QueueJoins: true}
	ps := executeAll(t, r, m, p.Tasks())
	parts, joins := 0, 0
	// One part's result comes a commit late: the other parts, the
	// rewrites and the other remaps wait for it.
	var late *engine.Pending
	commitUntilSettled(t, r, ps, settleHooks{
		committed: func(reps []*engine.CommitReport) []engine.Pending {
			var next []engine.Pending
			if late != nil {
				checkWaitForLatePart(t, reps, late.Job.Task().Key())
				next, late = append(next, *late), nil
			}
			for _, rep := range reps {
				if len(rep.Dropped) > 0 {
					t.Fatalf("dropped: %+v", rep.Dropped)
				}
			}
			return next
		},
		executed: func(qt job.Task, pe engine.Pending) bool {
			switch {
			case qt.Slice != nil && qt.Slice.Remap != nil:
				parts++
			case qt.Join != nil && qt.Join.Remap != nil:
				joins++
			default:
				t.Fatalf("queued %s", qt.Key())
			}
			if qt.Slice != nil && parts == 1 {
				late = &pe
				return false
			}
			return true
		},
	})
	if joins != 1 {
		t.Fatalf("%d joins queued", joins)
	}
	return parts
}

// checkWaitForLatePart fails t unless a commit without the result of
// part task key kept the other parts and the rewrites the remap is for
// back for it, queued nothing and committed no remap (a rewrite no index
// covers, its ids not reserved, may commit on its own).
func checkWaitForLatePart(t *testing.T, reps []*engine.CommitReport, key string) {
	t.Helper()
	kinds := map[string]int{}
	for _, rep := range reps {
		if len(rep.Queued) != 0 || slices.ContainsFunc(rep.Committed, func(k string) bool { return !strings.HasPrefix(k, "rewrite:") }) {
			t.Fatalf("committed or queued without part %s: %+v", key, rep)
		}
		for _, w := range rep.Waiting {
			if !slices.Equal(w.After, []string{key}) {
				t.Fatalf("%s waits for %v, want the late part %s", w.Job.Task().Key(), w.After, key)
			}
			kinds[string(w.Job.Task().Kind())]++
		}
	}
	if kinds["slice"] == 0 || kinds["rewrite"] == 0 {
		t.Fatalf("waiting for the late part: %v, want the other parts and the rewrites", kinds)
	}
}

// sameVectorSegment: vec_idx's segment at b holds what the one at a
// holds, partition by partition.
func sameVectorSegment(t *testing.T, a, b string) {
	t.Helper()
	dir := func(path string) string {
		m := indextest.ReadManifest(t, path, oracle.Inspect(t, path, 0).Version)
		return filepath.Join(path, "_indices", indextest.UUID(t, indextest.Index(t, m, "vec_idx").GetUuid()))
	}
	da, db := dir(a), dir(b)
	open := func(d string) (*vector.IndexFile, *vector.StorageFile) {
		x, err := vector.OpenIndexFile(lancefiletest.Open(t, filepath.Join(d, vector.IndexFileName)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := vector.OpenStorageFile(lancefiletest.Open(t, filepath.Join(d, vector.AuxiliaryFileName)))
		if err != nil {
			t.Fatal(err)
		}
		return x, s
	}
	xa, sa := open(da)
	xb, sb := open(db)
	if !slices.Equal(sa.IVF.GetLengths(), sb.IVF.GetLengths()) || !slices.Equal(xa.PartitionMeta, xb.PartitionMeta) {
		t.Fatalf("%s: partition lengths %v, one task %v (or graph metadata differs)", b, sb.IVF.GetLengths(), sa.IVF.GetLengths())
	}
	for p := range sa.NumPartitions() {
		ra, err := sa.ReadPartition(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := sb.ReadPartition(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		ga, err := xa.ReadPartition(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := xb.ReadPartition(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for col := range int(ra.NumCols()) {
			if !array.Equal(ra.Column(col), rb.Column(col)) {
				t.Fatalf("%s: partition %d column %s differs from the one-task remap", b, p, ra.ColumnName(col))
			}
		}
		for col := range int(ga.NumCols()) {
			if !array.Equal(ga.Column(col), gb.Column(col)) {
				t.Fatalf("%s: index.idx partition %d column %s differs from the one-task remap", b, p, ga.ColumnName(col))
			}
		}
		ra.Release()
		rb.Release()
		ga.Release()
		gb.Release()
	}
}
