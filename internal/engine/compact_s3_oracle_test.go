package engine_test

import (
	"testing"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCompactOnS3Emulator: real Lance builds tables in the in-process S3
// emulator; lanced rewrites and repacks them through s3:// (conditional
// puts for the manifests); real Lance reads the same rows and keeps writing.
func TestCompactOnS3Emulator(t *testing.T) {
	oracle.Require(t)
	s3 := storetest.StartS3(t)
	opts := oracle.Options{StorageOptions: s3.LanceStorageOptions()}
	for _, c := range []compactCase{
		{scenario: "deletes_bitmap", wantRewrite: true},
		{scenario: "backfill", tune: repackOnly(1), wantRepack: true},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			lanceURI := oracle.Build(t, c.scenario, s3.LanceURI("s3test/"+c.scenario), opts)
			wantDigest, wantRows := rowSetDigest(oracle.Scan(t, lanceURI, 0, nil, opts))
			before := oracle.Inspect(t, lanceURI, 0, opts)
			ourURI := s3.URI("s3test/" + c.scenario + "/" + c.scenario + ".lance")
			tbl, m := tabletest.Open(t, ourURI)
			if m.Version() != before.Version {
				t.Fatalf("lanced sees version %d, Lance %d (uri %s vs %s)", m.Version(), before.Version, ourURI, lanceURI)
			}
			p := planFor(t, ourURI, m, c.tune)
			sum, err := engine.Compact(ctx, tbl, m, p.Tasks(), engine.CompactOptions{})
			if err != nil || len(sum.VersionsCommitted) == 0 {
				t.Fatalf("compact: %v %+v", err, sum)
			}
			gotDigest, gotRows := rowSetDigest(oracle.Scan(t, lanceURI, 0, nil, opts))
			if gotRows != wantRows || gotDigest != wantDigest {
				t.Fatalf("rows changed on S3: %d -> %d", wantRows, gotRows)
			}
			after := oracle.Inspect(t, lanceURI, 0, opts)
			if c.wantRewrite && after.Fragments >= before.Fragments || c.wantRepack && after.DataFiles >= before.DataFiles {
				t.Fatalf("layout not improved: %d/%d -> %d/%d", before.Fragments, before.DataFiles, after.Fragments, after.DataFiles)
			}
			oracle.RunOps(t, lanceURI, []oracle.Op{{"op": "add", "rows": 10, "seed": 3}, {"op": "optimize"}}, opts)
		})
	}
}
