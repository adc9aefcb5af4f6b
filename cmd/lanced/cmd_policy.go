package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

func init() {
	register(&command{
		name:    "policy",
		summary: "check policy files, or explain a table's effective policy",
		run:     runPolicy,
	})
}

func policyUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: lanced policy check DIR")
	fmt.Fprintln(w, "       lanced policy explain URI [--policy DIR] [--config FILE] [--json] [--no-table]")
	fmt.Fprintf(w, "\n%s\n", commands["policy"].summary)
}

func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		policyUsage(stderr)
		return exitError{2}
	}
	switch args[0] {
	case "check", "validate":
		return runPolicyCheck(args[1:], stdout, stderr)
	case "explain":
		return runPolicyExplain(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		policyUsage(stderr)
		return nil
	}
	fmt.Fprintf(stderr, "lanced policy: unknown subcommand %q\n", args[0])
	policyUsage(stderr)
	return exitError{2}
}

// writePolicyDiags renders diagnostics with source snippets.
func writePolicyDiags(w io.Writer, set *policy.Set, diags hcl.Diagnostics) {
	var files map[string]*hcl.File
	if set != nil {
		files = set.HCLFiles()
	}
	dw := hcl.NewDiagnosticTextWriter(w, files, 100, false)
	_ = dw.WriteDiagnostics(diags)
}

func runPolicyCheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: lanced policy check DIR") }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError{2}
	}
	dir := fs.Arg(0)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		fmt.Fprintf(stderr, "lanced policy check: %s is not a directory\n", dir)
		return exitError{2}
	}
	set, diags := policy.LoadDirNamed(os.DirFS(dir), dir)
	// One grep-able line per problem (file:line:col), then what to do.
	errs, warns := writeDiags(stderr, dir, diags)
	if errs > 0 {
		fmt.Fprintf(stderr, "%s: %d error(s), %d warning(s)\n", dir, errs, warns)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: %d file(s), %d table block(s), defaults: %v; ok\n", dir, len(set.Files), len(set.Tables), set.Defaults != nil)
	return nil
}

func runPolicyExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyDir := fs.String("policy", "", "policy directory (default: none, so Lance's defaults and the table's config)")
	asJSON := fs.Bool("json", false, "print the effective policy as JSON")
	noTable := fs.Bool("no-table", false, "do not open the table (ignore its config keys)")
	configPath := fs.String("config", "", "the daemon's config file: its policies (unless --policy) and its events block, the default debounce and max_delay")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lanced policy explain URI [--policy DIR] [--config FILE] [--json] [--no-table]")
		fmt.Fprintln(stderr, "\nflags:")
		printFlags(stderr, fs)
	}
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	uri := arg
	var daemonCfg runConfig
	if *configPath != "" {
		c, _, diags := loadConfigFile(*configPath)
		if diags.HasErrors() {
			writeDiags(stderr, *configPath, diags)
			return exitError{1}
		}
		daemonCfg = c
		if *policyDir == "" {
			*policyDir = c.Policies
		}
	}
	set, err := loadPolicyDir(*policyDir, stderr)
	if err != nil {
		return err
	}
	if daemonCfg.EventsSet {
		set = set.WithEvents(policy.EventDefaults{Debounce: daemonCfg.Debounce, MaxDelay: daemonCfg.MaxDelay, Where: "events block of " + *configPath})
	}
	var cfg map[string]string
	var latest *format.Manifest
	if !*noTable {
		b, tbl, err := openTable(ctx, uri)
		if err != nil {
			return err
		}
		defer b.Close()
		m, err := tbl.Latest(ctx)
		if err != nil {
			return err
		}
		cfg, latest = m.PB.GetConfig(), m
	}
	uri = store.CanonicalURI(uri)
	eff := set.Resolve(uri, cfg)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(eff)
	}
	fmt.Fprintf(stdout, "table %s\n", uri)
	if len(eff.Matched) > 0 {
		fmt.Fprintf(stdout, "matching table blocks (most specific first): %s\n", strings.Join(eff.Matched, ", "))
	} else {
		fmt.Fprintln(stdout, "matching table blocks: none")
	}
	for _, r := range eff.Explain() {
		fmt.Fprintf(stdout, "  %-44s %-24s %s", r.Setting, r.Display, r.Source)
		if r.Note != "" {
			fmt.Fprintf(stdout, "; %s", r.Note)
		}
		fmt.Fprintln(stdout)
	}
	if latest != nil {
		// What index_coverage does to each index of the latest version,
		// and which fragments an index keeps out of rewrites.
		p, _ := computePlan(uri, latest, set, "", marks{})
		for _, ix := range p.Indices {
			fmt.Fprintf(stdout, "index %s (%s): %s: %s", ix.Name, ix.Kind, ix.Action, ix.Reason)
			if ix.Action == plan.IndexKeep && len(ix.Covered) > 0 {
				fmt.Fprintf(stdout, " (blocks fragments %v)", ix.Covered)
			}
			fmt.Fprintln(stdout)
		}
		// Fragments min_reclaim_ratio keeps out of rewrites, with the numbers.
		for _, d := range p.Decisions {
			if d.Action == plan.ActionSkip && d.Cost != nil {
				fmt.Fprintf(stdout, "fragment %d: %s\n", d.Fragment, d.Reason)
			}
		}
	}
	for _, w := range eff.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return nil
}
