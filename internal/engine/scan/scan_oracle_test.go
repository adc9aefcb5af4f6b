package scan

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// scanAll reads a version (0 = latest) with ScanManifest.
func scanAll(t *testing.T, uri string, version uint64, names []string) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	ctx := context.Background()
	tbl, m := tabletest.Open(t, uri)
	b := tbl.Bucket()
	var err error
	if version != 0 {
		if m, err = tbl.Load(ctx, version); err != nil {
			t.Fatal(err)
		}
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

// TestTakeMatchesLance: random rows read with lancefile.Take through each
// fragment's data files equal real Lance's takeOffsets of the same rows.
func TestTakeMatchesLance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the lance oracle")
	}
	oracle.Require(t)
	ctx := context.Background()
	for _, sc := range []string{"types", "text", "v2_0"} {
		t.Run(sc, func(t *testing.T) {
			uri := oracle.Build(t, sc, t.TempDir())
			tbl, m := tabletest.Open(t, uri)
			frags := m.PB.GetFragments()
			// live[i] = physical rows of fragment i that are not deleted.
			live := make([][]uint64, len(frags))
			var total uint64
			for i, f := range frags {
				del, err := tbl.ReadDeletions(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for r := uint64(0); r < f.GetPhysicalRows(); r++ {
					if !del.Contains(uint32(r)) {
						live[i] = append(live[i], r)
					}
				}
				total += uint64(len(live[i]))
			}
			// Real Lance returns takeOffsets sorted and without duplicates
			// when rows span fragments, so ask for sorted unique offsets.
			rng := rand.New(rand.NewPCG(7, total))
			pick := map[uint64]bool{0: true, total - 1: true}
			for len(pick) < 40 {
				pick[rng.Uint64N(total)] = true
			}
			var offs []uint64
			for o := range pick {
				offs = append(offs, o)
			}
			sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
			want := oracle.ScanWith(t, uri, oracle.ScanOptions{TakeOffsets: offs})
			// Our side: one Take per row (fragment located by offset).
			var recs []arrow.RecordBatch
			defer func() {
				for _, r := range recs {
					r.Release()
				}
			}()
			for _, off := range offs {
				fi, local := 0, off
				for local >= uint64(len(live[fi])) {
					local -= uint64(len(live[fi]))
					fi++
				}
				rec := takeOne(t, tbl.Bucket(), m.PB.GetFields(), frags[fi], live[fi][local])
				recs = append(recs, rec)
			}
			got := oracle.DigestRecords(recs[0].Schema(), recs)
			for n, d := range oracle.Digest(want) {
				if got[n] != d {
					t.Errorf("%s column %s: takes differ from real Lance's takeOffsets", sc, n)
				}
			}
		})
	}
}

// takeOne reads one physical row of a fragment, stitching its data files.
func takeOne(t *testing.T, b *store.Bucket, fields []*filepb.Field, frag *tablepb.DataFragment, row uint64) arrow.RecordBatch {
	t.Helper()
	ctx := context.Background()
	sch, err := lancefile.ArrowSchema(fields)
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]arrow.Array, sch.NumFields())
	for _, df := range frag.GetFiles() {
		ra, err := b.OpenReaderAt(ctx, "data/"+df.GetPath())
		if err != nil {
			t.Fatal(err)
		}
		f, err := lancefile.Open(ra, ra.Size(), df.GetPath())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.BindTableSchema(fields, df.GetFields(), df.GetColumnIndices()); err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for _, top := range f.TopFields() {
			ids = append(ids, top.GetId())
		}
		rec, err := f.Take(ctx, []uint64{row}, ids)
		ra.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, fl := range rec.Schema().Fields() {
			idx := sch.FieldIndices(fl.Name)
			c := rec.Column(i)
			c.Retain()
			cols[idx[0]] = c
		}
		rec.Release()
	}
	for i := range cols {
		if cols[i] == nil {
			cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, sch.Field(i).Type, 1)
		}
	}
	rec := array.NewRecordBatch(sch, cols, 1)
	for _, c := range cols {
		c.Release()
	}
	return rec
}
