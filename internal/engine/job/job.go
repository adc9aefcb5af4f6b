package job

import (
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// ErrStale means a task's inputs are no longer what it was planned on (a
// fragment is gone or changed): it writes nothing and is dropped; the table
// is planned again from its newer version.
var ErrStale = errors.New("engine: task inputs are stale")

// Job is an executed task on its way to a commit: what it was asked to do,
// what it wrote, how it judges a transaction someone else committed after
// its read version, and the transaction it joins.
type Job interface {
	// Task is the task the job executed.
	Task() Task
	// Written are the store keys of every file the job wrote; they are
	// deleted if the job is not committed.
	Written() []string
	// Classify judges a transaction committed after the job's read version.
	// Compatible jobs are rebased onto the new latest manifest (by their
	// Op's Build); Retryable and Incompatible ones are dropped.
	Classify(theirs *tablepb.Transaction) (Verdict, string)
	// Op is the transaction the job is committed in.
	Op() Op
	// Bytes are the bytes the job read and wrote.
	Bytes() (read, written int64)
}

// Op is one kind of transaction that jobs are committed in. Every commit
// attempt calls Build on the latest manifest with the jobs still live; the
// commit loop (engine.CommitJobs) owns conflicts, retries, verification and
// the journal.
type Op interface {
	// Name names the operation in logs ("rewrite", "update").
	Name() string
	// TxnReadVersion is the read_version the transaction records, given
	// the version the jobs were planned on and the version the attempt
	// builds on.
	TxnReadVersion(planned, latest uint64) uint64
	// Build applies jobs to latest: it returns the next manifest (a new
	// message), the index section (nil keeps latest's), sets txn's
	// operation, and lists the jobs that no longer fit latest (rebase
	// refusals), which the loop drops. It must not do I/O.
	Build(latest *format.Manifest, jobs []Job, txn *tablepb.Transaction) (*Built, error)
}

// Built is one attempt's manifest and what the loop needs to finish it.
type Built struct {
	Manifest *tablepb.Manifest
	// Indices replaces the index section when non-nil.
	Indices *tablepb.IndexSection
	// Refused are jobs left out of this attempt because latest changed
	// under them; each is dropped with its verdict and reason.
	Refused []Refusal
	// Verify checks the committed manifest against what the jobs promised
	// (ErrInvariant on a mismatch).
	Verify func(committed *format.Manifest) error
}

// Refusal is a job that cannot be applied to the latest manifest.
type Refusal struct {
	Job     Job
	Verdict Verdict
	Reason  string
}

// Ops lists every transaction kind in the order a batch commits them:
// rewrites before repacks, so a run with both makes at least two versions
// and a repack never races the rewrite that removes its fragment; index
// catch-ups last.
var Ops = []Op{RewriteTxn, RepackTxn, CatchUpTxn}

// Job returns the result as a Job (nil for an empty result).
func (r Result) Job() Job {
	switch {
	case r.Rewrite != nil:
		return r.Rewrite
	case r.Repack != nil:
		return r.Repack
	case r.Remap != nil:
		return r.Remap
	case r.CatchUp != nil:
		return r.CatchUp
	case r.Slice != nil:
		return r.Slice
	}
	return nil
}

// ResultOf returns the wire union holding j.
func ResultOf(j Job) Result {
	switch o := j.(type) {
	case *RewriteOutput:
		return Result{Rewrite: o}
	case *RepackOutput:
		return Result{Repack: o}
	case *RemapOutput:
		return Result{Remap: o}
	case *CatchUpOutput:
		return Result{CatchUp: o}
	case *SliceOutput:
		return Result{Slice: o}
	}
	return Result{}
}

// ClassifyAll judges j against every committed transaction after version
// checked. A version whose transaction could not be loaded is incompatible.
func ClassifyAll(j Job, checked uint64, committed []Committed) (Verdict, string) {
	for _, c := range committed {
		if c.Version <= checked {
			continue
		}
		if c.Txn == nil {
			return Incompatible, fmt.Sprintf("version %d has no readable transaction: %v", c.Version, c.Err)
		}
		if v, why := j.Classify(c.Txn); v != Compatible {
			return v, fmt.Sprintf("version %d: %s", c.Version, why)
		}
	}
	return Compatible, ""
}

// Committed is a version someone else committed, as the commit primitive
// reports it: Txn is nil (and Err says why) when it could not be loaded.
type Committed struct {
	Version uint64
	Txn     *tablepb.Transaction
	Err     error
}

// The rewrite kind.

// Task implements Job.
func (o *RewriteOutput) Task() Task {
	if o.Join != nil {
		return Task{Join: o.Join}
	}
	return Task{Rewrite: o.Rewrite}
}

// Written implements Job.
func (o *RewriteOutput) Written() []string { return o.Outputs }

// Classify implements Job with Lance's rules for a Rewrite.
func (o *RewriteOutput) Classify(theirs *tablepb.Transaction) (Verdict, string) {
	return ClassifyForRewrite(o.Group.OldIDs(), theirs)
}

// Op implements Job: rewrites commit as one Rewrite transaction.
func (o *RewriteOutput) Op() Op { return RewriteTxn }

// The repack kind.

// Task implements Job.
func (o *RepackOutput) Task() Task {
	if o.Join != nil {
		return Task{Join: o.Join}
	}
	return Task{Repack: o.Repack}
}

// Written implements Job.
func (o *RepackOutput) Written() []string { return o.Outputs }

// Classify implements Job; the fragment itself is judged at Build
// (RepackRebase).
func (o *RepackOutput) Classify(theirs *tablepb.Transaction) (Verdict, string) {
	return ClassifyForRepack(map[uint64]bool{o.Repack.Fragment: true}, theirs)
}

// Op implements Job: repacks commit as one Update REWRITE_COLUMNS.
func (o *RepackOutput) Op() Op { return RepackTxn }

// RewriteTxn commits rewrite jobs as one Rewrite transaction, one group per
// job, with fresh fragment ids on every attempt. A kind that joins the same
// transaction (an index remap) is applied in its Build.
var RewriteTxn Op = rewriteTxn{}

type rewriteTxn struct{}

func (rewriteTxn) Name() string { return "rewrite" }

// A Rewrite records the planning version, as Lance does.
func (rewriteTxn) TxnReadVersion(planned, _ uint64) uint64 { return planned }

func (rewriteTxn) Build(latest *format.Manifest, jobs []Job, txn *tablepb.Transaction) (*Built, error) {
	var rws []*RewriteOutput
	var rms []*RemapOutput
	for _, j := range jobs {
		switch o := j.(type) {
		case *RewriteOutput:
			rws = append(rws, o)
		case *RemapOutput:
			rms = append(rms, o)
		default:
			return nil, fmt.Errorf("%w: %T in a rewrite transaction", ErrInvalidTask, j)
		}
	}
	stable := latest.PB.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0
	rws, stale := staleRewrites(latest.PB, rws)
	rws, rms, refusals := joinRemaps(latest, rws, rms, stable)
	refusals = append(stale, refusals...)
	if len(rws) == 0 {
		return &Built{Refused: refusals}, nil
	}
	groups := make([]*RewriteGroup, 0, len(rws))
	for _, o := range rws {
		groups = append(groups, o.Group)
	}
	next, tg, err := ApplyRewrite(latest.PB, groups)
	if err != nil {
		return nil, err
	}
	rewrite := &tablepb.Transaction_Rewrite{Groups: tg}
	txn.Operation = &tablepb.Transaction_Rewrite_{Rewrite: rewrite}
	before, beforeIdx := latest.PB, latest.Indices.GetIndices()
	idx := beforeIdx
	remapped := len(rms) > 0
	if remapped {
		if idx, err = applyRemaps(beforeIdx, rms, tg, rewrite); err != nil {
			return nil, err
		}
	}
	var deferred []*RewriteOutput
	var dg []*tablepb.Transaction_Rewrite_RewriteGroup
	if !stable && hasRowIndex(idx) {
		for _, o := range rws {
			switch {
			case defersIndices(o):
				deferred = append(deferred, o)
				dg = append(dg, committedGroup(o.Group, tg))
			case o.Rewrite != nil && o.Rewrite.IndexCoverage == DeferIndexRemap:
				// A deferred rewrite that did not record the addresses it
				// kept would leave its indices pointing at removed rows.
				return nil, fmt.Errorf("%w: deferred rewrite of %v carries no kept row addresses", ErrInvalidTask, o.Rewrite.Fragments)
			}
		}
	}
	if len(deferred) > 0 {
		var derr error
		if idx, derr = deferIndices(idx, deferred, tg, rewrite.GetRewrittenIndices(), deferred[0].Rewrite.ReadVersion); derr != nil {
			// Nothing is committed: the rewrites would leave indices
			// that real Lance cannot read through the reuse index.
			refused := &Built{Refused: refusals}
			for _, j := range append(List(rws), List(rms)...) {
				refused.Refused = append(refused.Refused, Refusal{Job: j, Verdict: Incompatible, Reason: "deferred index remap refused: " + derr.Error()})
			}
			return refused, nil
		}
	}
	want := idx
	b := &Built{Manifest: next, Refused: refusals, Verify: func(after *format.Manifest) error {
		if err := VerifyRewrite(before, after.PB, tg); err != nil {
			return err
		}
		if err := CheckIndexCoverage(before, beforeIdx, after.PB, after.Indices.GetIndices()); err != nil {
			return fmt.Errorf("%w: %w", ErrInvariant, err)
		}
		if remapped {
			if err := verifyRemapped(want, after.Indices.GetIndices(), rewrite.GetRewrittenIndices()); err != nil {
				return fmt.Errorf("%w: %w", ErrInvariant, err)
			}
			if err := verifyRemapCoverage(beforeIdx, after, tg, rms); err != nil {
				return fmt.Errorf("%w: %w", ErrInvariant, err)
			}
		}
		if stable {
			if err := verifyStableCoverage(beforeIdx, after.Indices.GetIndices(), tg); err != nil {
				return fmt.Errorf("%w: %w", ErrInvariant, err)
			}
		}
		if len(dg) > 0 {
			if err := verifyDeferred(after.Indices.GetIndices(), dg); err != nil {
				return fmt.Errorf("%w: %w", ErrInvariant, err)
			}
		}
		return nil
	}}
	if latest.Indices == nil {
		return b, nil
	}
	if stable {
		if idx, err = ApplyRewriteIndices(beforeIdx, tg, true); err != nil {
			return nil, err
		}
	}
	// Never commit a version that makes real Lance lose an index (the plan
	// guards against it; concurrent commits may not): every job is
	// refused and nothing is committed.
	if err := CheckIndexCoverage(latest.PB, beforeIdx, next, idx); err != nil {
		refused := &Built{Refused: refusals}
		for _, j := range append(List(rws), List(rms)...) {
			refused.Refused = append(refused.Refused, Refusal{Job: j, Verdict: Incompatible, Reason: "refused: " + err.Error()})
		}
		return refused, nil
	}
	if stable || remapped || len(deferred) > 0 {
		b.Indices = &tablepb.IndexSection{Indices: idx}
	}
	return b, nil
}

// staleRewrites refuses the rewrite jobs whose old fragments are not in
// latest as the job read them (RewriteRebase); joinRemaps then refuses the
// remaps of their groups.
func staleRewrites(latest *tablepb.Manifest, rws []*RewriteOutput) ([]*RewriteOutput, []Refusal) {
	cur := format.FragmentsByID(latest)
	var keep []*RewriteOutput
	var refused []Refusal
	for _, o := range rws {
		why := ""
		for _, f := range o.Group.Old {
			if v, w := RewriteRebase(f, cur[f.GetId()]); v != Compatible {
				why = w
				break
			}
		}
		if why != "" {
			refused = append(refused, Refusal{Job: o, Verdict: Retryable, Reason: "rewrite refused: " + why})
			continue
		}
		keep = append(keep, o)
	}
	return keep, refused
}

// RepackTxn commits repack jobs as one Update with update_mode
// REWRITE_COLUMNS. A job whose fragment's files changed since it read them
// is refused (RepackRebase); the others still commit.
var RepackTxn Op = repackTxn{}

type repackTxn struct{}

func (repackTxn) Name() string { return "update" }

func (repackTxn) TxnReadVersion(_, latest uint64) uint64 { return latest }

func (repackTxn) Build(latest *format.Manifest, jobs []Job, txn *tablepb.Transaction) (*Built, error) {
	b := &Built{}
	cur := format.FragmentsByID(latest.PB)
	var results []*RepackResult
	for _, j := range jobs {
		o, ok := j.(*RepackOutput)
		if !ok {
			return nil, fmt.Errorf("%w: %T in a repack transaction", ErrInvalidTask, j)
		}
		if v, why := RepackRebase(o.Result.Base, cur[o.Result.Base.GetId()]); v != Compatible {
			b.Refused = append(b.Refused, Refusal{Job: j, Verdict: v, Reason: why})
			continue
		}
		results = append(results, o.Result)
	}
	if len(results) == 0 {
		return b, nil
	}
	next, up, err := ApplyRepacks(latest.PB, results)
	if err != nil {
		return nil, err
	}
	txn.Operation = &tablepb.Transaction_Update_{Update: up}
	before := latest.PB
	b.Manifest = next
	b.Verify = func(after *format.Manifest) error { return VerifyRepack(before, after.PB, up.GetUpdatedFragments()) }
	return b, nil
}

// Bytes implements Job.
func (o *RewriteOutput) Bytes() (read, written int64) { return o.BytesRead, o.BytesWritten }

// Bytes implements Job.
func (o *RepackOutput) Bytes() (read, written int64) { return o.BytesRead, o.BytesWritten }
