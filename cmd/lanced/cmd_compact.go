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
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

func init() {
	register(&command{
		name:    "compact",
		summary: "plan, execute and commit rewrites and repacks on one table, once",
		run:     runCompact,
	})
}

func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyDir := fs.String("policy", "", "policy directory (default: Lance's defaults and the table's config)")
	scope := fs.String("scope", "", "all|rewrite|repack (default: the policy's scope)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	batch := fs.Int("commit-batch", 0, "commit every N tasks of a kind (default: the policy's commit_batch_tasks, else all at once)")
	verbose := fs.Bool("v", false, "log progress to stderr")
	dryRun := fs.Bool("dry-run", false, "plan only and change nothing (the same as lanced plan)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lanced compact URI [--policy DIR] [--scope all|rewrite|repack] [--json] [--commit-batch N] [-v] [--dry-run]")
		fs.PrintDefaults()
	}
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitError{2}
	}
	uri := pos[0]
	if *dryRun {
		planArgs := []string{uri}
		if *policyDir != "" {
			planArgs = append(planArgs, "--policy", *policyDir)
		}
		if *asJSON {
			planArgs = append(planArgs, "--json")
		}
		return runPlan(ctx, planArgs, stdout, stderr)
	}
	switch *scope {
	case "", policy.ScopeAll, policy.ScopeRewrite, policy.ScopeRepack:
	default:
		return fmt.Errorf("--scope %q: want all, rewrite or repack", *scope)
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
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		return err
	}
	m, err := tbl.Latest(ctx)
	if err != nil {
		return err
	}
	marks, err := quarantine.Load(ctx, b, m.PB)
	if err != nil {
		return err
	}
	p, eff := computePlan(uri, m, set, *scope, marks)
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
	sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{CommitBatchTasks: n, Logger: log, Journal: keeper})
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
	return nil
}

func printSummary(w io.Writer, s *engine.Summary, p *plan.Plan) {
	fmt.Fprintf(w, "table %s (read version %d): %d rewrite and %d repack task(s) planned\n", s.Table, s.ReadVersion, len(p.Rewrites), len(p.Repacks))
	if len(s.VersionsCommitted) == 0 {
		fmt.Fprintln(w, "nothing committed")
	} else {
		fmt.Fprintf(w, "committed versions %v\n", s.VersionsCommitted)
	}
	fmt.Fprintf(w, "fragments: %d removed, %d added, %d repacked; files: %d removed, %d added (%d page-copied, %d re-encoded)\n",
		s.FragmentsRemoved, s.FragmentsAdded, s.FragmentsRepacked, s.FilesRemoved, s.FilesAdded, s.FilesCopied, s.FilesReencoded)
	fmt.Fprintf(w, "bytes: %d read, %d written; tasks: %d committed, %d stale, %d failed; conflicts: %d rebased, %d retryable, %d incompatible\n",
		s.BytesRead, s.BytesWritten, s.TasksCommitted, s.TasksStale, s.TasksFailed, s.Conflicts.Rebased, s.Conflicts.Retryable, s.Conflicts.Incompatible)
	for _, mk := range s.Quarantined {
		fmt.Fprintf(w, "quarantined: fragment %d: %s\n", mk.Fragment, mk)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}
