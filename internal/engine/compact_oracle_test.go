package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// rowSetDigest: see oracle.RowSetDigest.
var rowSetDigest = oracle.RowSetDigest

type compactCase struct {
	scenario string
	tune     func(e *policy.Effective)
	// wantRewrite/wantRepack: the plan must have such tasks.
	wantRewrite, wantRepack bool
}

func planFor(t *testing.T, uri string, m *format.Manifest, tune func(*policy.Effective)) *plan.Plan {
	t.Helper()
	eff := policy.LanceDefaults(uri)
	if tune != nil {
		tune(&eff)
	}
	in := plan.Input{Table: uri, Manifest: m.PB, Policy: eff}
	if m.Indices != nil {
		in.Indices = m.Indices.GetIndices()
	}
	return plan.Compute(in)
}

func repackOnly(n uint64) func(*policy.Effective) {
	return func(e *policy.Effective) {
		e.Repack.MaxDataFilesPerFragment.Value = n
		e.Scope.Value = policy.ScopeRepack
	}
}

// TestCompactOracleScenarios runs lanced compact on tables real Lance made,
// in every shape the oracle builds, and has real Lance judge the result:
// same rows, fewer fragments/files as planned, then real Lance appends,
// deletes, indexes and runs its own optimize() on top, and every older
// version still opens.
func TestCompactOracleScenarios(t *testing.T) {
	oracle.Require(t)
	cases := []compactCase{
		{scenario: "appends", wantRewrite: true},
		{scenario: "deletes_arrow", tune: func(e *policy.Effective) { e.Compaction.MaterializeDeletionsThreshold.Value = 0.001 }, wantRewrite: true},
		{scenario: "deletes_bitmap", wantRewrite: true},
		{scenario: "backfill", tune: repackOnly(1), wantRepack: true},
		{scenario: "dropped_column", tune: repackOnly(1), wantRepack: true},
		{scenario: "stable_row_ids", wantRewrite: true},
		{scenario: "v2_0", tune: func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 100000 }, wantRewrite: true},
		{scenario: "v1_paths", wantRewrite: true},
		{scenario: "indexed", tune: func(e *policy.Effective) { e.Compaction.IndexCoverage.Value = policy.CoverageUnindex }, wantRewrite: true},
		{scenario: "types", wantRewrite: true},
		{scenario: "text", wantRewrite: true},
		{scenario: "wide", wantRewrite: true},
		{scenario: "tags", wantRewrite: true},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, c.scenario, t.TempDir())
			before := oracle.Inspect(t, path, 0)
			wantDigest, wantRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
			if int64(wantRows) != before.Rows {
				t.Fatalf("scan has %d rows, countRows %d", wantRows, before.Rows)
			}
			tbl, m := tabletest.Open(t, "file://"+path)
			p := planFor(t, path, m, c.tune)
			if c.wantRewrite && len(p.Rewrites) == 0 {
				t.Fatalf("no rewrite planned: %+v", p.Decisions)
			}
			if c.wantRepack && len(p.Repacks) == 0 {
				t.Fatalf("no repack planned: %+v", p.Decisions)
			}
			// (tasks executed at once, as lanced compact does by default)
			sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{Workers: 2})
			if err != nil {
				t.Fatalf("compact: %v (summary %+v)", err, sum)
			}
			if sum.TasksCommitted != len(p.Rewrites)+len(p.Repacks) || sum.TasksFailed != 0 {
				t.Fatalf("summary %+v", sum)
			}

			after := oracle.Inspect(t, path, 0)
			gotDigest, gotRows := rowSetDigest(oracle.Scan(t, path, 0, nil))
			if gotRows != wantRows || gotDigest != wantDigest || after.Rows != before.Rows {
				t.Fatalf("rows changed: %d -> %d (countRows %d -> %d)", wantRows, gotRows, before.Rows, after.Rows)
			}
			if after.Version != before.Version+uint64(len(sum.VersionsCommitted)) {
				t.Fatalf("version %d -> %d with commits %v", before.Version, after.Version, sum.VersionsCommitted)
			}
			if c.wantRewrite && after.Fragments >= before.Fragments {
				t.Fatalf("fragments %d -> %d", before.Fragments, after.Fragments)
			}
			if c.wantRepack && after.DataFiles >= before.DataFiles {
				t.Fatalf("data files %d -> %d", before.DataFiles, after.DataFiles)
			}
			// Planning again converges. (With index_coverage = unindex the
			// first round keeps indexed and unindexed fragments apart; once
			// all are unindexed a second round may merge them, as Lance's
			// own binning would.)
			for round := 0; ; round++ {
				tbl2, m2 := tabletest.Open(t, "file://"+path)
				p2 := planFor(t, path, m2, c.tune)
				if p2.Empty() {
					break
				}
				if round == 2 || c.scenario != "indexed" {
					t.Fatalf("plan %d after compaction not empty: %d rewrites, %d repacks", round+2, len(p2.Rewrites), len(p2.Repacks))
				}
				if _, err := engine.Compact(context.Background(), tbl2, m2, p2.Tasks(), engine.CompactOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// Every older version still opens with its own rows.
			for _, v := range []uint64{1, before.Version} {
				if r := oracle.Inspect(t, path, v); r.Version != v {
					t.Fatalf("version %d opened as %d", v, r.Version)
				}
			}
			checkLanceKeepsWriting(t, path)
			t.Logf("%s: v%d→v%d, fragments %d→%d, files %d→%d, %s", c.scenario, before.Version, after.Version,
				before.Fragments, after.Fragments, before.DataFiles, after.DataFiles, fmt.Sprintf("copied %d reencoded %d", sum.FilesCopied, sum.FilesReencoded))
		})
	}
}

// checkLanceKeepsWriting: real Lance keeps writing (append, delete),
// indexing (a BTree on id, replaced), optimizing and counting the table at
// path, and counts some rows.
func checkLanceKeepsWriting(t *testing.T, path string) {
	t.Helper()
	ops := []oracle.Op{
		{"op": "add", "rows": 50, "seed": 7},
		{"op": "delete", "where": "id % 11 = 3"},
		{"op": "create_index", "column": "id", "type": "btree", "replace": true},
		{"op": "optimize"},
		{"op": "count_rows"},
	}
	if res := oracle.RunOps(t, path, ops); len(res) != len(ops) {
		t.Fatalf("ops: %d results", len(res))
	}
	if final := oracle.Inspect(t, path, 0); final.Rows <= 0 {
		t.Fatalf("final rows %d", final.Rows)
	}
}

// openTable opens the local table at path (tabletest.Open).
func openTable(t *testing.T, path string) (*table.Table, *format.Manifest) {
	t.Helper()
	return tabletest.Open(t, "file://"+path)
}
