package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// CommitOptions bound the commit loop.
type CommitOptions struct {
	// MaxRetries is the number of commit attempts after the first that lost
	// a race (Iceberg's default of 4 retries is a sane one here too).
	MaxRetries int
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between attempts.
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
	// Name is the table's name in logs (default: its URI).
	Name string
}

func (o CommitOptions) withDefaults() CommitOptions {
	if o.MaxRetries == 0 {
		o.MaxRetries = 4
	}
	if o.BackoffMin == 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o CommitOptions) sleep(ctx context.Context, attempt int) error {
	d := o.BackoffMin << min(attempt, 20)
	if d > o.BackoffMax || d <= 0 {
		d = o.BackoffMax
	}
	d = d/2 + rand.N(d/2+1) // jitter
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Dropped is a task that was not committed, and why.
type Dropped struct {
	Key     string
	Verdict job.Verdict
	Reason  string
}

// CommitReport says what one commit call did.
type CommitReport struct {
	// Op names the transaction ("rewrite", "update"); ReadVersion is the
	// version its jobs were planned on.
	Op          string
	ReadVersion uint64
	// Version is the committed version (0 if nothing was committed).
	Version uint64
	// Committed are the keys of the tasks in the committed version.
	Committed []string
	// Dropped are the tasks abandoned because of concurrent commits; their
	// outputs were deleted.
	Dropped []Dropped
	// Missing are tasks whose outputs were gone before the commit (cleanup
	// took them for dead); they were not committed.
	Missing []string
	// Attempts counts commit attempts; Rebased counts conflicts we rebased
	// over (compatible concurrent commits).
	Attempts, Rebased int
	// Manifest is the committed manifest (nil if nothing was committed);
	// Base is the manifest it was built on (the latest version when the
	// winning attempt was made).
	Manifest, Base *format.Manifest
	// Queued are index remap tasks for workers (Runner.QueueRemaps) and
	// Waiting the rewrite jobs, ids reserved, that were not committed
	// because they wait for them.
	Queued  []job.Task
	Waiting []Waiting
	// Joined are the joins of tasks run in slices that ran here (not
	// QueueJoins), committed with the rest.
	Joined []Pending
}

// Waiting is an executed rewrite that waits for the remap tasks of the
// index segments covering it (After, task keys) before it commits.
type Waiting struct {
	Pending
	After []string
}

var errNothingToCommit = errors.New("nothing left to commit")

// committer is one CommitJobs call in progress.
type committer struct {
	ctx     context.Context
	tbl     *table.Table
	opts    CommitOptions
	rep     *CommitReport
	live    []job.Job
	checked uint64
}

// drop abandons a job: its outputs are deleted and the report says why.
func (c *committer) drop(j job.Job, v job.Verdict, why string) {
	key := j.Task().Key()
	c.opts.Logger.Info("task dropped at commit", "table", c.opts.Name, "task_id", key, "kind", string(j.Task().Kind()), "verdict", v.String(), "err", why)
	c.rep.Dropped = append(c.rep.Dropped, Dropped{Key: key, Verdict: v, Reason: why})
	deleteKeys(context.WithoutCancel(c.ctx), c.tbl.Bucket(), j.Written())
}

// CommitJobs commits executed jobs that share an Op and were planned on
// readVersion as one transaction. It is the one commit loop: each attempt
// builds on the latest manifest (op.Build; jobs it refuses are dropped);
// on a lost race every transaction committed since is classified against
// every job (job.ClassifyAll): compatible jobs are rebuilt on the new
// latest version after a jittered backoff, the others dropped and their
// files deleted. A committed manifest is verified against the jobs'
// promises; a mismatch returns job.ErrInvariant (the caller holds the
// table). Any other commit error leaves the outputs for cleanup, since the
// manifest put may have happened.
func CommitJobs(ctx context.Context, tbl *table.Table, readVersion uint64, op job.Op, jobs []job.Job, opts CommitOptions) (*CommitReport, error) {
	opts = opts.withDefaults()
	if opts.Name == "" {
		opts.Name = tbl.URI()
	}
	c := &committer{ctx: ctx, tbl: tbl, opts: opts, live: append([]job.Job(nil), jobs...), checked: readVersion,
		rep: &CommitReport{Op: op.Name(), ReadVersion: readVersion}}
	for attempt := 0; len(c.live) > 0; attempt++ {
		c.rep.Attempts++
		m, verify, err := c.attempt(op, readVersion)
		var ce *table.ConflictError
		switch {
		case errors.Is(err, errNothingToCommit):
			return c.rep, nil
		case err == nil:
			if verr := verify(m); verr != nil {
				return c.rep, fmt.Errorf("verify version %d of %s: %w", m.Version(), tbl.URI(), verr)
			}
			c.rep.Version, c.rep.Manifest = m.Version(), m
			for _, j := range c.live {
				c.rep.Committed = append(c.rep.Committed, j.Task().Key())
			}
			c.recordDrift(m)
			return c.rep, nil
		case errors.As(err, &ce):
			if err := c.rebase(ce, attempt, readVersion); err != nil {
				return c.rep, err
			}
		default:
			return c.rep, err
		}
	}
	return c.rep, nil
}

// attempt makes one commit attempt of the live jobs on c.checked.
func (c *committer) attempt(op job.Op, readVersion uint64) (*format.Manifest, func(*format.Manifest) error, error) {
	var built *job.Built
	txn := &tablepb.Transaction{ReadVersion: op.TxnReadVersion(readVersion, c.checked), Uuid: uuid.NewString()}
	m, err := c.tbl.CommitIndexed(c.ctx, c.checked, txn, func(latest *format.Manifest) (*tablepb.Manifest, *tablepb.IndexSection, error) {
		b, err := op.Build(latest, c.live, txn)
		if err != nil {
			return nil, nil, err
		}
		built = b
		c.rep.Base = latest
		if b.Manifest == nil {
			return nil, nil, errNothingToCommit
		}
		return b.Manifest, b.Indices, nil
	})
	if built != nil && len(built.Refused) > 0 {
		// Refused jobs no longer fit the latest manifest: whatever this
		// attempt's outcome, they are not committed.
		refused := map[job.Job]bool{}
		for _, r := range built.Refused {
			refused[r.Job] = true
			c.drop(r.Job, r.Verdict, r.Reason)
		}
		var keep []job.Job
		for _, j := range c.live {
			if !refused[j] {
				keep = append(keep, j)
			}
		}
		c.live = keep
	}
	if err != nil {
		return nil, nil, err
	}
	return m, built.Verify, nil
}

// rebase classifies the jobs against the transactions that won the race,
// drops the incompatible ones and waits before the next attempt.
func (c *committer) rebase(ce *table.ConflictError, attempt int, readVersion uint64) error {
	committed := make([]job.Committed, len(ce.Committed))
	for i, t := range ce.Committed {
		committed[i] = job.Committed{Version: t.Version, Txn: t.Txn, Err: t.Err}
	}
	sets := committedSets(committed)
	var keep []job.Job
	for _, j := range c.live {
		if v := alreadyCommitted(j, sets); v != 0 {
			c.opts.Logger.Warn("task already committed, not committed again", "table", c.opts.Name, "task_id", j.Task().Key(), "version", v)
			c.rep.Committed = append(c.rep.Committed, j.Task().Key())
			continue
		}
		if v, why := job.ClassifyAll(j, c.checked, committed); v != job.Compatible {
			c.drop(j, v, why)
			continue
		}
		keep = append(keep, j)
	}
	c.live = keep
	c.checked = ce.LatestCommitted()
	if len(c.live) == 0 {
		return nil
	}
	c.rep.Rebased++
	if attempt >= c.opts.MaxRetries {
		for _, j := range c.live {
			c.drop(j, job.Retryable, "out of commit retries")
		}
		c.live = nil
		return nil
	}
	c.opts.Logger.Info("commit conflict, rebasing", "table", c.opts.Name, "read_version", readVersion, "version", c.checked, "attempt", attempt+1)
	if err := c.opts.sleep(c.ctx, attempt); err != nil {
		for _, j := range c.live {
			deleteKeys(context.WithoutCancel(c.ctx), c.tbl.Bucket(), j.Written())
		}
		return err
	}
	return nil
}

// recordDrift adds the drift the committed vector catch-ups measured to
// the table's drift record. The record is advice (plan reasons, a metric):
// a failure to write it is logged, the commit stands.
func (c *committer) recordDrift(m *format.Manifest) {
	var samples []drift.Sample
	for _, j := range c.live {
		if o, ok := j.(*job.CatchUpOutput); ok && o.Drift != nil {
			d := o.Drift
			samples = append(samples, drift.Sample{Index: o.CatchUp.Index, Model: d.Model, Rows: d.Rows, Far: d.Far, Bound: d.Bound, Reference: d.Reference})
		}
	}
	if err := drift.Update(context.WithoutCancel(c.ctx), c.tbl.Bucket(), m.Version(), m.Indices.GetIndices(), samples); err != nil {
		c.opts.Logger.Warn("drift record not written", "table", c.opts.Name, "version", m.Version(), "err", err)
	}
}

// deleteKeys deletes files no manifest references; one that fails to go is
// left for cleanup's unverified-file window.
func deleteKeys(ctx context.Context, b *store.Bucket, keys []string) {
	for _, k := range keys {
		if err := b.Delete(ctx, k); err != nil && !errors.Is(err, store.ErrNotFound) {
			continue
		}
	}
}
