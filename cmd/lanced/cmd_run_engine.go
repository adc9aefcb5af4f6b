package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
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
	journal *journal.Keeper
	cleanup *cleanup.Scheduler
	// quarantined counts fragments the runner quarantined (nil: none).
	quarantined prometheus.Counter
	// reg, if set, receives the tables' object-store metrics.
	reg prometheus.Registerer
	// delay holds each task this long after its size is known, before it
	// works (--debug-task-delay: lets tests see a running task).
	delay time.Duration
}

func (w *maintainWorkload) openTable(ctx context.Context, uri string) (*table.Table, *store.Bucket, error) {
	return openEngineTable(ctx, uri, w.open(uri), w.reg)
}

// openEngineTable opens the table at openURI (uri with its root's
// connection query); errors name uri. With reg set, the bucket's calls are
// counted: lanced_store_* metrics of operations, failures by code
// (throttled, unavailable, ...) and latency.
func openEngineTable(ctx context.Context, uri, openURI string, reg prometheus.Registerer) (*table.Table, *store.Bucket, error) {
	b, err := store.Open(ctx, openURI)
	if err != nil {
		return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
	}
	if reg != nil {
		if b, err = store.Instrument(b, reg); err != nil {
			return nil, nil, fmt.Errorf("open table %s: %w", uri, err)
		}
	}
	// One task's lookups (open, plan or commit checks, the commit) share
	// a listing of _versions/: a LIST request on an object store.
	tbl, err := table.OpenShared(ctx, b)
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
	mk, err := loadMarks(ctx, b, m)
	if err != nil {
		return scheduler.Plan{}, err
	}
	in := plan.Input{Table: table, Manifest: m.PB, Policy: eff, InFlight: inFlight,
		Quarantined: quarantine.Reasons(mk.fragments), Unremappable: quarantine.IndexReasons(mk.indices), Drift: mk.drift}
	if m.Indices != nil {
		in.Indices = m.Indices.GetIndices()
	}
	p := plan.Compute(in)
	if w.log.Enabled(ctx, slog.LevelDebug) {
		// Why each index is or is not caught up (a catch-up deferred
		// behind a task in flight says so), as `lanced plan` shows it.
		for _, d := range p.Indices {
			if d.CatchUp != nil {
				w.log.Debug("index catch-up decision", "table", table, "version", m.Version(), "index", d.Name, "action", d.CatchUp.Action, "reason", d.CatchUp.Reason, "in_flight", len(inFlight))
			}
		}
	}
	if len(p.Tasks()) == 0 {
		w.cleanup.Trigger(table)
	}
	for _, warn := range p.Warnings {
		w.log.Warn("plan warning", "table", table, "version", m.Version(), "err", warn)
	}
	for _, t := range p.Tasks() {
		st, err := queueTask(table, t)
		if err != nil {
			return scheduler.Plan{}, err
		}
		out.Tasks = append(out.Tasks, st)
	}
	return out, nil
}

// queueTask is an engine task in the scheduler's envelope.
func queueTask(table string, t job.Task) (scheduler.Task, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return scheduler.Task{}, fmt.Errorf("encode task %s: %w", t.Key(), err)
	}
	return scheduler.Task{Kind: string(t.Kind()), Key: t.Key(), Table: table, ReadVersion: t.ReadVersion(), Payload: payload}, nil
}

func (w *maintainWorkload) runner(tbl *table.Table, name string) *engine.Runner {
	r := &engine.Runner{Table: tbl, Name: name, Journal: w.journal, Log: w.log, Options: engine.CommitOptions{Logger: w.log}, CheckOutputs: true}
	if w.quarantined != nil {
		r.Quarantined = func(quarantine.Mark) { w.quarantined.Inc() }
	}
	return r
}

func (w *maintainWorkload) Execute(ctx context.Context, st scheduler.Task) (scheduler.Result, error) {
	var t job.Task
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
	r := w.runner(tbl, t.Table())
	m, err := r.LoadReadVersion(ctx, t)
	if err != nil {
		return scheduler.Result{}, err
	}
	rows, bytes := engine.TaskSize(m.PB, t)
	progress.Expect(ctx, rows, bytes)
	if w.delay > 0 {
		select {
		case <-time.After(w.delay):
		case <-ctx.Done():
			return scheduler.Result{}, context.Cause(ctx)
		}
	}
	p, err := r.Execute(ctx, m.PB, t)
	if err != nil {
		return scheduler.Result{}, err
	}
	payload, err := job.EncodeResult(p.Job, p.JournalID)
	if err != nil {
		r.Discard(ctx, []engine.Pending{p})
		return scheduler.Result{}, fmt.Errorf("encode result %s: %w", st.Key, err)
	}
	read, written := p.Job.Bytes()
	res := scheduler.Result{Payload: payload, BytesRead: read, BytesWritten: written}
	res.FragmentsBefore, res.FragmentsAfter, res.RowsBefore, res.RowsAfter = jobSizes(m.PB, t, p.Job)
	return res, nil
}

// jobSizes are the fragments and live rows a job replaced and wrote: a
// rewrite's new fragments, otherwise the same fragments (a repack keeps its
// fragment and rows and changes only files).
func jobSizes(m *tablepb.Manifest, t job.Task, j job.Job) (fragsBefore, fragsAfter int, rowsBefore, rowsAfter uint64) {
	frags := format.FragmentsByID(m)
	for _, id := range t.Fragments() {
		rowsBefore += format.LiveRows(frags[id])
	}
	fragsBefore, fragsAfter, rowsAfter = len(t.Fragments()), len(t.Fragments()), rowsBefore
	if o, ok := j.(*job.RewriteOutput); ok && o.Group != nil {
		fragsAfter, rowsAfter = len(o.Group.New), 0
		for _, f := range o.Group.New {
			rowsAfter += format.LiveRows(f)
		}
	}
	return fragsBefore, fragsAfter, rowsBefore, rowsAfter
}

// Commit commits a batch with the engine's runner (one transaction per
// kind and read version, rewrites first).
func (w *maintainWorkload) Commit(ctx context.Context, table string, results []scheduler.Result) (scheduler.CommitReport, error) {
	var rep scheduler.CommitReport
	tbl, b, err := w.openTable(ctx, table)
	if err != nil {
		return rep, err
	}
	defer b.Close()
	// No cleanup of this table while its commit checks outputs and commits.
	defer w.cleanup.LockTable(table)()
	ps := make([]engine.Pending, 0, len(results))
	for _, r := range results {
		j, jid, err := job.DecodeResult(r.Payload)
		if err != nil {
			return rep, fmt.Errorf("decode result %s: %w", r.Task.Key, err)
		}
		ps = append(ps, engine.Pending{Job: j, JournalID: jid})
	}
	written := map[string]int{}
	for _, p := range ps {
		written[p.Job.Task().Key()] = len(p.Job.Written())
	}
	// Index remaps run on workers: the first commit of a rewrite batch
	// reserves its new fragment ids and asks for one remap task per
	// covering segment; the rewrites wait (kept) and commit with the
	// remap results. So do joins: the slices of a task wait for their
	// siblings, then for the join task, which commits.
	r := w.runner(tbl, table)
	r.QueueRemaps = true
	r.QueueJoins = true
	reports, cerr := r.Commit(ctx, ps)
	byKey := map[string]scheduler.Result{}
	for _, res := range results {
		byKey[res.Task.Key] = res
	}
	for _, er := range reports {
		for _, t := range er.Queued {
			st, err := queueTask(table, t)
			if err != nil {
				return rep, err
			}
			rep.Followups = append(rep.Followups, st)
		}
		for _, wt := range er.Waiting {
			payload, err := job.EncodeResult(wt.Job, wt.JournalID)
			if err != nil {
				return rep, fmt.Errorf("encode result %s: %w", wt.Job.Task().Key(), err)
			}
			kept := byKey[wt.Job.Task().Key()]
			kept.Payload, kept.After = payload, wt.After
			rep.Kept = append(rep.Kept, kept)
		}
		rep.Version = max(rep.Version, er.Version)
		rep.Rebased += er.Rebased
		if len(er.Missing) > 0 {
			rep.Replan = true
			rep.Dropped = append(rep.Dropped, er.Missing...)
		}
		for _, d := range er.Dropped {
			rep.FilesRemoved += written[d.Key]
			rep.Replan = true
			rep.Dropped = append(rep.Dropped, d.Key)
		}
	}
	if cerr != nil {
		return rep, cerr
	}
	if rep.Version != 0 {
		w.cleanup.Trigger(table)
	}
	return rep, nil
}

// engineClassify maps the engine's error taxonomy (engine.Classify) onto
// the scheduler's outcomes. A corrupt fragment the runner quarantined
// (the error carries a *engine.FragmentError) makes the task stale: the
// quarantine is new table state, so the table is planned again without
// that fragment and the rest keeps being maintained; corrupt input without
// a fragment to blame holds the table.
func engineClassify(err error) (scheduler.Outcome, bool) {
	switch engine.Classify(err) {
	case engine.Hold:
		return scheduler.OutcomeCorrupt, true
	case engine.Quarantine:
		var fe *engine.FragmentError
		if errors.As(err, &fe) {
			return scheduler.OutcomeStale, true
		}
		return scheduler.OutcomeCorrupt, true
	case engine.Skip, engine.Abandon:
		return scheduler.OutcomeAbandoned, true
	case engine.Drop:
		return scheduler.OutcomeStale, true
	}
	return scheduler.OutcomeRetried, true
}
