package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

// execTaskArg is the first argument of the bench binary run as one worker
// executing one task (remapPartsBench's children).
const execTaskArg = "exec-task"

// execTaskMain executes the job.Task JSON in taskFile against its table,
// as a daemon worker does, and writes the encoded result to resultFile.
func execTaskMain(taskFile, resultFile string) {
	ctx := context.Background()
	data, err := os.ReadFile(taskFile)
	if err != nil {
		log.Fatal(err)
	}
	var t job.Task
	if err := json.Unmarshal(data, &t); err != nil {
		log.Fatalf("decode task %s: %v", taskFile, err)
	}
	tbl, closeTable := openBenchTable(ctx, t.Table())
	defer closeTable()
	if resultFile == "" {
		// The baseline: a worker that opened the table and read its
		// latest manifest, and executed nothing.
		if _, err := tbl.Latest(ctx); err != nil {
			log.Fatal(err)
		}
		return
	}
	r := &engine.Runner{Table: tbl}
	m, err := r.LoadReadVersion(ctx, t)
	if err != nil {
		log.Fatal(err)
	}
	p, err := r.Execute(ctx, m.PB, t)
	if err != nil {
		log.Fatalf("task %s: %v", t.Key(), err)
	}
	payload, err := job.EncodeResult(p.Job, p.JournalID)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(resultFile, payload, 0o644); err != nil {
		log.Fatal(err)
	}
}

func openBenchTable(ctx context.Context, uri string) (*table.Table, func()) {
	b, err := store.Open(ctx, uri)
	if err != nil {
		log.Fatal(err)
	}
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		log.Fatal(err)
	}
	return tbl, func() { _ = b.Close() }
}

// openLatest opens the table at uri and reads its latest manifest.
func openLatest(ctx context.Context, uri string) (*table.Table, *format.Manifest, func()) {
	tbl, closeTable := openBenchTable(ctx, uri)
	m, err := tbl.Latest(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return tbl, m, closeTable
}

// taskRun is one task executed in its own process.
type taskRun struct {
	Kind    string  `json:"kind"` // rewrite, remap, part, join
	Index   string  `json:"index,omitempty"`
	Wall    float64 `json:"wall_seconds"`
	CPU     float64 `json:"cpu_seconds"`
	RSSMiB  float64 `json:"peak_rss_mib"`
	Written int64   `json:"bytes_written"`
}

// driveQueued compacts (scope rewrite, remap) the table at uri as the
// daemon does, with index.remap_part_bytes partBytes: every task (the
// rewrites, then the remaps, parts and joins each commit hands back) runs
// as its own process of the bench binary (a worker), the commits here (the
// coordinator). It returns every task's figures.
func driveQueued(uri, work string, partBytes uint64) []taskRun {
	ctx := context.Background()
	tbl, m, closeTable := openLatest(ctx, uri)
	defer closeTable()
	eff := policy.LanceDefaults(uri)
	eff.Scope.Value = policy.ScopeRewrite
	eff.Index.RemapPartBytes.Value = partBytes
	in := plan.Input{Table: uri, Manifest: m.PB, Policy: eff}
	if m.Indices != nil {
		in.Indices = m.Indices.GetIndices()
	}
	names := map[string]string{}
	for _, ix := range in.Indices {
		names[(&index.Segment{Meta: ix}).UUID()] = ix.GetName()
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	var runs []taskRun
	exec := func(t job.Task) engine.Pending {
		data, err := json.Marshal(t)
		if err != nil {
			log.Fatal(err)
		}
		tf, rf := filepath.Join(work, "task.json"), filepath.Join(work, "result.json")
		if err := os.WriteFile(tf, data, 0o644); err != nil {
			log.Fatal(err)
		}
		r := measure(work, self, execTaskArg, tf, rf)
		payload, err := os.ReadFile(rf)
		if err != nil {
			log.Fatal(err)
		}
		j, jid, err := job.DecodeResult(payload)
		if err != nil {
			log.Fatal(err)
		}
		_, written := j.Bytes()
		tr := taskRun{Kind: string(t.Kind()), Wall: r.wall.Seconds(), CPU: r.cpu.Seconds(), RSSMiB: float64(r.rssKB) / 1024, Written: written}
		var rt *job.RemapTask
		switch {
		case t.Remap != nil:
			rt = t.Remap
		case t.Slice != nil && t.Slice.Remap != nil:
			rt, tr.Kind = t.Slice.Remap, "part"
		case t.Join != nil && t.Join.Remap != nil:
			rt = t.Join.Remap
		}
		if rt != nil {
			if seg, err := rt.SegmentMeta(); err == nil {
				tr.Index = names[(&index.Segment{Meta: seg}).UUID()]
			}
		}
		runs = append(runs, tr)
		return engine.Pending{Job: j, JournalID: jid}
	}
	var ps []engine.Pending
	tasks := plan.Compute(in).Tasks()
	if len(tasks) > 0 {
		// The baseline process: the first task's table opened, nothing run.
		data, err := json.Marshal(tasks[0])
		if err != nil {
			log.Fatal(err)
		}
		tf := filepath.Join(work, "task.json")
		if err := os.WriteFile(tf, data, 0o644); err != nil {
			log.Fatal(err)
		}
		r := measure(work, self, execTaskArg, tf, "")
		runs = append(runs, taskRun{Kind: "baseline (table opened, no task)", Wall: r.wall.Seconds(), CPU: r.cpu.Seconds(), RSSMiB: float64(r.rssKB) / 1024})
	}
	for _, t := range tasks {
		ps = append(ps, exec(t))
	}
	r := &engine.Runner{Table: tbl, QueueRemaps: true, QueueJoins: true}
	for round := 0; len(ps) > 0; round++ {
		if round > 8 {
			log.Fatalf("still %d jobs waiting after %d commits", len(ps), round)
		}
		reps, err := r.Commit(ctx, ps)
		if err != nil {
			log.Fatalf("commit: %v", err)
		}
		ps = nil
		for _, rep := range reps {
			if len(rep.Dropped) > 0 || len(rep.Missing) > 0 {
				log.Fatalf("commit dropped %+v, missing %v", rep.Dropped, rep.Missing)
			}
			for _, w := range rep.Waiting {
				ps = append(ps, w.Pending)
			}
			for _, qt := range rep.Queued {
				ps = append(ps, exec(qt))
			}
		}
	}
	return runs
}

// segmentBytes is the bytes of the files of the latest version's segment
// of the index named name.
func segmentBytes(uri, name string) uint64 {
	ctx := context.Background()
	tbl, m, closeTable := openLatest(ctx, uri)
	defer closeTable()
	var n uint64
	for _, ix := range m.Indices.GetIndices() {
		if ix.GetName() != name {
			continue
		}
		dir := "_indices/" + (&index.Segment{Meta: ix}).UUID() + "/"
		if err := tbl.Bucket().List(ctx, dir, func(o store.Object) error { n += uint64(o.Size); return nil }); err != nil {
			log.Fatal(err)
		}
	}
	return n
}

// remapPartsBench compares, on copies of the -indexed table spec, the
// remap of every index in one task per index (index.remap_part_bytes at
// its 512 MiB default) with the remap in parts (remap_part_bytes a sixth
// of the IVF_PQ segment, so about six parts), each task a process of its
// own as on a daemon's workers; and real Lance's optimize() on a third
// copy for reference. Every copy is checked with real Lance.
func remapPartsBench(spec string, e env) map[string]any {
	sb := buildIndexed(spec, e.work, e.cache, e.oracleDir)
	before := verifyIndexed(e.oracleDir, sb)
	vecBytes := segmentBytes("file://"+sb, "vec_idx")
	out := map[string]any{"table": fmt.Sprintf("indexed-%s, %d rows", spec, before.Rows), "vec_idx_bytes": vecBytes,
		"id_idx_bytes": segmentBytes("file://"+sb, "id_idx"), "text_idx_bytes": segmentBytes("file://"+sb, "text_idx")}
	var problems []string
	for _, mode := range []struct {
		name      string
		partBytes uint64
	}{{"one_task", policy.DefaultRemapPartBytes}, {"parts", vecBytes / 6}} {
		c := filepath.Join(e.work, "rp-"+mode.name, "t.lance")
		copyTree(sb, c)
		runs := driveQueued("file://"+c, filepath.Dir(filepath.Dir(c)), mode.partBytes)
		check := verifyIndexed(e.oracleDir, c)
		os.RemoveAll(filepath.Dir(c))
		for name, b := range before.Indices {
			got, ok := check.Indices[name]
			if !ok || got.Indexed != b.Indexed || got.Unindexed != b.Unindexed || got.Segments != 1 {
				problems = append(problems, fmt.Sprintf("%s: %s before %+v, after %+v", mode.name, name, b, got))
			}
		}
		for _, q := range []struct {
			name   string
			was, o indexedQuery
		}{{"btree_eq", before.BTreeEq, check.BTreeEq}, {"btree_range", before.BTreeRange, check.BTreeRange}, {"fts", before.FTS, check.FTS}, {"vector", before.Vector, check.Vector}} {
			if !q.o.ViaIndex || (q.name != "vector" && q.o.Rows != q.was.Rows) {
				problems = append(problems, fmt.Sprintf("%s: %s rows %d (before %d), through the index %v", mode.name, q.name, q.o.Rows, q.was.Rows, q.o.ViaIndex))
			}
		}
		out[mode.name] = map[string]any{"remap_part_bytes": mode.partBytes, "tasks": runs, "summary": summarizeRuns(runs)}
	}
	c := filepath.Join(e.work, "rp-lance", "t.lance")
	copyTree(sb, c)
	l := measure(e.oracleDir, "node", "../bench/optimize.mjs", c)
	os.RemoveAll(filepath.Dir(c))
	out["lance_optimize"] = map[string]any{"wall_seconds": l.wall.Seconds(), "cpu_seconds": l.cpu.Seconds(), "peak_rss_mib": float64(l.rssKB) / 1024}
	out["checks"], out["checks_ok"] = strings.Join(problems, "; "), len(problems) == 0
	return out
}

// summarizeRuns sums, per kind and index, the tasks' wall and CPU and
// takes the longest wall and the largest peak RSS of one.
func summarizeRuns(runs []taskRun) []string {
	type agg struct {
		n              int
		wall, cpu      float64
		rss, wallOfOne float64
	}
	by := map[string]*agg{}
	var keys []string
	for _, r := range runs {
		k := r.Kind
		if r.Index != "" {
			k += " " + r.Index
		}
		a := by[k]
		if a == nil {
			a = &agg{}
			by[k] = a
			keys = append(keys, k)
		}
		a.n++
		a.wall += r.Wall
		a.cpu += r.CPU
		a.rss = max(a.rss, r.RSSMiB)
		a.wallOfOne = max(a.wallOfOne, r.Wall)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		a := by[k]
		out = append(out, fmt.Sprintf("%s: %d task(s), wall %.2f s (longest %.2f s), CPU %.2f s, peak RSS of one %.0f MiB", k, a.n, a.wall, a.wallOfOne, a.cpu, a.rss))
	}
	return out
}
