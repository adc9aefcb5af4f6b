package engine

import (
	"context"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// scanAll reads a version (0 = latest) with ScanManifest.
func scanAll(t *testing.T, uri string, version uint64, names []string) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	ctx := context.Background()
	b, err := store.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tbl, err := OpenTable(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.Latest(ctx)
	if version != 0 {
		m, err = tbl.Load(ctx, version)
	}
	if err != nil {
		t.Fatal(err)
	}
	var opts ScanOptions
	if names != nil {
		if opts.FieldIDs, err = FieldIDsByName(m.PB.GetFields(), names); err != nil {
			t.Fatal(err)
		}
	}
	opts.BatchRows = 1000
	var recs []arrow.RecordBatch
	var sch *arrow.Schema
	err = ScanManifest(ctx, b, m, opts, func(r arrow.RecordBatch) error {
		r.Retain()
		recs = append(recs, r)
		sch = r.Schema()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range recs {
			r.Release()
		}
	})
	return sch, recs
}

func TestScanMatchesLance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the lance oracle")
	}
	oracle.Require(t)
	for _, sc := range []string{"types", "text", "v2_0", "deletes_arrow", "deletes_bitmap", "appends", "backfill", "dropped_column", "wide"} {
		t.Run(sc, func(t *testing.T) {
			uri := oracle.Build(t, sc, t.TempDir())
			want := oracle.Digest(oracle.Scan(t, uri, 0, nil))
			sch, recs := scanAll(t, uri, 0, nil)
			if sch == nil {
				t.Fatalf("%s: no rows read", sc)
			}
			got := oracle.DigestRecords(sch, recs)
			var names []string
			for n := range want {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if got[n] != want[n] {
					t.Errorf("%s column %s: digest differs from real Lance's scan", sc, n)
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %d columns, real Lance has %d", sc, len(got), len(want))
			}
		})
	}
}
