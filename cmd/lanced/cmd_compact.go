package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

func init() {
	register(&command{
		name:    "compact",
		usage:   "lanced compact URI [--policy DIR] [--scope all|rewrite|repack|index] [--json] [--commit-batch N] [--workers N] [-v] [--dry-run] [--progress-every D]",
		summary: "plan, execute and commit rewrites and repacks on one table, once",
		run:     runCompact,
	})
}

func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyDir := fs.String("policy", "", "policy directory (default: Lance's defaults and the table's config)")
	scope := fs.String("scope", "", "all|rewrite|repack|index (default: the policy's scope)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	batch := fs.Int("commit-batch", 0, "commit every N tasks of a kind (default: the policy's commit_batch_tasks, else all at once)")
	workers := fs.Int("workers", 2, "tasks executed at once (their fragments are disjoint; each also encodes its columns in parallel)")
	verbose := fs.Bool("v", false, "log progress to stderr")
	dryRun := fs.Bool("dry-run", false, "plan only and change nothing (the same as lanced plan)")
	progressEvery := defaultProgressEvery
	fs.Var(durationFlag{&progressEvery}, "progress-every", "without a terminal (or with --json), log a progress line this often; 0: no progress")
	fs.Usage = func() { printUsage(stderr, commands["compact"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	uri := arg
	if *workers < 1 {
		return fmt.Errorf("--workers %d: want 1 or more tasks at once", *workers)
	}
	switch *scope {
	case "", policy.ScopeAll, policy.ScopeRewrite, policy.ScopeRepack, policy.ScopeIndex:
	default:
		return fmt.Errorf("--scope %q: want all, rewrite, repack or index", *scope)
	}
	if *dryRun {
		return showPlan(ctx, uri, *policyDir, *scope, *asJSON, stdout, stderr)
	}
	set, err := loadPolicyDir(*policyDir, stderr)
	if err != nil {
		return err
	}
	b, err := store.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := hold.Check(ctx, b, store.CanonicalURI(uri)); err != nil {
		return err
	}
	// The run's lookups share a listing of _versions/ while it is a few
	// seconds old (the plan's, a commit's check, the replan after it).
	tbl, err := table.OpenShared(ctx, b)
	if err != nil {
		return err
	}
	m, err := tbl.Latest(ctx)
	if err != nil {
		return err
	}
	mk, err := loadMarks(ctx, b, m)
	if err != nil {
		return err
	}
	p, eff := computePlan(uri, m, set, *scope, mk)
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := jsonLogger(stderr, level)
	n := *batch
	if n == 0 {
		n = int(eff.Compaction.CommitBatchTasks.Value)
	}
	keeper := journal.NewKeeper("lanced-compact", "", log)
	opts := engine.CompactOptions{CommitBatchTasks: n, Logger: log, Journal: keeper, Workers: *workers}
	// Progress counts the rows and bytes the tasks read (see
	// engine.TaskSize); a run after the first adds its own.
	prog := progress.NewCounter()
	stop := func() {}
	if len(p.Tasks()) > 0 {
		stop = showProgress(stderr, prog, "compact", "rows", *asJSON, progressEvery)
	}
	ctx = progress.With(ctx, prog)
	sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), opts)
	if err == nil && len(sum.QuarantinedIndices) > 0 {
		// The rewrites an unremappable index segment covered were
		// dropped; planned again, its fragments are kept and the rest of
		// the table is compacted in this run.
		err = compactAgain(ctx, tbl, uri, set, *scope, sum, p, opts, false)
	}
	if err == nil && sum.TasksFailed == 0 && len(p.Rewrites) > 0 {
		// Unindexed fragments the rewrites just replaced are caught up
		// now, from the version they committed, as Lance's optimize()
		// indexes after it compacts.
		err = compactAgain(ctx, tbl, uri, set, *scope, sum, p, opts, true)
	}
	stop()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(sum); jerr != nil {
			return jerr
		}
	} else if sum != nil {
		printSummary(stdout, sum, p)
	}
	if err != nil {
		if errors.Is(err, job.ErrInvariant) {
			return fmt.Errorf("table held: %w", err)
		}
		return err
	}
	if sum.TasksFailed > 0 {
		return fmt.Errorf("%d task(s) failed; first: %s", sum.TasksFailed, sum.Errors[0])
	}
	if len(sum.QuarantinedIndices) > 0 {
		return errors.New(sum.QuarantinedIndices[0].String())
	}
	return nil
}

// compactAgain plans the latest version again and runs part of it (the
// plan's rewrites and repacks when catchUps is false, else only its index
// catch-ups), adding the work to sum and the tasks to p.
func compactAgain(ctx context.Context, tbl *table.Table, uri string, set *policy.Set, scope string, sum *engine.Summary, p *plan.Plan, opts engine.CompactOptions, catchUps bool) error {
	m, err := tbl.Latest(ctx)
	if err != nil {
		return err
	}
	mk, err := loadMarks(ctx, tbl.Bucket(), m)
	if err != nil {
		return err
	}
	p2, _ := computePlan(uri, m, set, scope, mk)
	if catchUps {
		p2.Rewrites, p2.Repacks = nil, nil
	} else {
		p2.CatchUps = nil
	}
	if p2.Empty() {
		return nil
	}
	s2, err := engine.Compact(ctx, tbl, m, p2.Tasks(), opts)
	if s2 != nil {
		sum.Add(s2)
	}
	p.Rewrites = append(p.Rewrites, p2.Rewrites...)
	p.Repacks = append(p.Repacks, p2.Repacks...)
	p.CatchUps = append(p.CatchUps, p2.CatchUps...)
	return err
}

func printSummary(w io.Writer, s *engine.Summary, p *plan.Plan) {
	fmt.Fprintf(w, "table %s (read version %d): %d rewrite, %d repack and %d index catch-up task(s) planned\n", s.Table, s.ReadVersion, len(p.Rewrites), len(p.Repacks), len(p.CatchUps))
	if len(s.VersionsCommitted) == 0 {
		fmt.Fprintln(w, "nothing committed")
	} else {
		fmt.Fprintf(w, "committed versions %v\n", s.VersionsCommitted)
	}
	fmt.Fprintf(w, "fragments: %d removed, %d added, %d repacked; files: %d removed, %d added (%d page-copied, %d re-encoded)\n",
		s.FragmentsRemoved, s.FragmentsAdded, s.FragmentsRepacked, s.FilesRemoved, s.FilesAdded, s.FilesCopied, s.FilesReencoded)
	if s.IndexSegments > 0 {
		fmt.Fprintf(w, "indices: %d row(s) added in %d new segment(s)\n", s.RowsIndexed, s.IndexSegments)
	}
	fmt.Fprintf(w, "bytes: %d read, %d written; tasks: %d committed, %d stale, %d failed; conflicts: %d rebased, %d retryable, %d incompatible\n",
		s.BytesRead, s.BytesWritten, s.TasksCommitted, s.TasksStale, s.TasksFailed, s.Conflicts.Rebased, s.Conflicts.Retryable, s.Conflicts.Incompatible)
	for _, mk := range s.Quarantined {
		fmt.Fprintf(w, "quarantined: fragment %d: %s\n", mk.Fragment, mk)
	}
	for _, mk := range s.QuarantinedIndices {
		fmt.Fprintf(w, "quarantined: %s\n", mk)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}
