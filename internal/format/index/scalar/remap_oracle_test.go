package scalar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// row is one live row as a Go filter sees it.
type row struct {
	id       int64
	value    float64
	grp      *int64
	category string
	note     *string
	tags     []string // nil when the list is null
}

type filterCase struct {
	where string
	index string // the index real Lance must use
	// match is the Go filter; nil compares with the first version's
	// answer (real Lance through its own index).
	match func(r row) bool
}

func strIn(s *string, vs ...string) bool { return s != nil && slices.Contains(vs, *s) }

// remapTable is one real-Lance table with scalar indices, the deletes
// before its compaction and the filters each index must answer.
type remapTable struct {
	name     string
	scenario string
	setup    []oracle.Op // after the build: columns and indices
	indices  map[string]index.Kind
	del      string
	filters  func(sample row) []filterCase
	// noCatchUp leaves the table out of the catch-up test (whose Go side
	// sorts only int64, float64 and utf8 values).
	noCatchUp bool
}

var remapTables = []remapTable{
	{
		// One index per value type Lance indexes (btree, bitmap,
		// labelList over int32 and utf8 items), all-null columns included.
		name:     "types",
		scenario: "types",
		setup: []oracle.Op{
			{"op": "create_index", "column": "i8", "type": "btree"},
			{"op": "create_index", "column": "u64", "type": "btree"},
			{"op": "create_index", "column": "f32", "type": "btree"},
			{"op": "create_index", "column": "ts_tz", "type": "btree"},
			{"op": "create_index", "column": "s", "type": "btree"},
			{"op": "create_index", "column": "all_null", "type": "btree"},
			{"op": "create_index", "column": "d32", "type": "btree"},
			{"op": "create_index", "column": "flag", "type": "bitmap"},
			{"op": "create_index", "column": "i16", "type": "bitmap"},
			{"op": "create_index", "column": "all_null_s", "type": "bitmap"},
			{"op": "create_index", "column": "li", "type": "label_list"},
			{"op": "create_index", "column": "ls_list", "type": "label_list"},
		},
		indices: map[string]index.Kind{
			"i8_idx": index.KindBTree, "u64_idx": index.KindBTree, "f32_idx": index.KindBTree, "ts_tz_idx": index.KindBTree,
			"s_idx": index.KindBTree, "all_null_idx": index.KindBTree, "d32_idx": index.KindBTree,
			"flag_idx": index.KindBitmap, "i16_idx": index.KindBitmap, "all_null_s_idx": index.KindBitmap,
			"li_idx": index.KindLabelList, "ls_list_idx": index.KindLabelList,
		},
		del:       "id % 10 = 0 OR (id >= 2900 AND id < 3100)",
		noCatchUp: true,
		filters: func(row) []filterCase {
			return []filterCase{
				{"i8 = 5", "i8_idx", nil},
				{"i8 < -50", "i8_idx", nil},
				{"u64 > 500000", "u64_idx", nil},
				{"f32 < 0", "f32_idx", nil},
				{"f32 IS NULL", "f32_idx", nil},
				{"ts_tz IS NULL", "ts_tz_idx", nil},
				{"s = ''", "s_idx", nil},
				{"s > 'm'", "s_idx", nil},
				{"all_null IS NULL", "all_null_idx", nil},
				{"d32 < DATE '2020-01-01'", "d32_idx", nil},
				{"flag = true", "flag_idx", nil},
				{"i16 BETWEEN -100 AND 100", "i16_idx", nil},
				{"i16 IN (-7, 3)", "i16_idx", nil},
				{"i16 > 10000", "i16_idx", nil},
				{"all_null_s IS NULL", "all_null_s_idx", nil},
				{"array_has_any(ls_list, make_array('', 'the'))", "ls_list_idx", nil},
				// Items are random int32s: the answer is likely empty, but
				// it goes through the index, so real Lance loads it.
				{"array_has_any(li, make_array(CAST(1 AS INT), CAST(2 AS INT), CAST(3 AS INT)))", "li_idx", nil},
			}
		},
	},
	{
		name:     "btree_bitmap",
		scenario: "sized-4x3000-v0-t0-d0",
		setup: []oracle.Op{
			// grp: duplicates (ties inside btree pages) and nulls.
			{"op": "add_columns", "columns": []map[string]string{{"name": "grp", "value_sql": "nullif(id % 100, 3)"}}},
			{"op": "create_index", "column": "id", "type": "btree"},
			{"op": "create_index", "column": "value", "type": "btree"},
			{"op": "create_index", "column": "grp", "type": "btree"},
			{"op": "create_index", "column": "category", "type": "bitmap"},
			// note: thousands of distinct values (several key batches) and a null key.
			{"op": "create_index", "column": "note", "type": "bitmap"},
		},
		indices: map[string]index.Kind{"id_idx": index.KindBTree, "value_idx": index.KindBTree, "grp_idx": index.KindBTree, "category_idx": index.KindBitmap, "note_idx": index.KindBitmap},
		del:     "id % 10 = 0 OR (id >= 3000 AND id < 3600) OR id = 11999",
		filters: func(s row) []filterCase {
			return []filterCase{
				{"id = 1234", "id_idx", func(r row) bool { return r.id == 1234 }},
				{"id >= 11990", "id_idx", func(r row) bool { return r.id >= 11990 }},
				{"id >= 2990 AND id < 3710", "id_idx", func(r row) bool { return r.id >= 2990 && r.id < 3710 }},
				{"id IN (5, 3001, 3700, 11998, 20, 8191, 8192)", "id_idx", func(r row) bool { return slices.Contains([]int64{5, 3001, 3700, 11998, 20, 8191, 8192}, r.id) }},
				{"value = 617.5", "value_idx", func(r row) bool { return r.value == 617.5 }},
				{"value < 2.0", "value_idx", func(r row) bool { return r.value < 2 }},
				{"value > 5000.5 AND value <= 5100", "value_idx", func(r row) bool { return r.value > 5000.5 && r.value <= 5100 }},
				{"value IN (1.5, 3000.0, 4095.5)", "value_idx", func(r row) bool { return r.value == 1.5 || r.value == 3000 || r.value == 4095.5 }},
				{"grp = 17", "grp_idx", func(r row) bool { return r.grp != nil && *r.grp == 17 }},
				{"grp BETWEEN 40 AND 42", "grp_idx", func(r row) bool { return r.grp != nil && *r.grp >= 40 && *r.grp <= 42 }},
				{"grp IN (1, 2, 99)", "grp_idx", func(r row) bool { return r.grp != nil && (*r.grp == 1 || *r.grp == 2 || *r.grp == 99) }},
				{"grp IS NULL", "grp_idx", func(r row) bool { return r.grp == nil }},
				{"category = 'cat-3'", "category_idx", func(r row) bool { return r.category == "cat-3" }},
				{"category IN ('cat-1', 'cat-6')", "category_idx", func(r row) bool { return r.category == "cat-1" || r.category == "cat-6" }},
				{"category > 'cat-4'", "category_idx", func(r row) bool { return r.category > "cat-4" }},
				{"note IS NULL", "note_idx", func(r row) bool { return r.note == nil }},
				{fmt.Sprintf("note = '%s'", *s.note), "note_idx", func(r row) bool { return strIn(r.note, *s.note) }},
				{fmt.Sprintf("note IN ('%s', 'no such note')", *s.note), "note_idx", func(r row) bool { return strIn(r.note, *s.note, "no such note") }},
			}
		},
	},
	{
		name:     "label_list",
		scenario: "text",
		setup:    []oracle.Op{{"op": "create_index", "column": "tags", "type": "label_list"}},
		indices:  map[string]index.Kind{"tags_idx": index.KindLabelList},
		del:      "id % 10 = 0 OR (id >= 1500 AND id < 2000)",
		filters: func(s row) []filterCase {
			has := func(r row, w string) bool { return slices.Contains(r.tags, w) }
			return []filterCase{
				{fmt.Sprintf("array_has_any(tags, make_array('%s', 'no such tag'))", s.tags[0]), "tags_idx", func(r row) bool { return has(r, s.tags[0]) }},
				{"array_has_any(tags, make_array('river', 'lance'))", "tags_idx", func(r row) bool { return has(r, "river") || has(r, "lance") }},
				{"array_has_all(tags, make_array('the', 'of'))", "tags_idx", func(r row) bool { return has(r, "the") && has(r, "of") }},
				{"array_contains(tags, 'silver')", "tags_idx", func(r row) bool { return has(r, "silver") }},
			}
		},
	},
}

// TestRemapOracle builds tables with btree, bitmap and labelList indices
// with real Lance, deletes rows and compacts with real Lance's optimize()
// (which remaps the indices its own way). Our remap of each pre-compaction
// index, through the mapping computed from the two manifests (checked row
// by row against Lance's row addresses), must hold the same entries as
// Lance's remapped index; swapped in for Lance's in a new version, real
// Lance must load it, count it as covering every row and answer equality,
// range, IN, IS NULL and array filters through it with the same rows as a
// Go filter over the table.
func TestRemapOracle(t *testing.T) {
	oracle.Require(t)
	for _, tc := range remapTables {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRemapOracle(t, tc)
		})
	}
}

func testRemapOracle(t *testing.T, tc remapTable) {
	ctx := context.Background()
	path := buildTable(t, tc, "remap")
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": tc.del}})
	pre := oracle.Inspect(t, path, 0)
	comp := indextest.Compact(t, path, pre)
	post, preM, postM, mapping := comp.Post, comp.PreM, comp.PostM, comp.Mapping
	newFrags := comp.NewFragments
	wantFrags := roaring.New()
	for _, f := range newFrags {
		wantFrags.Add(uint32(f))
	}

	var swaps []indextest.Swap
	for _, name := range slices.Sorted(maps.Keys(tc.indices)) {
		kind := tc.indices[name]
		old := indextest.Index(t, preM, name)
		if got := index.Detect(old); got != kind {
			t.Fatalf("%s: detected %s, want %s", name, got, kind)
		}
		lanceIdx := indextest.Index(t, postM, name)
		got := roaring.New()
		if err := got.UnmarshalBinary(lanceIdx.GetFragmentBitmap()); err != nil {
			t.Fatal(err)
		}
		if !got.Equals(wantFrags) {
			t.Fatalf("%s: Lance's remapped index covers %v, the new fragments are %v", name, got.ToArray(), newFrags)
		}
		lanceDir, _ := comp.LanceRemap(t, path, name)
		if err := index.CanRemap(old); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rm, ok := index.RemapperFor(kind)
		if !ok {
			t.Fatalf("%s: no remapper for %s", name, kind)
		}
		oldDir := filepath.Join(path, "_indices", indextest.UUID(t, old.GetUuid()))
		id := uuid.New()
		newDir := filepath.Join(path, "_indices", id.String())
		res, err := rm.Remap(ctx, index.RemapRequest{Segment: old, Kind: kind, Mapping: mapping, Old: indextest.Dir(oldDir), New: indextest.Dir(newDir)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if kind == index.KindBTree {
			sameBTree(t, name, openBTree(t, lanceDir), openBTree(t, newDir))
		} else {
			sameBitmap(t, name, openBitmap(t, lanceDir), openBitmap(t, newDir))
		}
		written, err := indextest.Dir(newDir).Files(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, f := range written {
			files = append(files, f.Name)
		}
		t.Logf("%s (%s): kept %d row addresses, dropped %d; files %v", name, kind, res.Rows, res.Dropped, written)
		if res.Rows == 0 || res.Dropped == 0 {
			t.Errorf("%s: kept %d dropped %d: the case proves nothing", name, res.Rows, res.Dropped)
		}
		swaps = append(swaps, indextest.Swap{Old: lanceIdx, ID: id, Files: files})
	}
	indextest.CommitIndexSwap(t, path, postM, swaps...)
	ours := oracle.Inspect(t, path, 0)
	checkCoverage(t, tc, ours, pre.Rows, "our remap")

	rows := scanRows(t, path, ours.Version)
	if int64(len(rows)) != pre.Rows {
		t.Fatalf("scan: %d rows, want %d", len(rows), pre.Rows)
	}
	checkFilters(t, tc, path, []labelled{{"before compaction", pre.Version}, {"Lance's remap", post.Version}, {"our remap", ours.Version}}, rows)
}

type labelled struct {
	label   string
	version uint64
}

// checkFilters runs every filter of the table at each version through real
// Lance and compares the rows with a Go filter over rows (the live rows of
// the last version); each must go through its index.
func checkFilters(t *testing.T, tc remapTable, path string, versions []labelled, rows []row) {
	t.Helper()
	// sample: a note of an early row, the tags of the last row with tags
	// (appended rows come last).
	var sample row
	for _, r := range rows {
		if r.note != nil && strings.Count(*r.note, " ") >= 2 && !strings.Contains(*r.note, "'") {
			sample.note = r.note
			break
		}
	}
	for i := len(rows) - 1; i >= 0 && sample.tags == nil; i-- {
		if len(rows[i].tags) > 0 && rows[i].tags[0] != "" && !strings.Contains(rows[i].tags[0], "'") {
			sample.tags = rows[i].tags[:1]
		}
	}
	cases := tc.filters(sample)
	var first []queryResult
	for _, v := range versions {
		got := queryAll(t, path, v.version, cases)
		if first == nil {
			first = got
		}
		for i, c := range cases {
			var want []int64
			if c.match == nil {
				want = first[i].ids
			}
			for _, r := range rows {
				if c.match != nil && c.match(r) {
					want = append(want, r.id)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got[i].ids, want) {
				t.Errorf("%s: %s: %d rows %v, want %d %v", v.label, c.where, len(got[i].ids), head(got[i].ids), len(want), head(want))
			}
			if !strings.Contains(got[i].plan, "@"+c.index+"(") {
				t.Errorf("%s: %s: plan does not use %s:\n%s", v.label, c.where, c.index, got[i].plan)
			}
			if v == versions[len(versions)-1] && len(want) == 0 && !strings.Contains(c.where, "no such") && !strings.Contains(c.where, "array_has_all") && !strings.Contains(c.where, "(li,") && !strings.Contains(c.where, "IN (-7, 3)") {
				t.Errorf("%s matches no row: the filter proves nothing", c.where)
			}
		}
	}
}

// buildTable builds the table with its indices (in LANCED_KEEP_DIR/<kind>-<name>
// when set, to look at afterwards).
func buildTable(t *testing.T, tc remapTable, kind string) string {
	t.Helper()
	dir := t.TempDir()
	if keep := os.Getenv("LANCED_KEEP_DIR"); keep != "" {
		dir = filepath.Join(keep, kind+"-"+tc.name)
		os.RemoveAll(dir)
	}
	path := oracle.Build(t, tc.scenario, dir)
	oracle.RunOps(t, path, tc.setup)
	return path
}

// checkCoverage: real Lance's indexStats count every index as covering
// rows live rows and none unindexed.
func checkCoverage(t *testing.T, tc remapTable, r oracle.Report, rows int64, label string) {
	t.Helper()
	for name := range tc.indices {
		found := false
		for _, ix := range r.Indices {
			if ix.Name == name {
				found = true
				if ix.IndexedRows != rows || ix.UnindexedRows != 0 {
					t.Errorf("%s after %s: indexed %d unindexed %d, want %d and 0", name, label, ix.IndexedRows, ix.UnindexedRows, rows)
				}
			}
		}
		if !found {
			t.Errorf("%s missing after %s: %+v", name, label, r.Indices)
		}
	}
}

func head(ids []int64) []int64 { return ids[:min(len(ids), 8)] }

type queryResult struct {
	ids  []int64
	plan string
}

func queryAll(t *testing.T, path string, v uint64, cases []filterCase) []queryResult {
	t.Helper()
	ops := []oracle.Op{{"op": "checkout_version", "version": v}}
	for _, c := range cases {
		ops = append(ops, oracle.Op{"op": "query", "where": c.where, "columns": []string{"id"}, "explain": true})
	}
	raw := oracle.RunOps(t, path, ops)[1:]
	out := make([]queryResult, len(cases))
	for i, r := range raw {
		var q struct {
			Data []struct {
				ID int64 `json:"id"`
			} `json:"data"`
			Plan string `json:"plan"`
		}
		if err := json.Unmarshal(r, &q); err != nil {
			t.Fatal(err)
		}
		for _, d := range q.Data {
			out[i].ids = append(out[i].ids, d.ID)
		}
		slices.Sort(out[i].ids)
		out[i].plan = q.Plan
	}
	return out
}

// scanRows reads every live row at version v with real Lance.
func scanRows(t *testing.T, path string, v uint64) []row {
	t.Helper()
	tbl := oracle.Scan(t, path, v, nil)
	sc := tbl.Schema()
	n := int(tbl.NumRows())
	rows := make([]row, n)
	for ci := 0; ci < int(tbl.NumCols()); ci++ {
		name := sc.Field(ci).Name
		at := 0
		for _, ch := range tbl.Column(ci).Data().Chunks() {
			for i := 0; i < ch.Len(); i++ {
				r := &rows[at]
				at++
				switch name {
				case "id":
					r.id = ch.(*array.Int64).Value(i)
				case "value":
					// A null compares false with everything, as NaN does.
					r.value = math.NaN()
					if ch.IsValid(i) {
						r.value = ch.(*array.Float64).Value(i)
					}
				case "grp":
					if ch.IsValid(i) {
						g := ch.(*array.Int64).Value(i)
						r.grp = &g
					}
				case "category":
					r.category = ch.(*array.String).Value(i)
				case "note":
					if ch.IsValid(i) {
						s := ch.(*array.String).Value(i)
						r.note = &s
					}
				case "tags":
					if ch.IsValid(i) {
						l := ch.(*array.List)
						a, b := l.ValueOffsets(i)
						vals := l.ListValues().(*array.String)
						r.tags = []string{}
						for k := a; k < b; k++ {
							if vals.IsValid(int(k)) {
								r.tags = append(r.tags, vals.Value(int(k)))
							}
						}
					}
				}
			}
		}
	}
	return rows
}

func openBTree(t *testing.T, dir string) *scalar.BTree {
	t.Helper()
	bt, err := scalar.OpenBTree(lancefiletest.Open(t, filepath.Join(dir, scalar.BTreeLookupFileName)), lancefiletest.Open(t, filepath.Join(dir, scalar.BTreeDataFileName)))
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

func openBitmap(t *testing.T, dir string) *scalar.Bitmap {
	t.Helper()
	bm, err := scalar.OpenBitmap(lancefiletest.Open(t, filepath.Join(dir, scalar.BitmapFileName)))
	if err != nil {
		t.Fatal(err)
	}
	return bm
}

// sameBTree: the same pages (values and row addresses, in order), the same
// lookup rows and the same lookup metadata as Lance's remap.
func sameBTree(t *testing.T, name string, want, got *scalar.BTree) {
	t.Helper()
	ctx := context.Background()
	if want.NumPages != got.NumPages || want.BatchSize != got.BatchSize || want.Data.NumRows() != got.Data.NumRows() {
		t.Fatalf("%s: %d pages of %d (%d rows), Lance's remap %d of %d (%d rows)", name, got.NumPages, got.BatchSize, got.Data.NumRows(), want.NumPages, want.BatchSize, want.Data.NumRows())
	}
	wl, err := want.ReadLookup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Release()
	gl, err := got.ReadLookup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gl.Release()
	for c := 0; c < int(wl.NumCols()); c++ {
		if !array.Equal(wl.Column(c), gl.Column(c)) {
			t.Errorf("%s: lookup column %s\n ours  %v\n Lance %v", name, wl.ColumnName(c), gl.Column(c), wl.Column(c))
		}
	}
	if !sameMeta(fileMeta(want.Lookup), fileMeta(got.Lookup)) || !sameMeta(fileMeta(want.Data), fileMeta(got.Data)) {
		t.Errorf("%s: metadata %q %q, Lance's %q %q", name, fileMeta(got.Lookup), fileMeta(got.Data), fileMeta(want.Lookup), fileMeta(want.Data))
	}
	for p := 0; p < want.NumPages; p++ {
		a, err := want.ReadPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := got.ReadPage(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for c := 0; c < 2; c++ {
			if !array.Equal(a.Column(c), b.Column(c)) {
				t.Errorf("%s: page %d column %s differs from Lance's remap", name, p, a.ColumnName(c))
			}
		}
		a.Release()
		b.Release()
	}
}

func fileMeta(f *lancefile.File) map[string][]byte { return f.Descriptor.GetSchema().GetMetadata() }

func sameMeta(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}

// sameBitmap: the same keys, each with the same row addresses, as Lance's
// remap (row order differs: Lance writes its keys in hash order).
func sameBitmap(t *testing.T, name string, want, got *scalar.Bitmap) {
	t.Helper()
	a, b := bitmapEntries(t, want), bitmapEntries(t, got)
	if len(a) != len(b) {
		t.Errorf("%s: %d keys, Lance's remap %d", name, len(b), len(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: key %s: ours %.200s, Lance %.200s", name, k, b[k], v)
		}
	}
	if !sameMeta(fileMeta(want.File), fileMeta(got.File)) {
		t.Errorf("%s: metadata %q, Lance's %q", name, fileMeta(got.File), fileMeta(want.File))
	}
}

// bitmapEntries renders every key's row addresses.
func bitmapEntries(t *testing.T, bm *scalar.Bitmap) map[string]string {
	t.Helper()
	r, err := bm.Batches(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	out := map[string]string{}
	for r.Next() {
		rec := r.RecordBatch()
		keys, maps := rec.Column(0), rec.Column(1).(*array.Binary)
		for i := 0; i < int(rec.NumRows()); i++ {
			set, err := scalar.DecodeRowAddrs(maps.Value(i))
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			for _, f := range set.Fragments() {
				b, full, _ := set.Fragment(f)
				if full {
					fmt.Fprintf(&sb, "%d:full ", f)
					continue
				}
				fmt.Fprintf(&sb, "%d:%v ", f, b.ToArray())
			}
			k := "null"
			if keys.IsValid(i) {
				k = "=" + keys.ValueStr(i)
			}
			if _, dup := out[k]; dup {
				t.Fatalf("key %s twice", k)
			}
			out[k] = sb.String()
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
