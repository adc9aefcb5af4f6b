package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func TestPolicyCheckAcceptsTheExamplePolicies(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runPolicy(context.Background(), []string{"check", "../../policies"}, &out, &errb); err != nil {
		t.Fatalf("policy check policies/: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("output %q", out.String())
	}
}

func TestPolicyCheckReportsEveryProblemWithFileLineColumn(t *testing.T) {
	dir := t.TempDir()
	src := "table \"s3://x/*\" {\n  compaction {\n    materialize_deletions_threshold = 2\n    bogus = 1\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err := runPolicy(context.Background(), []string{"check", dir}, &out, &errb)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("exit %v, want code 1", err)
	}
	for _, want := range []string{
		filepath.Join(dir, "bad.hcl") + ":3:39: error: Value out of range",
		filepath.Join(dir, "bad.hcl") + ":4:5: error: Unsupported argument",
		"2 error(s)",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

func TestPlanAndExplainOnARealTable(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the npm oracle")
	}
	uri := oracle.Build(t, "backfill", t.TempDir())
	pdir := t.TempDir()
	pol := "table \"**\" {\n  scope = \"repack\"\n  repack {\n    max_data_files_per_fragment = 1\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(pdir, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(filepath.Join(uri, "_versions"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := runPlan(context.Background(), []string{uri, "--policy", pdir, "--json"}, &out, &errb); err != nil {
		t.Fatalf("plan: %v\n%s", err, errb.String())
	}
	p, err := plan.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// Three fragments of three files each (two backfills): one repack each.
	if len(p.Repacks) != 3 || len(p.Rewrites) != 0 || len(p.Decisions) != 3 {
		t.Fatalf("plan %+v", p)
	}
	after, _ := os.ReadDir(filepath.Join(uri, "_versions"))
	if len(after) != len(before) {
		t.Fatal("plan changed the table")
	}
	out.Reset()
	if err := runPolicy(context.Background(), []string{"explain", uri, "--policy", pdir, "--json"}, &out, &errb); err != nil {
		t.Fatalf("explain: %v\n%s", err, errb.String())
	}
	var eff struct {
		Scope struct {
			Value  string `json:"value"`
			Source struct {
				Kind string `json:"kind"`
			} `json:"source"`
		} `json:"scope"`
	}
	if err := json.Unmarshal(out.Bytes(), &eff); err != nil || eff.Scope.Value != "repack" || eff.Scope.Source.Kind != "policy" {
		t.Fatalf("explain: %+v %v\n%s", eff, err, out.String())
	}
}

// TestExplainAndPlanNameTheBlockingIndex: on a table with a BTree and an
// IVF_PQ over fragments 0-1, plan and policy explain say per index what
// happens and which fragments it keeps out of rewrites; with unindex the
// plan says the indices' last covered fragments are kept.
func TestExplainAndPlanNameTheBlockingIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the npm oracle")
	}
	uri := oracle.Build(t, "indexed", t.TempDir())
	// The default (remap): both index types have a remapper.
	out := runCLI(t, "policy", "explain", uri)
	for _, want := range []string{"index id_idx (btree): remap", "index vec_idx (ivfPq): remap"} {
		if !strings.Contains(out, want) {
			t.Fatalf("explain lacks %q:\n%s", want, out)
		}
	}
	kdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(kdir, "p.hcl"), []byte("defaults {\n  compaction {\n    index_coverage = \"keep\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runCLI(t, "policy", "explain", uri, "--policy", kdir)
	for _, want := range []string{"index id_idx (btree): keep", "index vec_idx (ivfPq): keep", "blocks fragments [0 1]"} {
		if !strings.Contains(out, want) {
			t.Fatalf("explain lacks %q:\n%s", want, out)
		}
	}
	out = runCLI(t, "plan", uri, "--policy", kdir)
	if !strings.Contains(out, "vec_idx (ivfPq, 1 segment(s), covers 2 fragment(s)): keep") {
		t.Fatalf("plan:\n%s", out)
	}
	pdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pdir, "p.hcl"), []byte("defaults {\n  compaction {\n    index_coverage = \"unindex\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(runCLI(t, "plan", uri, "--policy", pdir, "--json")), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Decisions) != 4 || !strings.Contains(p.Decisions[0].Reason, "last fragments covered by index") {
		t.Fatalf("unindex plan: %+v", p.Decisions)
	}
	for _, ix := range p.Indices {
		if ix.Action != plan.IndexUntouched {
			t.Fatalf("index %+v", ix)
		}
	}
}

// TestExplainShowsValuesAsWrittenAndWhichScheduleApplies: explain prints
// sizes and durations as the policy writes them, labels lanced's own
// defaults as such, says which debounce the daemon applies, and shows the
// keep_versions the daemon's cleanup uses.
func TestExplainShowsValuesAsWrittenAndWhichScheduleApplies(t *testing.T) {
	pdir := t.TempDir()
	pol := "defaults {\n  compaction {\n    max_source_bytes = \"64GiB\"\n  }\n  cleanup {\n    older_than = \"14d\"\n  }\n  schedule {\n    debounce = \"45s\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(pdir, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runCLI(t, "policy", "explain", "x.lance", "--no-table", "--policy", pdir)
	line := func(setting string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == setting {
				return l
			}
		}
		t.Fatalf("no %s line in:\n%s", setting, out)
		return ""
	}
	for setting, want := range map[string][]string{
		"compaction.max_source_bytes": {" 64GiB ", "defaults ("},
		"cleanup.older_than":          {" 14d "},
		"cleanup.unverified_after":    {" 7d ", "lance default"},
		"schedule.debounce":           {" 45s ", "defaults (", "once no change came"},
		"schedule.max_delay":          {" 1m ", "lanced default", "events block"},
		"schedule.windows":            {"lanced default", "only inside a window"},
		"schedule.min_interval":       {"lanced default", "cleanup runs"},
		"enabled":                     {"lanced default"},
		"cleanup.keep_versions":       {" 1 ", "lance default"},
	} {
		l := line(setting)
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q missing from %q", setting, w, l)
			}
		}
	}
	if strings.Contains(out, "68719476736") || strings.Contains(out, "h0m0s") {
		t.Errorf("raw size or duration in:\n%s", out)
	}
	// With the daemon's config, its events block is the default a policy
	// does not override: max_delay comes from it, debounce still from the
	// policy.
	cfgPath := filepath.Join(t.TempDir(), "lanced.hcl")
	if err := os.WriteFile(cfgPath, []byte("tables = [\"t\"]\nevents {\n  debounce = \"2s\"\n  max_delay = \"3m\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runCLI(t, "policy", "explain", "x.lance", "--no-table", "--policy", pdir, "--config", cfgPath)
	for setting, want := range map[string][]string{
		"schedule.debounce":  {" 45s ", "defaults ("},
		"schedule.max_delay": {" 3m ", "daemon config (events block of " + cfgPath + ")"},
	} {
		l := line(setting)
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("with --config: %s: %q missing from %q", setting, w, l)
			}
		}
	}
	// The daemon's cleanup uses the keep_versions explain shows.
	set, diags := policy.NewSet(nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	eff := set.Resolve("file:///x.lance", nil)
	o, err := cleanupOptionsFor(&format.Manifest{PB: &tablepb.Manifest{}}, eff.Cleanup)
	if err != nil || uint64(o.KeepVersions) != eff.Cleanup.KeepVersions.Value {
		t.Errorf("daemon keep_versions %d (%v), explain %d", o.KeepVersions, err, eff.Cleanup.KeepVersions.Value)
	}
}

// TestPlanAndExplainShowCostSkips: on a real-Lance table whose fragment 0
// holds 12,000 rows with half deleted (reclaimed/written 1.0), a policy with
// min_reclaim_ratio = 2 and target 5,000 rows keeps it out of rewrites:
// plan and policy explain both print its numbers; without the ratio the plan
// rewrites it and prints the task's estimated bytes.
func TestPlanAndExplainShowCostSkips(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the npm oracle")
	}
	uri := oracle.Build(t, "deletes_bitmap", t.TempDir())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte("defaults {\n  compaction {\n    target_rows_per_fragment = 5000\n    min_reclaim_ratio = 2\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"skipped by cost: deletions 50.0% over materialize_deletions_threshold 10%", "ratio 1.000 under min_reclaim_ratio 2"}
	for _, args := range [][]string{{"plan", uri, "--policy", dir}, {"policy", "explain", uri, "--policy", dir}} {
		out := runCLI(t, args...)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s lacks %q:\n%s", args[0], w, out)
			}
		}
	}
	out := runCLI(t, "plan", uri)
	if !strings.Contains(out, "estimated read ") || strings.Contains(out, "skipped by cost") {
		t.Fatalf("plan without a ratio:\n%s", out)
	}
}
