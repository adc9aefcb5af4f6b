package engine_test

import (
	"context"
	"maps"
	"path/filepath"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRewriteCopyOracle: a rewrite of fragments with big pages (vectors) and
// no deletions concatenates their pages instead of re-encoding; real Lance
// reads the result identically (same values in the same order), and keeps
// appending, deleting, indexing and optimizing it. A table of small pages
// (appends) is re-encoded instead (the page rule in rewrite_copy.go).
func TestRewriteCopyOracle(t *testing.T) {
	oracle.Require(t)
	vec := oracle.Sized{Fragments: 5, RowsPerFragment: 2000, VectorDim: 256}.Scenario()
	// vectors and long text (full-zip pages) with every 7th row deleted:
	// their pages are filtered, the scalar columns re-encoded
	del := oracle.Sized{Fragments: 4, RowsPerFragment: 3000, VectorDim: 128, TextWords: 80, DeleteEvery: 7}.Scenario()
	cases := []struct {
		name, scenario string
		opts           oracle.Options
		copied         bool
		filtered       bool
	}{
		{name: vec, scenario: vec, copied: true},
		{name: del, scenario: del, copied: true, filtered: true},
		{name: "stable-" + del, scenario: del, copied: true, filtered: true,
			opts: oracle.Options{StorageOptions: map[string]string{"new_table_enable_stable_row_ids": "true"}}},
		// stable row ids: the copy carries every row's id (real Lance's _rowid)
		{name: "stable-" + vec, scenario: vec, copied: true,
			opts: oracle.Options{StorageOptions: map[string]string{"new_table_enable_stable_row_ids": "true"}}},
		{name: "appends", scenario: "appends", copied: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := oracle.Build(t, c.scenario, t.TempDir(), c.opts)
			ids := oracle.ScanWith(t, path, oracle.ScanOptions{WithRowID: true})
			wantIDs := oracle.Digest(ids)["_rowid"]
			if wantIDs == "" {
				t.Fatalf("no _rowid column in real Lance's scan")
			}
			before := oracle.Inspect(t, path, 0)
			want := oracle.Digest(oracle.Scan(t, path, 0, nil))
			wantSome := oracle.Digest(oracle.ScanWith(t, path, oracle.ScanOptions{Where: "id % 7 = 2"}))

			tbl, m := tabletest.Open(t, "file://"+path)
			p := planFor(t, path, m, nil)
			if len(p.Rewrites) == 0 {
				t.Fatalf("no rewrite planned: %+v", p.Decisions)
			}
			sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{})
			if err != nil {
				t.Fatalf("compact: %v (summary %+v)", err, sum)
			}
			if c.copied && (sum.FilesCopied == 0 || sum.FilesReencoded != 0) {
				t.Fatalf("want every file page-copied: %+v", sum)
			}
			if !c.copied && (sum.FilesCopied != 0 || sum.FilesReencoded == 0) {
				t.Fatalf("want every file re-encoded: %+v", sum)
			}
			if c.filtered && (sum.Pages.Filtered.Pages == 0 || sum.Pages.Reencoded.Pages+sum.Pages.Rechunked.Pages == 0 || sum.Pages.Copied.Pages != 0) {
				// every source page lost rows: none is copied verbatim; the
				// full-zip ones are filtered, the mini-block ones re-chunked
				// or re-encoded
				t.Fatalf("want filtered and re-chunked or re-encoded pages, none copied: %+v", sum.Pages)
			}

			// file:// sources and outputs on one filesystem: the kept
			// pages and surviving rows are copied in the kernel
			// (copy_file_range), not read into lanced
			if c.copied && sum.Pages.RangeBytes == 0 && store.KernelCopyAvailable(filepath.Dir(path)) {
				t.Fatalf("no bytes copied in the kernel: %+v", sum.Pages)
			}
			after := oracle.Inspect(t, path, 0)
			if after.Rows != before.Rows || after.Fragments >= before.Fragments {
				t.Fatalf("rows %d -> %d, fragments %d -> %d", before.Rows, after.Rows, before.Fragments, after.Fragments)
			}
			if got := oracle.Digest(oracle.Scan(t, path, 0, nil)); !maps.Equal(got, want) {
				t.Fatalf("real Lance reads different columns after the rewrite:\nbefore %v\nafter  %v", want, got)
			}
			if got := oracle.Digest(oracle.ScanWith(t, path, oracle.ScanOptions{Where: "id % 7 = 2"})); !maps.Equal(got, wantSome) {
				t.Fatalf("filtered read differs after the rewrite")
			}
			if got := oracle.Digest(oracle.ScanWith(t, path, oracle.ScanOptions{WithRowID: true}))["_rowid"]; c.opts.StorageOptions != nil && got != wantIDs {
				t.Fatalf("stable row ids changed in the rewrite")
			}
			if r := oracle.Inspect(t, path, before.Version); r.Rows != before.Rows {
				t.Fatalf("version %d reads %d rows, had %d", before.Version, r.Rows, before.Rows)
			}
			checkLanceKeepsWriting(t, path)
			t.Logf("fragments %d -> %d, copied %d, re-encoded %d, pages %+v", before.Fragments, after.Fragments, sum.FilesCopied, sum.FilesReencoded, sum.Pages)
		})
	}
}

// TestRewritePageRulePerStore: the page rule charges an extra page what
// Lance's reader counts a request as, 4 KiB on a local disk and 64 KiB on
// an object store. The same table of 5000-row fragments (scalar and
// short-text pages of 12-75 KiB, category pages of 2 KiB) is rewritten on
// file://, where its bigger columns are page-copied, and on S3 (gofakes3),
// where every column is re-encoded; real Lance reads both identically.
func TestRewritePageRulePerStore(t *testing.T) {
	oracle.Require(t)
	scenario := oracle.Sized{Fragments: 4, RowsPerFragment: 5000, TextWords: 5}.Scenario()
	s3 := storetest.StartS3(t)
	s3opts := oracle.Options{StorageOptions: s3.LanceStorageOptions()}
	for _, c := range []struct {
		name           string
		lanceURI, ours string
		opts           oracle.Options
		wantCopiedCols bool
	}{
		{name: "file", wantCopiedCols: true},
		{name: "s3", lanceURI: s3.LanceURI("pagerule/t"), ours: s3.URI("pagerule/t/" + scenario + ".lance"), opts: s3opts},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.lanceURI == "" {
				c.lanceURI = t.TempDir()
			}
			path := oracle.Build(t, scenario, c.lanceURI, c.opts)
			if c.ours == "" {
				c.ours = "file://" + path
			}
			want := oracle.Digest(oracle.Scan(t, path, 0, nil, c.opts))
			tbl, m := tabletest.Open(t, c.ours)
			p := planFor(t, c.ours, m, nil)
			if len(p.Rewrites) == 0 {
				t.Fatalf("no rewrite planned: %+v", p.Decisions)
			}
			sum, err := engine.Compact(context.Background(), tbl, m, p.Tasks(), engine.CompactOptions{})
			if err != nil {
				t.Fatalf("compact: %v (summary %+v)", err, sum)
			}
			copied := sum.Pages.ColsCopied > 0 && sum.Pages.Copied.Pages > 0
			if copied != c.wantCopiedCols || sum.Pages.Reencoded.Pages == 0 {
				t.Fatalf("want columns page-copied %v and the 2 KiB-page column re-encoded: %+v", c.wantCopiedCols, sum.Pages)
			}
			if got := oracle.Digest(oracle.Scan(t, path, 0, nil, c.opts)); !maps.Equal(got, want) {
				t.Fatalf("real Lance reads different columns after the rewrite:\nbefore %v\nafter  %v", want, got)
			}
			oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 10, "seed": 3}, {"op": "optimize"}}, c.opts)
			t.Logf("pages %+v", sum.Pages)
		})
	}
}
