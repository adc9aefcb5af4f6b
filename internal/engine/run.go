package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Runner executes and commits jobs on one table. `lanced compact` (through
// Compact) and the daemon's workers and coordinators use the same Runner
// methods, so both record, commit, retry, verify and settle the same way.
type Runner struct {
	Table *table.Table
	// Name is the table's name in logs (default: the URI it was opened
	// with, which may carry connection options).
	Name string
	// Journal records every file an execution writes before it is written
	// and settles the record after the commit; nil runs without one.
	Journal *journal.Keeper
	Options CommitOptions
	Log     *slog.Logger
	// CheckOutputs makes Commit drop (as Missing) jobs whose outputs are
	// gone: cleanup may have taken a slow execution for dead.
	CheckOutputs bool
	// Quarantined, if set, is called for every fragment Execute
	// quarantines (after the record is written).
	Quarantined func(quarantine.Mark)
	// QuarantinedIndex, if set, is called for every index segment whose
	// remap failed for good (after its record is written).
	QuarantinedIndex func(quarantine.IndexMark)
	// QueueRemaps makes Commit hand the index remaps of a rewrite batch to
	// workers (the daemon's queue) instead of running them here: after the
	// ReserveFragments commit the batch's remap tasks and the rewrites that
	// wait for them come back in a CommitReport (Queued, Waiting), and a
	// later Commit of those rewrites with the remap results commits them.
	QueueRemaps bool
	// QueueJoins makes Commit hand the join of a task run in slices to
	// workers instead of running it here: the join task and the slices
	// that wait for it come back in a CommitReport (Queued, Waiting).
	QueueJoins bool
}

// Pending is an executed job waiting for its commit, with the journal id
// its outputs are recorded under ("" without a journal).
type Pending struct {
	Job       job.Job
	JournalID string
}

func (r *Runner) name() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Table.URI()
}

func (r *Runner) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// LoadReadVersion loads the manifest a task was planned on; a version that
// was cleaned up since makes the task stale.
func (r *Runner) LoadReadVersion(ctx context.Context, t job.Task) (*format.Manifest, error) {
	m, err := r.Table.Load(ctx, t.ReadVersion())
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("task %s: read version cleaned up: %w: %w", t.Key(), job.ErrStale, err)
	}
	return m, err
}

// Execute runs one task against m, the manifest of its read version. Its
// outputs are recorded in the journal under a fresh execution id (a task
// redelivered while an earlier execution still runs gets its own entry);
// on failure they are deleted at once.
func (r *Runner) Execute(ctx context.Context, m *tablepb.Manifest, t job.Task) (Pending, error) {
	if err := t.Validate(); err != nil {
		return Pending{}, err
	}
	b := r.Table.Bucket()
	tp := &taskProgress{next: ctx}
	ctx = progress.With(ctx, tp)
	t0 := time.Now()
	jctx, jid := r.Journal.Begin(ctx, r.name(), b, t.Key())
	stop := r.Journal.KeepAlive(ctx, b, jid)
	defer stop()
	var j job.Job
	var err error
	switch {
	case t.Rewrite != nil:
		var out *job.RewriteOutput
		if out, err = ExecuteRewrite(jctx, r.Table, m, t.Rewrite); err == nil {
			j = out
		}
	case t.Repack != nil:
		var out *job.RepackOutput
		if out, err = ExecuteRepack(jctx, r.Table, m, t.Repack); err == nil {
			j = out
		}
	case t.Remap != nil:
		var out *job.RemapOutput
		if out, err = ExecuteRemap(jctx, r.Table, m, t.Remap); err == nil {
			j = out
		}
	case t.CatchUp != nil:
		var out *job.CatchUpOutput
		if out, err = ExecuteCatchUp(jctx, r.Table, t.CatchUp); err == nil {
			j = out
		}
	case t.Slice != nil:
		var out *job.SliceOutput
		if out, err = ExecuteSlice(jctx, r.Table, m, t.Slice); err == nil {
			j = out
		}
	case t.Join != nil:
		j, err = ExecuteJoin(jctx, r.Table, m, t.Join)
	}
	rt := remapOf(t)
	if err != nil {
		r.Journal.Discard(ctx, r.name(), b, jid)
		if rt != nil {
			// An index file is not a fragment's: its segment is
			// quarantined instead.
			return Pending{}, r.quarantineIndex(ctx, rt, err)
		}
		return Pending{}, r.quarantine(ctx, m, t, err)
	}
	tp.finish(TaskSize(m, t))
	r.logSliced(j, time.Since(t0))
	if rt != nil && t.Slice == nil {
		r.log().Info("index remapped", "table", r.name(), "task_id", t.Key(), "kind", string(t.Kind()),
			"parts", max(1, len(rt.Slices)), "files", len(j.Written()), "duration", time.Since(t0))
	}
	return Pending{Job: j, JournalID: jid}, nil
}

// remapOf is the remap task t runs: a remap, or a part or the join of a
// remap run in parts (nil for other tasks).
func remapOf(t job.Task) *job.RemapTask {
	switch {
	case t.Remap != nil:
		return t.Remap
	case t.Slice != nil:
		return t.Slice.Remap
	case t.Join != nil:
		return t.Join.Remap
	}
	return nil
}

// quarantine handles a failed execution whose error is corrupt input: the
// fragment to blame (from the error, else found by opening each data file
// of the task's fragments) is quarantined with the file and reason. The
// returned error then carries a *FragmentError; without a fragment to
// blame, or if the record cannot be written, it does not, and the table
// is held instead.
func (r *Runner) quarantine(ctx context.Context, m *tablepb.Manifest, t job.Task, err error) error {
	if Classify(err) != Quarantine || ctx.Err() != nil {
		return err
	}
	var fe *FragmentError
	if !errors.As(err, &fe) {
		fe = findCorrupt(ctx, r.Table, m, t.Fragments())
		if fe == nil {
			return err
		}
		err = fmt.Errorf("%w (%w)", fe, err)
	}
	frag := format.FragmentsByID(m)[fe.Fragment]
	if frag == nil {
		return err
	}
	mark := quarantine.New(frag, fe.File, fe.Err.Error())
	if rerr := quarantine.Record(context.WithoutCancel(ctx), r.Table.Bucket(), mark); rerr != nil {
		return fmt.Errorf("fragment %d is corrupt (%v) but its quarantine was not recorded: %v: %w", fe.Fragment, fe.Err, rerr, job.ErrInvariant)
	}
	if r.Quarantined != nil {
		r.Quarantined(mark)
	}
	r.log().Error("fragment quarantined", "table", r.name(), "task_id", t.Key(), "fragment", fe.Fragment, "file", fe.File, "err", fe.Err)
	return err
}

// findCorrupt opens every data file of the fragments ids in m and returns
// the first one that does not open, attributed to its fragment.
func findCorrupt(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, ids []uint64) *FragmentError {
	byID := format.FragmentsByID(m)
	for _, id := range ids {
		for _, df := range byID[id].GetFiles() {
			key := format.DataFileKey(df.GetPath())
			if err := corruptLanceFile(ctx, tbl, key); err != nil {
				return &FragmentError{Fragment: id, File: key, Err: err}
			}
		}
	}
	return nil
}

// corruptLanceFile opens key as a Lance file and returns the error if it
// is corrupt (nil when it opens, or does not open for another reason).
func corruptLanceFile(ctx context.Context, tbl *table.Table, key string) error {
	ra, err := tbl.Bucket().OpenReaderAt(ctx, key)
	if err != nil {
		return nil
	}
	_, err = lancefile.Open(ra, ra.Size(), key)
	_ = ra.Close()
	if err != nil && Classify(err) == Quarantine {
		return err
	}
	return nil
}

// Discard deletes the outputs of executed jobs that will not be committed.
func (r *Runner) Discard(ctx context.Context, ps []Pending) {
	r.discardExcept(ctx, ps, nil)
}

// discardExcept is Discard but leaves the outputs in keep: the files a
// join adopted from its slices, now the join's own.
func (r *Runner) discardExcept(ctx context.Context, ps []Pending, keep map[string]bool) {
	for _, p := range ps {
		if r.Journal != nil && p.JournalID != "" {
			r.Journal.DiscardExcept(ctx, r.name(), r.Table.Bucket(), p.JournalID, keep)
			continue
		}
		deleteKeys(context.WithoutCancel(ctx), r.Table.Bucket(), slices.DeleteFunc(slices.Clone(p.Job.Written()), func(k string) bool { return keep[k] }))
	}
}

// Commit commits executed jobs: grouped by transaction (in job.Ops order)
// and read version, one CommitJobs call per group, so each transaction's
// jobs share a read version. Each group's journal entries are settled
// after its call. It stops at the first error, returning the reports so
// far.
func (r *Runner) Commit(ctx context.Context, ps []Pending) ([]*CommitReport, error) {
	type group struct {
		op   job.Op
		rv   uint64
		jobs []job.Job
		ids  map[string]string
	}
	var groups []*group
	var reports []*CommitReport
	ps, srep, err := r.prepareSlices(ctx, ps)
	if srep != nil {
		reports = append(reports, srep)
	}
	if err != nil {
		return reports, err
	}
	missing := &CommitReport{}
	for _, p := range ps {
		t := p.Job.Task()
		if r.CheckOutputs {
			ok, err := outputsPresent(ctx, r.Table.Bucket(), p.Job.Written())
			if err != nil {
				return reports, err
			}
			if !ok {
				r.Journal.Settle(ctx, r.Table.Bucket(), map[string]string{t.Key(): p.JournalID}, nil, nil, nil)
				missing.Missing = append(missing.Missing, t.Key())
				r.log().Warn("result outputs missing, task dropped", "table", r.name(), "task_id", t.Key())
				continue
			}
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.op == p.Job.Op() && g.rv == t.ReadVersion() })
		if i < 0 {
			groups = append(groups, &group{op: p.Job.Op(), rv: t.ReadVersion(), ids: map[string]string{}})
			i = len(groups) - 1
		}
		groups[i].jobs = append(groups[i].jobs, p.Job)
		groups[i].ids[t.Key()] = p.JournalID
	}
	if len(missing.Missing) > 0 {
		reports = append(reports, missing)
	}
	slices.SortStableFunc(groups, func(a, b *group) int {
		if d := slices.Index(job.Ops, a.op) - slices.Index(job.Ops, b.op); d != 0 {
			return d
		}
		return cmp.Compare(a.rv, b.rv)
	})
	opts := r.Options
	if opts.Logger == nil {
		opts.Logger = r.log()
	}
	if opts.Name == "" {
		opts.Name = r.name()
	}
	for _, g := range groups {
		t0 := time.Now()
		if g.op == job.RewriteTxn {
			pre, err := r.prepareRemaps(ctx, g.rv, g.jobs)
			for _, p := range pre.added {
				g.jobs = append(g.jobs, p.Job)
				g.ids[p.Job.Task().Key()] = p.JournalID
			}
			if len(pre.dropped.Dropped) > 0 {
				var keys []string
				sub := map[string]string{}
				for _, d := range pre.dropped.Dropped {
					keys = append(keys, d.Key)
					sub[d.Key] = g.ids[d.Key]
					delete(g.ids, d.Key)
				}
				r.Journal.Settle(ctx, r.Table.Bucket(), sub, nil, keys, nil)
				reports = append(reports, pre.dropped)
				g.jobs = slices.DeleteFunc(g.jobs, func(j job.Job) bool { return slices.Contains(keys, j.Task().Key()) })
			}
			if err != nil {
				r.Discard(ctx, pendingOf(g.jobs, g.ids))
				return reports, err
			}
			if len(pre.queued) > 0 {
				reports = append(reports, waitForRemaps(g.rv, pre, g.ids))
				g.jobs = slices.DeleteFunc(g.jobs, func(j job.Job) bool {
					o, ok := j.(*job.RewriteOutput)
					return ok && pre.waiting[o] != nil
				})
			}
			// Remaps run on workers (QueueRemaps): their results are in,
			// the Rewrite commit not begun (executeRemaps hits the same
			// point when the remaps run here).
			if r.QueueRemaps && slices.ContainsFunc(g.jobs, func(j job.Job) bool { _, ok := j.(*job.RemapOutput); return ok }) {
				failpoint.HitContext(ctx, "remap.commit")
			}
		}
		rep, err := CommitJobs(ctx, r.Table, g.rv, g.op, g.jobs, opts)
		var dropped []string
		for _, d := range rep.Dropped {
			dropped = append(dropped, d.Key)
		}
		r.Journal.Settle(ctx, r.Table.Bucket(), g.ids, rep.Committed, dropped, err)
		reports = append(reports, rep)
		if rep.Version != 0 {
			args := []any{"table", r.name(), "version", rep.Version, "kind", g.op.Name(),
				"read_version", g.rv, "tasks", len(rep.Committed), "attempt", rep.Attempts, "duration", time.Since(t0)}
			if rep.Base != nil && rep.Manifest != nil {
				b, a := format.ManifestTotals(rep.Base.PB), format.ManifestTotals(rep.Manifest.PB)
				args = append(args, "fragments_before", b.Fragments, "fragments_after", a.Fragments,
					"rows_before", b.Rows, "rows_after", a.Rows, "bytes_before", b.Bytes, "bytes_after", a.Bytes)
			}
			r.log().Info("version committed", args...)
		}
		if err != nil {
			return reports, err
		}
	}
	return reports, nil
}

// waitForRemaps reports the remap tasks prepareRemaps queued and the
// rewrites waiting for them, taking their journal ids out of ids (their
// entries stay open until a later commit settles them).
func waitForRemaps(rv uint64, pre remapPrep, ids map[string]string) *CommitReport {
	rep := &CommitReport{Op: "remap", ReadVersion: rv, Queued: pre.queued}
	for o, after := range pre.waiting {
		key := o.Task().Key()
		rep.Waiting = append(rep.Waiting, Waiting{Pending: Pending{Job: o, JournalID: ids[key]}, After: after})
		delete(ids, key)
	}
	slices.SortFunc(rep.Waiting, func(a, b Waiting) int { return cmp.Compare(a.Job.Task().Key(), b.Job.Task().Key()) })
	return rep
}

// outputsPresent reports whether every file a job wrote still exists.
func outputsPresent(ctx context.Context, b *store.Bucket, written []string) (bool, error) {
	for _, key := range written {
		if _, err := b.Attributes(ctx, key); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return false, nil
			}
			return false, fmt.Errorf("check output %s: %w", key, err)
		}
	}
	return true, nil
}

// CompactOptions configure Compact.
type CompactOptions struct {
	// CommitBatchTasks commits after every this many executed tasks of a
	// kind, so a long run makes progress and the committer holds bounded
	// memory. 0 means all tasks of a kind in one commit.
	CommitBatchTasks int
	Commit           CommitOptions
	Logger           *slog.Logger
	// Journal, if set, records every file a task writes before it is
	// written and settles the record after the commit; after a crash,
	// cleanup finds the leftovers there.
	Journal *journal.Keeper
	// Workers is how many tasks of a batch execute at once (their
	// fragments are disjoint); 0 or 1: one after the other.
	Workers int
}

// Compact executes and commits the tasks planned on m, one transaction kind
// after the other (job.Ops: rewrites, then repacks), each in micro-batches,
// so a run with both kinds makes at least two versions. A task whose inputs
// are gone is counted stale and skipped; a task that fails is counted and
// named in the summary. An ErrInvariant stops the run at once: the caller
// must hold the table.
func Compact(ctx context.Context, tbl *table.Table, m *format.Manifest, tasks []job.Task, opts CompactOptions) (*Summary, error) {
	start := time.Now()
	sum := &Summary{Table: tbl.URI(), ReadVersion: m.Version()}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{Table: tbl, Journal: opts.Journal, Options: opts.Commit, Log: log}
	var qmu sync.Mutex // tasks executing at once quarantine at once
	r.Quarantined = func(mk quarantine.Mark) {
		qmu.Lock()
		defer qmu.Unlock()
		sum.Quarantined = append(sum.Quarantined, mk)
	}
	r.QuarantinedIndex = func(mk quarantine.IndexMark) {
		qmu.Lock()
		defer qmu.Unlock()
		sum.QuarantinedIndices = append(sum.QuarantinedIndices, mk)
	}
	defer func() { sum.Duration = time.Since(start).Round(time.Millisecond).String() }()
	if err := job.CheckDisjoint(tasks); err != nil {
		return sum, err
	}
	for _, t := range tasks {
		rows, bytes := TaskSize(m.PB, t)
		progress.Expect(ctx, rows, bytes)
	}
	batch := opts.CommitBatchTasks
	if batch <= 0 {
		batch = len(tasks) + 1
	}
	for _, op := range job.Ops {
		var ts []job.Task
		for _, t := range tasks {
			if t.Op() == op {
				ts = append(ts, t)
			}
		}
		for i := 0; i < len(ts); {
			j := min(i+batch, len(ts))
			// A task's slices are joined in one batch.
			for j < len(ts) && sameParent(ts[j-1], ts[j]) {
				j++
			}
			if err := r.compactBatch(ctx, m, ts[i:j], sum, opts.Workers); err != nil {
				return sum, err
			}
			i = j
		}
	}
	return sum, nil
}

// sameParent reports whether a and b are slices of one task.
func sameParent(a, b job.Task) bool {
	return a.Slice != nil && b.Slice != nil && a.Slice.Parent().Key() == b.Slice.Parent().Key()
}

// compactBatch executes tasks, up to workers at once, and commits what
// succeeded. Results are taken in task order, as if executed one after the
// other; an ErrInvariant stops the starting of further tasks and discards
// every output of the batch.
func (r *Runner) compactBatch(ctx context.Context, m *format.Manifest, tasks []job.Task, sum *Summary, workers int) error {
	log := r.log()
	type result struct {
		p   Pending
		err error
		ran bool
	}
	results := make([]result, len(tasks))
	var invariant atomic.Bool
	execute := func(i int) {
		t := tasks[i]
		key := t.Key()
		t0 := time.Now()
		log.Info("task started", "table", r.name(), "task_id", key, "kind", string(t.Kind()), "read_version", t.ReadVersion(), "fragments", t.Fragments())
		p, err := r.Execute(ctx, m.PB, t)
		if err == nil {
			log.Info("task executed", "table", r.name(), "task_id", key, "kind", string(t.Kind()), "files", len(p.Job.Written()), "duration", time.Since(t0))
		} else if errors.Is(err, job.ErrInvariant) {
			invariant.Store(true)
		}
		results[i] = result{p: p, err: err, ran: true}
	}
	sem := make(chan struct{}, max(1, workers))
	var wg sync.WaitGroup
	for i := range tasks {
		sem <- struct{}{}
		if invariant.Load() {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			execute(i)
		}()
	}
	wg.Wait()
	var ps []Pending
	for _, res := range results {
		if res.ran && res.err == nil {
			ps = append(ps, res.p)
		}
	}
	for i, res := range results {
		if !res.ran || res.err == nil {
			continue
		}
		key := tasks[i].Key()
		switch {
		case errors.Is(res.err, job.ErrInvariant):
			r.Discard(ctx, ps)
			return res.err
		case errors.Is(res.err, job.ErrStale):
			sum.TasksStale++
			log.Info("task stale", "table", r.name(), "task_id", key, "err", res.err)
		default:
			sum.TasksFailed++
			sum.Errors = append(sum.Errors, fmt.Sprintf("%s: %v", key, res.err))
			log.Warn("task failed", "table", r.name(), "task_id", key, "err", res.err)
		}
	}
	reports, err := r.Commit(ctx, ps)
	committed := map[string]bool{}
	for _, rep := range reports {
		sum.noteReport(rep)
		for _, k := range rep.Committed {
			committed[k] = true
		}
	}
	for _, rep := range reports {
		ps = append(ps, rep.Joined...)
	}
	for _, p := range ps {
		if committed[p.Job.Task().Key()] {
			sum.noteJob(p.Job)
		}
	}
	return err
}
