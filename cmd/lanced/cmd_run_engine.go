package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"slices"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

// maintainWorkload is `lanced run`'s default work: the planner
// (internal/scheduler/plan) on the table's latest manifest and effective
// policy, the engine's rewrite and repack executors on any worker, and the
// engine's committers on the table's coordinator, in micro-batches.
type maintainWorkload struct {
	policies func() *policy.Set
	log      *slog.Logger
	// open maps a table URI to the URI to open it with (the root's
	// connection query re-attached; watch.Roots.OpenURI).
	open func(table string) string
	// journal records each execution's outputs (nil: no journal);
	// cleanup runs cleanup after commits and empty plans (nil: none).
	journal *journalKeeper
	cleanup *cleanupRunner
	// reg, if set, receives the tables' object-store metrics.
	reg prometheus.Registerer
}

func (w *maintainWorkload) openTable(ctx context.Context, uri string) (*engine.Table, *store.Bucket, error) {
	if w.reg == nil {
		return openEngineTable(ctx, w.open(uri))
	}
	b, err := store.Open(ctx, w.open(uri))
	if err != nil {
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	// lanced_store_* metrics: operations, failures by code (throttled,
	// unavailable, ...) and latency of every table's object-store calls.
	if b, err = store.Instrument(b, w.reg); err != nil {
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	tbl, err := engine.OpenTable(ctx, b)
	if err != nil {
		_ = b.Close()
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	return tbl, b, nil
}

func openEngineTable(ctx context.Context, uri string) (*engine.Table, *store.Bucket, error) {
	b, err := store.Open(ctx, uri)
	if err != nil {
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	tbl, err := engine.OpenTable(ctx, b)
	if err != nil {
		_ = b.Close()
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	return tbl, b, nil
}

func (w *maintainWorkload) Plan(ctx context.Context, table string, inFlight []string) (scheduler.Plan, error) {
	tbl, b, err := w.openTable(ctx, table)
	if err != nil {
		return scheduler.Plan{}, err
	}
	defer b.Close()
	m, err := tbl.Latest(ctx)
	if err != nil {
		return scheduler.Plan{}, err
	}
	eff := w.policies().Resolve(table, m.PB.GetConfig())
	out := scheduler.Plan{ReadVersion: m.Version(), CommitBatchTasks: int(eff.Compaction.CommitBatchTasks.Value)}
	if !eff.Enabled.Value {
		return out, nil
	}
	in := plan.Input{Table: table, Manifest: m.PB, Policy: eff, InFlight: inFlight}
	if m.Indices != nil {
		in.Indices = m.Indices.GetIndices()
	}
	p := plan.Compute(in)
	if len(p.Tasks()) == 0 {
		w.cleanup.Trigger(table)
	}
	for _, warn := range p.Warnings {
		w.log.Warn("plan warning", "table", table, "version", m.Version(), "err", warn)
	}
	for _, t := range p.Tasks() {
		payload, err := json.Marshal(t)
		if err != nil {
			return scheduler.Plan{}, fmt.Errorf("encode task %s: %w", t.Key(), err)
		}
		out.Tasks = append(out.Tasks, scheduler.Task{
			Kind: string(t.Kind()), Key: t.Key(), Table: table, ReadVersion: t.ReadVersion(), Payload: payload,
		})
	}
	return out, nil
}

func (w *maintainWorkload) Execute(ctx context.Context, st scheduler.Task) (scheduler.Result, error) {
	var t engine.Task
	if err := json.Unmarshal(st.Payload, &t); err != nil {
		return scheduler.Result{}, fmt.Errorf("decode task %s: %w", st.Key, err)
	}
	if err := t.Validate(); err != nil {
		return scheduler.Result{}, fmt.Errorf("task %s: %w", st.Key, err)
	}
	tbl, b, err := w.openTable(ctx, t.Table())
	if err != nil {
		return scheduler.Result{}, err
	}
	defer b.Close()
	m, err := tbl.Load(ctx, t.ReadVersion())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return scheduler.Result{}, fmt.Errorf("task %s: read version cleaned up: %w", st.Key, engine.ErrStale)
		}
		return scheduler.Result{}, err
	}
	var res engine.Result
	var read, written int64
	jctx, jid := w.journal.begin(ctx, t.Table(), b, st.Key)
	stopRefresh := w.journal.keepAlive(ctx, b, jid)
	defer stopRefresh()
	switch {
	case t.Rewrite != nil:
		out, err := engine.ExecuteRewrite(jctx, tbl, m.PB, t.Rewrite)
		if err != nil {
			w.journal.discard(ctx, t.Table(), b, jid)
			return scheduler.Result{}, err
		}
		res.Rewrite, read, written = out, out.BytesRead, out.BytesWritten
	case t.Repack != nil:
		out, err := engine.ExecuteRepack(jctx, tbl, m.PB, t.Repack)
		if err != nil {
			w.journal.discard(ctx, t.Table(), b, jid)
			return scheduler.Result{}, err
		}
		res.Repack, read, written = out, out.BytesRead, out.BytesWritten
	}
	payload, err := encodeResult(res, jid)
	if err != nil {
		w.journal.discard(ctx, t.Table(), b, jid)
		return scheduler.Result{}, fmt.Errorf("encode result %s: %w", st.Key, err)
	}
	return scheduler.Result{Payload: payload, BytesRead: read, BytesWritten: written}, nil
}

// Commit commits a batch: rewrites first, then repacks, one engine commit
// per (kind, read version), so each commit's tasks share a read version.
func (w *maintainWorkload) Commit(ctx context.Context, table string, results []scheduler.Result) (scheduler.CommitReport, error) {
	var rep scheduler.CommitReport
	type group struct {
		kind engine.TaskKind
		rv   uint64
	}
	rewrites := map[uint64][]*engine.RewriteOutput{}
	repacks := map[uint64][]*engine.RepackOutput{}
	var groups []group
	tbl, b, err := w.openTable(ctx, table)
	if err != nil {
		return rep, err
	}
	defer b.Close()
	// No cleanup of this table while its commit checks outputs and commits.
	defer w.cleanup.lockTable(table)()
	journals := map[string]string{} // engine task key -> journal id
	for _, r := range results {
		er, jid, err := decodeResult(r.Payload)
		if err != nil {
			return rep, fmt.Errorf("decode result %s: %w", r.Task.Key, err)
		}
		ok, err := outputsPresent(ctx, b, er.Written())
		if err != nil {
			return rep, err
		}
		if !ok {
			// Cleanup took the task for dead and reclaimed its outputs.
			w.journal.settle(ctx, b, map[string]string{er.Task().Key(): jid}, nil, nil)
			rep.Replan = true
			w.log.Warn("result outputs missing, task dropped", "table", table, "task_id", r.Task.Key)
			continue
		}
		journals[er.Task().Key()] = jid
		switch {
		case er.Rewrite != nil:
			rv := er.Rewrite.Task.ReadVersion
			if len(rewrites[rv]) == 0 {
				groups = append(groups, group{engine.KindRewrite, rv})
			}
			rewrites[rv] = append(rewrites[rv], er.Rewrite)
		case er.Repack != nil:
			rv := er.Repack.Task.ReadVersion
			if len(repacks[rv]) == 0 {
				groups = append(groups, group{engine.KindRepack, rv})
			}
			repacks[rv] = append(repacks[rv], er.Repack)
		}
	}
	slices.SortStableFunc(groups, func(a, b group) int {
		if a.kind != b.kind {
			if a.kind == engine.KindRewrite {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.rv, b.rv)
	})
	for _, g := range groups {
		var er *engine.CommitReport
		var cerr error
		written := map[string]int{}
		ids := map[string]string{}
		if g.kind == engine.KindRewrite {
			for _, o := range rewrites[g.rv] {
				k := engine.Task{Rewrite: o.Task}.Key()
				written[k], ids[k] = len(o.Written), journals[k]
			}
			er, cerr = engine.CommitRewrites(ctx, tbl, g.rv, rewrites[g.rv], engine.CommitOptions{Logger: w.log})
		} else {
			for _, o := range repacks[g.rv] {
				k := engine.Task{Repack: o.Task}.Key()
				written[k], ids[k] = len(o.Written), journals[k]
			}
			er, cerr = engine.CommitRepacks(ctx, tbl, g.rv, repacks[g.rv], engine.CommitOptions{Logger: w.log})
		}
		w.journal.settle(ctx, b, ids, er, cerr)
		if er != nil {
			rep.Version = max(rep.Version, er.Version)
			rep.Rebased += er.Rebased
			for _, d := range er.Dropped {
				rep.FilesRemoved += written[d.Key]
				rep.Replan = true
				w.log.Info("task dropped at commit", "table", table, "task_id", d.Key, "reason", d.Reason)
			}
			if er.Version != 0 {
				w.log.Info("version committed", "table", table, "version", er.Version, "kind", string(g.kind),
					"read_version", g.rv, "tasks", len(er.Committed), "attempt", er.Attempts)
			}
		}
		if cerr != nil {
			return rep, cerr
		}
	}
	if rep.Version != 0 {
		w.cleanup.Trigger(table)
	}
	return rep, nil
}

// engineClassify adds the engine's staleness to classifyErr.
func engineClassify(err error) (scheduler.Outcome, bool) {
	if errors.Is(err, engine.ErrStale) {
		return scheduler.OutcomeStale, true
	}
	return classifyErr(err)
}
