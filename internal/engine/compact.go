package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// CommitOptions bound the commit loop.
type CommitOptions struct {
	// MaxRetries is the number of commit attempts after the first that lost
	// a race (design §4: Iceberg's 4 is a sane default).
	MaxRetries int
	// BackoffMin and BackoffMax bound the jittered exponential backoff
	// between attempts.
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
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
	Verdict Verdict
	Reason  string
}

// CommitReport says what one commit call did.
type CommitReport struct {
	// Version is the committed version (0 if nothing was committed).
	Version uint64
	// Committed are the keys of the tasks in the committed version.
	Committed []string
	// Dropped are the tasks abandoned because of concurrent commits; their
	// outputs were deleted.
	Dropped []Dropped
	// Attempts counts commit attempts; Rebased counts conflicts we rebased
	// over (compatible concurrent commits).
	Attempts, Rebased int
	// Manifest is the committed manifest (nil if nothing was committed).
	Manifest *format.Manifest
}

// CommitRewrites commits executed rewrite tasks that share a read version as
// one Rewrite (one group per task). On a lost race it classifies every
// transaction committed since against each task (Lance's table A): tasks
// still compatible are rebuilt on the new latest version with fresh fragment
// ids; retryable or incompatible ones are dropped and their files deleted.
// The committed manifest is verified against the tasks' promises; a
// mismatch returns ErrInvariant (the caller holds the table).
func CommitRewrites(ctx context.Context, tbl *Table, readVersion uint64, outs []*RewriteOutput, opts CommitOptions) (*CommitReport, error) {
	opts = opts.withDefaults()
	rep := &CommitReport{}
	live := append([]*RewriteOutput(nil), outs...)
	discardAll := func() {
		for _, o := range live {
			o.discard(context.WithoutCancel(ctx), tbl.Bucket())
		}
	}
	stable := false
	checked := readVersion
	for attempt := 0; ; attempt++ {
		if len(live) == 0 {
			return rep, nil
		}
		rep.Attempts++
		groups := make([]*RewriteGroup, len(live))
		for i, o := range live {
			groups[i] = o.Group
		}
		txn := &tablepb.Transaction{ReadVersion: readVersion, Uuid: uuid.NewString()}
		var before *tablepb.Manifest
		var beforeIdx []*tablepb.IndexMetadata
		var txGroups []*tablepb.Transaction_Rewrite_RewriteGroup
		m, err := tbl.CommitIndexed(ctx, checked, txn, func(latest *format.Manifest) (*tablepb.Manifest, *tablepb.IndexSection, error) {
			next, tg, err := ApplyRewrite(latest.PB, groups)
			if err != nil {
				return nil, nil, err
			}
			before, beforeIdx, txGroups = latest.PB, latest.Indices.GetIndices(), tg
			txn.Operation = &tablepb.Transaction_Rewrite_{Rewrite: &tablepb.Transaction_Rewrite{Groups: tg}}
			stable = latest.PB.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0
			if latest.Indices == nil {
				return next, nil, nil
			}
			idx := beforeIdx
			if stable {
				if idx, err = ApplyRewriteIndices(beforeIdx, tg, true); err != nil {
					return nil, nil, err
				}
			}
			// Never commit a version that makes real Lance lose an index
			// (the plan guards against it; concurrent commits may not).
			if err := CheckIndexCoverage(latest.PB, beforeIdx, next, idx); err != nil {
				return nil, nil, &coverageRefusal{err}
			}
			if !stable {
				return next, nil, nil
			}
			return next, &tablepb.IndexSection{Indices: idx}, nil
		})
		var ce *ConflictError
		var cr *coverageRefusal
		switch {
		case errors.As(err, &cr):
			// Refused before anything was committed: the outputs go now.
			discardAll()
			for _, o := range live {
				rep.Dropped = append(rep.Dropped, Dropped{Key: Task{Rewrite: o.Task}.Key(), Verdict: Incompatible, Reason: cr.Error()})
			}
			opts.Logger.Warn("rewrite refused: it would lose an index", "table", tbl.URI(), "err", cr.Error())
			return rep, nil
		case err == nil:
			if verr := VerifyRewrite(before, m.PB, txGroups); verr != nil {
				return rep, fmt.Errorf("verify version %d of %s: %w", m.Version(), tbl.URI(), verr)
			}
			if verr := CheckIndexCoverage(before, beforeIdx, m.PB, m.Indices.GetIndices()); verr != nil {
				return rep, fmt.Errorf("verify version %d of %s: %w: %w", m.Version(), tbl.URI(), ErrInvariant, verr)
			}
			rep.Version, rep.Manifest = m.Version(), m
			for _, o := range live {
				rep.Committed = append(rep.Committed, Task{Rewrite: o.Task}.Key())
			}
			return rep, nil
		case errors.As(err, &ce):
			var keep []*RewriteOutput
			for _, o := range live {
				v, why := Compatible, ""
				for _, c := range ce.Committed {
					if c.Version <= checked {
						continue
					}
					if c.Txn == nil {
						v, why = Incompatible, fmt.Sprintf("version %d has no readable transaction: %v", c.Version, c.Err)
						break
					}
					if v, why = ClassifyForRewrite(o.Group.OldIDs(), c.Txn); v != Compatible {
						why = fmt.Sprintf("version %d: %s", c.Version, why)
						break
					}
				}
				if v == Compatible {
					keep = append(keep, o)
					continue
				}
				opts.Logger.Info("rewrite task dropped after a conflict", "table", tbl.URI(), "task_id", Task{Rewrite: o.Task}.Key(), "verdict", v.String(), "err", why)
				rep.Dropped = append(rep.Dropped, Dropped{Key: Task{Rewrite: o.Task}.Key(), Verdict: v, Reason: why})
				o.discard(context.WithoutCancel(ctx), tbl.Bucket())
			}
			live = keep
			checked = ce.LatestCommitted()
			if len(live) == 0 {
				return rep, nil
			}
			rep.Rebased++
			if attempt >= opts.MaxRetries {
				discardAll()
				for _, o := range live {
					rep.Dropped = append(rep.Dropped, Dropped{Key: Task{Rewrite: o.Task}.Key(), Verdict: Retryable, Reason: "out of commit retries"})
				}
				return rep, nil
			}
			opts.Logger.Info("commit conflict, rebasing", "table", tbl.URI(), "read_version", readVersion, "version", checked, "attempt", attempt+1)
			if err := opts.sleep(ctx, attempt); err != nil {
				discardAll()
				return rep, err
			}
		default:
			// Unknown outcome (the put may or may not have happened): the
			// outputs stay for cleanup's window rather than risk deleting
			// files a committed version references.
			return rep, err
		}
	}
}

// coverageRefusal is a rewrite commit refused because real Lance would lose
// an index afterwards (CheckIndexCoverage).
type coverageRefusal struct{ err error }

func (c *coverageRefusal) Error() string { return "refused: " + c.err.Error() }
func (c *coverageRefusal) Unwrap() error { return c.err }

// CommitRepacks commits executed repack tasks as one Update with
// update_mode REWRITE_COLUMNS (the repack carrier, design §3). On a lost
// race, table-replacing or unknown transactions abandon every task and a
// Merge makes them retryable; otherwise each task's fragment is taken from
// the new latest version and its files swapped only if they are unchanged
// (RepackRebase), so concurrent deletions are kept.
func CommitRepacks(ctx context.Context, tbl *Table, readVersion uint64, outs []*RepackOutput, opts CommitOptions) (*CommitReport, error) {
	opts = opts.withDefaults()
	rep := &CommitReport{}
	live := append([]*RepackOutput(nil), outs...)
	drop := func(o *RepackOutput, v Verdict, why string) {
		opts.Logger.Info("repack task dropped after a conflict", "table", tbl.URI(), "task_id", Task{Repack: o.Task}.Key(), "verdict", v.String(), "err", why)
		rep.Dropped = append(rep.Dropped, Dropped{Key: Task{Repack: o.Task}.Key(), Verdict: v, Reason: why})
		o.discard(context.WithoutCancel(ctx), tbl.Bucket())
	}
	checked := readVersion
	for attempt := 0; ; attempt++ {
		if len(live) == 0 {
			return rep, nil
		}
		rep.Attempts++
		var before *tablepb.Manifest
		var up *tablepb.Transaction_Update
		// A fragment whose files changed is dropped inside the builder and
		// the remaining tasks still commit in this attempt.
		var conflicted []*TaskConflict
		txn := &tablepb.Transaction{ReadVersion: checked, Uuid: uuid.NewString()}
		m, err := tbl.Commit(ctx, checked, txn, func(latest *format.Manifest) (*tablepb.Manifest, error) {
			conflicted = nil
			var results []*RepackResult
			var keep []*RepackOutput
			for _, o := range live {
				cur := fragsByID(latest.PB)[o.Result.Base.GetId()]
				if v, why := RepackRebase(o.Result.Base, cur); v != Compatible {
					conflicted = append(conflicted, &TaskConflict{Fragment: o.Result.Base.GetId(), Verdict: v, Reason: why})
					drop(o, v, why)
					continue
				}
				keep = append(keep, o)
				results = append(results, o.Result)
			}
			live = keep
			if len(results) == 0 {
				return nil, errNothingToCommit
			}
			next, u, err := ApplyRepacks(latest.PB, results)
			if err != nil {
				return nil, err
			}
			before, up = latest.PB, u
			txn.Operation = &tablepb.Transaction_Update_{Update: u}
			return next, nil
		})
		var ce *ConflictError
		switch {
		case errors.Is(err, errNothingToCommit):
			return rep, nil
		case err == nil:
			if verr := VerifyRepack(before, m.PB, up.GetUpdatedFragments()); verr != nil {
				return rep, fmt.Errorf("verify version %d of %s: %w", m.Version(), tbl.URI(), verr)
			}
			rep.Version, rep.Manifest = m.Version(), m
			for _, o := range live {
				rep.Committed = append(rep.Committed, Task{Repack: o.Task}.Key())
			}
			return rep, nil
		case errors.As(err, &ce):
			var keep []*RepackOutput
			for _, o := range live {
				frags := map[uint64]bool{o.Task.Fragment: true}
				v, why := Compatible, ""
				for _, c := range ce.Committed {
					if c.Version <= checked {
						continue
					}
					if c.Txn == nil {
						v, why = Incompatible, fmt.Sprintf("version %d has no readable transaction: %v", c.Version, c.Err)
						break
					}
					if v, why = ClassifyForRepack(frags, c.Txn); v != Compatible {
						why = fmt.Sprintf("version %d: %s", c.Version, why)
						break
					}
				}
				if v == Compatible {
					keep = append(keep, o)
				} else {
					drop(o, v, why)
				}
			}
			live = keep
			checked = ce.LatestCommitted()
			if len(live) == 0 {
				return rep, nil
			}
			rep.Rebased++
			if attempt >= opts.MaxRetries {
				for _, o := range live {
					drop(o, Retryable, "out of commit retries")
				}
				return rep, nil
			}
			if err := opts.sleep(ctx, attempt); err != nil {
				for _, o := range live {
					o.discard(context.WithoutCancel(ctx), tbl.Bucket())
				}
				return rep, err
			}
		default:
			return rep, err
		}
	}
}

var errNothingToCommit = errors.New("nothing left to commit")
