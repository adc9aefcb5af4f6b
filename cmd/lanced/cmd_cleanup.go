package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/store"
)

func init() {
	register(&command{
		name:    "cleanup",
		usage:   "lanced cleanup URI [--dry-run] [--json] [--older-than D] [--keep-versions N] [--unverified-after D] [--delete-rate N] [--progress-every D]",
		summary: "remove old versions and unreferenced files (Lance's cleanup_old_versions)",
		run:     runCleanup,
	})
}

func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "list what would be deleted, delete nothing")
	asJSON := fs.Bool("json", false, "print the plan and result as JSON")
	var olderThan, unverified time.Duration
	fs.Var(durationFlag{&olderThan}, "older-than", "remove versions committed longer ago than this (default: table's lance.auto_cleanup.older_than, else 7d)")
	keep := fs.Int("keep-versions", 0, "always keep the newest N versions (default: table's lance.auto_cleanup.retain_versions, else no count rule)")
	fs.Var(durationFlag{&unverified}, "unverified-after", "delete never-referenced files only once they are this old; 0 = at once, only safe with no other writer (default 7d)")
	rateFlag := fs.Float64("delete-rate", 0, "maximum deletes per second (0: unlimited)")
	errTagged := fs.Bool("error-if-tagged", false, "fail instead of silently keeping tagged versions that are old enough to clean")
	progressEvery := defaultProgressEvery
	fs.Var(durationFlag{&progressEvery}, "progress-every", "without a terminal (or with --json), log a progress line this often; 0: no progress")
	fs.Usage = func() { printUsage(stderr, commands["cleanup"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	uri := arg
	b, err := store.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer b.Close()

	// Outputs of a killed lanced process on this host go at once.
	if !*dryRun {
		if err := hold.Check(ctx, b, store.CanonicalURI(uri)); err != nil {
			return err
		}
		if _, err := journal.AbandonDeadLocalOwners(ctx, b); err != nil {
			return err
		}
	}
	opts, err := cleanup.TableCleanupOptions(ctx, b)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "older-than":
			opts.OlderThan = olderThan
		case "keep-versions":
			opts.KeepVersions = *keep
		case "unverified-after":
			opts.UnverifiedAfter = unverified
		case "delete-rate":
			opts.DeleteRate = *rateFlag
		case "error-if-tagged":
			opts.KeepTagged = !*errTagged
		}
	})
	log := jsonLogger(stderr, slog.LevelWarn)
	c, err := cleanup.NewCleaner(nil, log)
	if err != nil {
		return err
	}
	// Progress counts the deletes (files and bytes), known once planned.
	prog := progress.NewCounter()
	stop := func() {}
	if !*dryRun {
		stop = showProgress(stderr, prog, "cleanup", "files", *asJSON, progressEvery)
	}
	plan, res, err := c.Run(progress.With(ctx, prog), b, opts, *dryRun)
	stop()
	if plan == nil {
		return err
	}
	if *asJSON {
		out := struct {
			URI     string                `json:"uri"`
			DryRun  bool                  `json:"dry_run"`
			Options cleanupOptionsJSON    `json:"options"`
			Plan    *cleanup.CleanupPlan  `json:"plan"`
			Result  cleanup.CleanupResult `json:"result"`
			Error   string                `json:"error,omitempty"`
		}{URI: b.URI(), DryRun: *dryRun, Options: cleanupOptsJSON(opts), Plan: plan, Result: res}
		if err != nil {
			out.Error = err.Error()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if e := enc.Encode(out); e != nil {
			return e
		}
	} else {
		printCleanup(stdout, b.URI(), opts, plan, res, *dryRun)
	}
	return err
}

type cleanupOptionsJSON struct {
	OlderThan       string  `json:"older_than"`
	KeepVersions    int     `json:"keep_versions"`
	KeepTagged      bool    `json:"keep_tagged"`
	UnverifiedAfter string  `json:"unverified_after"`
	DeleteRate      float64 `json:"delete_rate"`
}

func cleanupOptsJSON(o cleanup.CleanupOptions) cleanupOptionsJSON {
	return cleanupOptionsJSON{
		OlderThan: o.OlderThan.String(), KeepVersions: o.KeepVersions, KeepTagged: o.KeepTagged,
		UnverifiedAfter: o.UnverifiedAfter.String(), DeleteRate: o.DeleteRate,
	}
}

func printCleanup(w io.Writer, uri string, o cleanup.CleanupOptions, p *cleanup.CleanupPlan, r cleanup.CleanupResult, dry bool) {
	removed := 0
	for _, v := range p.Versions {
		if !v.Keep {
			removed++
		}
	}
	fmt.Fprintf(w, "table %s, latest version %d\n", uri, p.Latest)
	fmt.Fprintf(w, "settings: older than %s, keep %d newest, in-flight window %s\n", o.OlderThan, o.KeepVersions, o.UnverifiedAfter)
	fmt.Fprintf(w, "\nversions: %d kept, %d removed\n", len(p.Versions)-removed, removed)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, v := range p.Versions {
		action := "keep"
		if !v.Keep {
			action = "remove"
		}
		tags := ""
		if len(v.Tags) > 0 {
			tags = fmt.Sprintf("tags %v", v.Tags)
		}
		fmt.Fprintf(tw, "  v%d\t%s\t%s\t%s\t%s\n", v.Version, action, v.Reason, v.Timestamp.UTC().Format(time.RFC3339), tags)
	}
	tw.Flush()
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	fmt.Fprintf(w, "\nfiles (%s, then %d manifests): %d, %s\n", verb, len(p.Manifests), len(p.Files), cleanupBytes(p.BytesRemoved))
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, f := range p.Files {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Key, f.Kind, f.Reason, cleanupBytes(f.Size))
	}
	tw.Flush()
	if !dry {
		fmt.Fprintf(w, "\ndeleted %d files and %d manifests (%s)\n", r.FilesDeleted, r.ManifestsDeleted, cleanupBytes(r.BytesRemoved))
	}
}

func cleanupBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
