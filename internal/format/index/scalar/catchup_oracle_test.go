package scalar_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCatchUpOracle: the same real-Lance tables and indices, then two
// appends by real Lance (rows the indices do not cover). Each index's old
// segment merged with the appended rows (MergeBTree, MergeBitmap with
// BitmapAdditions), swapped in with a fragment bitmap covering every
// fragment, must be loaded by real Lance as covering every row and answer
// every filter through the index with the rows a Go filter over the table
// gives: the writers a catch-up uses produce segments real Lance reads.
func TestCatchUpOracle(t *testing.T) {
	oracle.Require(t)
	for _, tc := range remapTables {
		if tc.noCatchUp {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testCatchUpOracle(t, tc)
		})
	}
}

func testCatchUpOracle(t *testing.T, tc remapTable) {
	ctx := context.Background()
	path := buildTable(t, tc, "catchup")
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 700, "seed": 5}, {"op": "add", "rows": 300, "seed": 6}})
	before := oracle.Inspect(t, path, 0)
	m := indextest.ReadManifest(t, path, before.Version)
	all := roaring.New()
	for _, f := range m.PB.GetFragments() {
		all.Add(uint32(f.GetId()))
	}
	tbl := oracle.ScanWith(t, path, oracle.ScanOptions{Version: before.Version, WithRowAddr: true})
	col := func(name string) arrow.Array {
		idx := tbl.Schema().FieldIndices(name)
		if len(idx) != 1 {
			t.Fatalf("no column %s in %s", name, tbl.Schema())
		}
		a, err := array.Concatenate(tbl.Column(idx[0]).Data().Chunks(), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Release)
		return a
	}
	addrs := col("_rowaddr").(*array.Uint64).Uint64Values()

	var swaps []indextest.Swap
	for _, name := range slices.Sorted(maps.Keys(tc.indices)) {
		kind := tc.indices[name]
		old := indextest.Index(t, m, name)
		covered := roaring.New()
		if err := covered.UnmarshalBinary(old.GetFragmentBitmap()); err != nil {
			t.Fatal(err)
		}
		var rows []int // rows of the scan the index does not cover
		for i, a := range addrs {
			if !covered.Contains(uint32(a >> 32)) {
				rows = append(rows, i)
			}
		}
		if len(rows) != 1000 {
			t.Fatalf("%s: %d unindexed rows, want the 1000 appended", name, len(rows))
		}
		values := col(strings.TrimSuffix(name, "_idx"))
		oldDir := filepath.Join(path, "_indices", indextest.UUID(t, old.GetUuid()))
		id := uuid.New()
		newDir := filepath.Join(path, "_indices", id.String())
		if err := os.MkdirAll(newDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var res scalar.RemapResult
		var err error
		switch kind {
		case index.KindBTree:
			sorted, ids := sortRows(t, values, rows, addrs)
			rr, err2 := array.NewRecordReader(scalar.BTreeDataSchema(values.DataType()), []arrow.RecordBatch{
				array.NewRecordBatch(scalar.BTreeDataSchema(values.DataType()), []arrow.Array{sorted, ids}, int64(sorted.Len())),
			})
			if err2 != nil {
				t.Fatal(err2)
			}
			res, err = scalar.MergeBTree(ctx, openBTree(t, oldDir), nil, rr,
				indextest.Create(t, filepath.Join(newDir, scalar.BTreeDataFileName)),
				indextest.Create(t, filepath.Join(newDir, scalar.BTreeLookupFileName)))
		default:
			bm := openBitmap(t, oldDir)
			keyType := values.DataType()
			if l, ok := keyType.(*arrow.ListType); ok {
				keyType = l.Elem()
			}
			add := scalar.NewBitmapAdditions(keyType)
			defer add.Release()
			for _, i := range rows {
				sl := array.NewSlice(values, int64(i), int64(i+1))
				if kind == index.KindLabelList {
					err = add.AddLists(sl, addrs[i:i+1])
				} else {
					err = add.Add(sl, addrs[i:i+1])
				}
				sl.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
			res, err = scalar.MergeBitmap(ctx, bm, nil, add, indextest.Create(t, filepath.Join(newDir, scalar.BitmapFileName)))
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var files []string
		for _, f := range res.Files {
			files = append(files, f.Name)
		}
		t.Logf("%s (%s): %d row addresses, %d keys/pages after adding %d rows", name, kind, res.Rows, res.Keys, len(rows))
		swaps = append(swaps, indextest.Swap{Old: old, ID: id, Files: files, Fragments: all})
	}
	indextest.CommitIndexSwap(t, path, m, swaps...)
	ours := oracle.Inspect(t, path, 0)
	checkCoverage(t, tc, ours, ours.Rows, "our catch-up")

	checkFilters(t, tc, path, []labelled{{"before catch-up", before.Version}, {"our catch-up", ours.Version}}, scanRows(t, path, ours.Version))
}

// sortRows returns the values of the given rows sorted as Lance sorts a
// btree (nulls first, ascending, stable) with their row addresses.
func sortRows(t *testing.T, values arrow.Array, rows []int, addrs []uint64) (arrow.Array, arrow.Array) {
	t.Helper()
	order := slices.Clone(rows)
	less := func(a, b int) bool {
		an, bn := values.IsNull(a), values.IsNull(b)
		if an || bn {
			return an && !bn
		}
		switch v := values.(type) {
		case *array.Int64:
			return v.Value(a) < v.Value(b)
		case *array.Float64:
			return v.Value(a) < v.Value(b)
		case *array.String:
			return v.Value(a) < v.Value(b)
		}
		t.Fatalf("sortRows: %s", values.DataType())
		return false
	}
	sort.SliceStable(order, func(i, j int) bool { return less(order[i], order[j]) })
	mem := memory.DefaultAllocator
	b := array.NewBuilder(mem, values.DataType())
	ib := array.NewUint64Builder(mem)
	for _, i := range order {
		ib.Append(addrs[i])
		if values.IsNull(i) {
			b.AppendNull()
			continue
		}
		switch v := values.(type) {
		case *array.Int64:
			b.(*array.Int64Builder).Append(v.Value(i))
		case *array.Float64:
			b.(*array.Float64Builder).Append(v.Value(i))
		case *array.String:
			b.(*array.StringBuilder).Append(v.Value(i))
		}
	}
	return b.NewArray(), ib.NewArray()
}
