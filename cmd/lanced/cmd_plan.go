package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/store"
)

func init() {
	register(&command{
		name:    "plan",
		usage:   "lanced plan URI [--policy DIR] [--json]",
		summary: "print the maintenance plan of a table and why (dry run)",
		run:     runPlan,
	})
}

// loadPolicyDir loads a policy directory for a one-shot command. An empty
// dir means no policy files: Lance's defaults and the table's config. Errors
// are rendered with file:line:col snippets to stderr.
func loadPolicyDir(dir string, stderr io.Writer) (*policy.Set, error) {
	if dir == "" {
		return nil, nil
	}
	set, diags := policy.LoadDirNamed(os.DirFS(dir), dir)
	if diags.HasErrors() {
		writePolicyDiags(stderr, set, diags)
		return nil, fmt.Errorf("policy directory %s has errors", dir)
	}
	return set, nil
}

// planTable opens uri, reads its latest manifest and computes the plan
// (the policy's scope, unless scope is not empty).
func planTable(ctx context.Context, uri string, set *policy.Set, scope string) (*plan.Plan, policy.Effective, error) {
	b, err := store.Open(ctx, uri)
	if err != nil {
		return nil, policy.Effective{}, err
	}
	defer b.Close()
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		return nil, policy.Effective{}, err
	}
	m, err := tbl.Latest(ctx)
	if err != nil {
		return nil, policy.Effective{}, err
	}
	marks, err := loadMarks(ctx, b, m)
	if err != nil {
		return nil, policy.Effective{}, err
	}
	p, eff := computePlan(uri, m, set, scope, marks)
	return p, eff, nil
}

// marks are a table's quarantine and drift records that apply to one
// version.
type marks struct {
	fragments map[uint64]quarantine.Mark
	indices   map[string]quarantine.IndexMark
	drift     map[string]drift.Record
}

// loadMarks reads the quarantine records (fragments and index segments)
// and the index drift record that apply to m.
func loadMarks(ctx context.Context, b *store.Bucket, m *format.Manifest) (marks, error) {
	var out marks
	var err error
	if out.fragments, err = quarantine.Load(ctx, b, m.PB); err != nil {
		return out, err
	}
	if out.indices, err = quarantine.LoadIndices(ctx, b, m.Indices.GetIndices()); err != nil {
		return out, err
	}
	f, err := drift.Load(ctx, b)
	out.drift = drift.Current(f, m.Indices.GetIndices())
	return out, err
}

// computePlan resolves the table's effective policy (scope overridden when
// not empty) and plans its manifest m.
// Quarantined fragments are skipped with their reason, and the fragments
// quarantined index segments cover are kept with theirs.
func computePlan(uri string, m *format.Manifest, set *policy.Set, scope string, mk marks) (*plan.Plan, policy.Effective) {
	// The table's identity (no query string) in policy matching, task ids
	// and journal keys, as in the daemon.
	uri = store.CanonicalURI(uri)
	eff := set.Resolve(uri, m.PB.GetConfig())
	if scope != "" {
		eff.Scope.Value = scope
	}
	in := plan.Input{Table: uri, Manifest: m.PB, Policy: eff, Quarantined: quarantine.Reasons(mk.fragments), Unremappable: quarantine.IndexReasons(mk.indices), Drift: mk.drift}
	if m.Indices != nil {
		in.Indices = m.Indices.GetIndices()
	}
	return plan.Compute(in), eff
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyDir := fs.String("policy", "", "policy directory (default: Lance's defaults and the table's config)")
	asJSON := fs.Bool("json", false, "print the plan as JSON (plan_version 1)")
	fs.Usage = func() { printUsage(stderr, commands["plan"], fs) }
	arg, err := oneArg(fs, args)
	if err != nil {
		return err
	}
	return showPlan(ctx, arg, *policyDir, "", *asJSON, stdout, stderr)
}

// showPlan prints the plan of the table at arg (lanced plan, and lanced
// compact --dry-run with its --scope).
func showPlan(ctx context.Context, arg, policyDir, scope string, asJSON bool, stdout, stderr io.Writer) error {
	set, err := loadPolicyDir(policyDir, stderr)
	if err != nil {
		return err
	}
	p, eff, err := planTable(ctx, arg, set, scope)
	if err != nil {
		return err
	}
	if h, err := (hold.Tables{}).Get(ctx, arg); err == nil && h != nil {
		fmt.Fprintf(stderr, "warning: %v\n", &hold.HeldError{Table: store.CanonicalURI(arg), Hold: *h})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	return printPlan(stdout, p, eff)
}

func printPlan(w io.Writer, p *plan.Plan, eff policy.Effective) error {
	c := eff.Compaction
	fmt.Fprintf(w, "table %s, read version %d: %d rewrite task(s), %d repack task(s), %d index catch-up task(s)\n", p.Table, p.ReadVersion, len(p.Rewrites), len(p.Repacks), len(p.CatchUps))
	fmt.Fprintf(w, "policy: scope=%s target_rows_per_fragment=%d materialize_deletions_threshold=%g min_reclaim_ratio=%g index_coverage=%s max_data_files_per_fragment=%d\n",
		eff.Scope.Value, c.TargetRowsPerFragment.Value, c.MaterializeDeletionsThreshold.Value, c.MinReclaimRatio.Value, c.IndexCoverage.Value, eff.Repack.MaxDataFilesPerFragment.Value)
	for i, t := range p.Rewrites {
		fmt.Fprintf(w, "rewrite %d: fragments %v (%d live rows, %d bytes; estimated read %d, write %d bytes)\n", i, t.Fragments, t.Rows, t.Bytes, t.EstBytesRead, t.EstBytesWritten)
		printSlices(w, t.Slices)
	}
	for i, t := range p.Repacks {
		fmt.Fprintf(w, "repack %d: fragment %d, %d new file(s), drops %v, reads %d bytes\n", i, t.Fragment, len(t.Files), t.Removes, t.Bytes)
		printSlices(w, t.Slices)
		for _, f := range t.Files {
			fmt.Fprintf(w, "  new file: columns %v from %v\n", f.Columns, f.Sources)
		}
	}
	for i, t := range p.CatchUps {
		fmt.Fprintf(w, "catch-up %d: index %s, fragments %v (%d live rows)\n", i, t.Index, t.Fragments, t.Rows)
		for j, r := range t.Slices {
			fmt.Fprintf(w, "  delta %d/%d: fragments %v, then merged\n", j+1, len(t.Slices), t.Fragments[r.Lo:r.Hi])
		}
	}
	for _, warning := range append(append([]string(nil), eff.Warnings...), p.Warnings...) {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	if len(p.Indices) > 0 {
		fmt.Fprintln(w, "indices:")
		for _, ix := range p.Indices {
			fmt.Fprintf(w, "  %s (%s, %d segment(s), covers %d fragment(s)): %s", ix.Name, ix.Kind, ix.Segments, len(ix.Covered), ix.Action)
			if len(ix.Rewritten) > 0 {
				fmt.Fprintf(w, " fragments %v", ix.Rewritten)
			}
			fmt.Fprintf(w, ": %s\n", ix.Reason)
			if cu := ix.CatchUp; cu != nil {
				fmt.Fprintf(w, "    unindexed: %d of %d live row(s) in %d fragment(s); catch-up %s: %s\n",
					cu.Rows, cu.LiveRows, len(cu.Fragments), cu.Action, cu.Reason)
				if d := cu.Drift; d != nil {
					fmt.Fprintf(w, "    drift: %.1f%% (%d of %d caught-up row(s) far from every centroid; threshold %g%%)\n", 100*d.Ratio, d.Far, d.Rows, 100*d.Threshold)
				}
			}
		}
	}
	fmt.Fprintln(w, "fragments:")
	for _, d := range p.Decisions {
		task := ""
		if d.Task >= 0 {
			task = fmt.Sprintf(" %d", d.Task)
		}
		if _, err := fmt.Fprintf(w, "  %6d  %s%s: %s\n", d.Fragment, d.Action, task, d.Reason); err != nil {
			return err
		}
	}
	return nil
}

// printSlices lists the row slices of a task planned in slices.
func printSlices(w io.Writer, rs []job.RowRange) {
	for i, r := range rs {
		fmt.Fprintf(w, "  slice %d/%d: rows [%d, %d)\n", i+1, len(rs), r.Lo, r.Hi)
	}
}
