package engine_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// scalarCatchUpIndex is one scalar index of the text table.
type scalarCatchUpIndex struct {
	column, typ, name string
	kind              index.Kind
}

var scalarCatchUpIndices = []scalarCatchUpIndex{
	{"id", "btree", "id_idx", index.KindBTree},
	{"title", "btree", "title_idx", index.KindBTree},
	{"grp", "bitmap", "grp_idx", index.KindBitmap},
	{"tags", "label_list", "tags_idx", index.KindLabelList},
}

// TestScalarCatchUpOracle: the text table (6000 rows) with btree, bitmap
// and labelList indices, each alone and all together, then many small
// appends and some deletes by real Lance. lanced (plan + compact with the
// default policy until nothing is planned) and real Lance's optimize() on
// a copy must both end with every live row indexed (indexStats); equality,
// range, IN, IS NULL, array_has_any and array_has_all filters return the
// same rows on both, through the index (explainPlan), with no scan of
// unindexed fragments left; real Lance then keeps appending, optimizing
// and re-creating the indices.
//
// The "catch-up only" case plans with scope = "index": no compaction
// first, so the catch-up reads every appended fragment, some with
// deletions, and the fragments stay as they are.
func TestScalarCatchUpOracle(t *testing.T) {
	oracle.Require(t)
	indexOnly := func(e *policy.Effective) { e.Scope.Value = policy.ScopeIndex }
	for _, c := range []struct {
		name string
		ixs  []scalarCatchUpIndex
		tune func(*policy.Effective)
	}{
		{"btree", scalarCatchUpIndices[:2], nil},
		{"bitmap", scalarCatchUpIndices[2:3], nil},
		{"labelList", scalarCatchUpIndices[3:], nil},
		{"all", scalarCatchUpIndices, nil},
		{"all catch-up only", scalarCatchUpIndices, indexOnly},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testScalarCatchUp(t, c.ixs, c.tune)
		})
	}
}

func testScalarCatchUp(t *testing.T, ixs []scalarCatchUpIndex, tune func(*policy.Effective)) {
	dir := t.TempDir()
	path := oracle.Build(t, "text", filepath.Join(dir, "ours"))
	ops := []oracle.Op{{"op": "add_columns", "columns": []map[string]string{{"name": "grp", "value_sql": "nullif(id % 50, 3)"}}}}
	for _, ix := range ixs {
		ops = append(ops, oracle.Op{"op": "create_index", "column": ix.column, "type": ix.typ})
	}
	for i := range 8 {
		ops = append(ops, oracle.Op{"op": "add", "rows": 40 + 37*i, "seed": 100 + i})
		if i == 3 {
			ops = append(ops, oracle.Op{"op": "delete", "where": "id % 11 = 4"})
		}
	}
	ops = append(ops, oracle.Op{"op": "delete", "where": "id >= 6000 AND id % 9 = 2"})
	oracle.RunOps(t, path, ops)
	pre := oracle.Inspect(t, path, 0)
	for _, ix := range ixs {
		if s := indexByName(t, pre, ix.name); s.UnindexedRows == 0 {
			t.Fatalf("setup: %s has nothing unindexed: %+v", ix.name, s)
		}
	}
	filters := scalarCatchUpFilters(t, path, ixs)
	before := oracle.Queries(t, path, filters)

	control := filepath.Join(dir, "control.lance")
	oracle.CopyTree(t, path, control)
	oracle.RunOps(t, control, []oracle.Op{{"op": "optimize"}})

	planned := compactUntilSettled(t, path, tune)
	if planned < len(ixs) {
		t.Fatalf("%d catch-up tasks planned for %d indices", planned, len(ixs))
	}
	ours, lance := oracle.Inspect(t, path, 0), oracle.Inspect(t, control, 0)
	if tune != nil && ours.Fragments != pre.Fragments {
		t.Fatalf("catch-up only: %d fragments, %d before", ours.Fragments, pre.Fragments)
	}
	t.Logf("fragments: before %d, ours %d, Lance's optimize %d", pre.Fragments, ours.Fragments, lance.Fragments)
	if ours.Rows != lance.Rows || ours.Rows != pre.Rows {
		t.Fatalf("rows: ours %d, Lance %d, before %d", ours.Rows, lance.Rows, pre.Rows)
	}
	for _, ix := range ixs {
		oi, li := indexByName(t, ours, ix.name), indexByName(t, lance, ix.name)
		t.Logf("%s: ours %d indexed / %d unindexed in %d segment(s); Lance's optimize %d / %d in %d", ix.name, oi.IndexedRows, oi.UnindexedRows, oi.Segments, li.IndexedRows, li.UnindexedRows, li.Segments)
		if oi.UnindexedRows != 0 || oi.IndexedRows != ours.Rows || li.UnindexedRows != 0 || oi.Segments != 1 || li.Segments != 1 {
			t.Fatalf("%s indexStats: ours %+v, Lance %+v, rows %d", ix.name, oi, li, ours.Rows)
		}
	}
	checkScalarSegments(t, path, ours.Version, control, lance.Version, ixs)
	got, want := oracle.Queries(t, path, filters), oracle.Queries(t, control, filters)
	for i, f := range filters {
		where, ix := f["where"].(string), scalarFilterIndex(f)
		if !slices.Equal(got[i].IDs(), want[i].IDs()) {
			t.Errorf("%s: ours %d rows, Lance's optimize %d", where, len(got[i].IDs()), len(want[i].IDs()))
		}
		if !slices.Equal(got[i].IDs(), before[i].IDs()) {
			t.Errorf("%s: %d rows after the catch-up, %d before", where, len(got[i].IDs()), len(before[i].IDs()))
		}
		if len(got[i].IDs()) == 0 && !strings.Contains(where, "array_has_all") {
			t.Errorf("%s matches no row: the filter proves nothing", where)
		}
		if !strings.Contains(got[i].Plan, "@"+ix+"(") {
			t.Errorf("%s: plan does not use %s:\n%s", where, ix, got[i].Plan)
		}
		if i == 0 {
			t.Logf("plan before:\n%s\nafter:\n%s", before[i].Plan, got[i].Plan)
		}
	}

	// Real Lance keeps going on our table.
	more := []oracle.Op{{"op": "add", "rows": 90, "seed": 300}, {"op": "optimize"}}
	for _, ix := range ixs {
		more = append(more, oracle.Op{"op": "create_index", "column": ix.column, "type": ix.typ, "replace": true})
	}
	oracle.RunOps(t, path, more)
	after := oracle.Inspect(t, path, 0)
	for _, ix := range ixs {
		if s := indexByName(t, after, ix.name); s.UnindexedRows != 0 || after.Rows != ours.Rows+90 {
			t.Fatalf("after real Lance: %s %+v, rows %d", ix.name, s, after.Rows)
		}
	}
	if again := oracle.Queries(t, path, filters); len(again) != len(filters) {
		t.Fatalf("queries after real Lance: %d results", len(again))
	}
}

// scalarFilterIndex is the index a filter must go through.
func scalarFilterIndex(f oracle.Op) string { return f["index"].(string) }

// scalarCatchUpFilters builds the filters of the indices under test, with
// values taken from appended rows (so they hit unindexed rows before the
// catch-up) and from original rows.
func scalarCatchUpFilters(t *testing.T, path string, ixs []scalarCatchUpIndex) []oracle.Op {
	t.Helper()
	sample := oracle.Queries(t, path, []oracle.Op{{"op": "query", "where": "id >= 6100", "columns": []string{"id", "title", "grp", "tags"}, "limit": 200}})[0]
	var title string
	var tags []string
	for _, r := range sample.Data {
		if s, ok := r["title"].(string); ok && title == "" && !strings.Contains(s, "'") {
			title = s
		}
		if l, ok := r["tags"].([]any); ok && len(l) > 0 && len(tags) < 2 {
			if s, ok := l[0].(string); ok && s != "" && !strings.Contains(s, "'") && !slices.Contains(tags, s) {
				tags = append(tags, s)
			}
		}
	}
	if title == "" || len(tags) < 2 {
		t.Fatalf("no sample title or tags among appended rows: %v", sample.Data)
	}
	q := func(where, ix string) oracle.Op {
		return oracle.Op{"op": "query", "where": where, "columns": []string{"id"}, "explain": true, "index": ix}
	}
	var out []oracle.Op
	for _, ix := range ixs {
		switch ix.name {
		case "id_idx":
			out = append(out, q("id = 6123", ix.name), q("id >= 5990 AND id < 6300", ix.name), q("id IN (5, 2999, 6001, 6150, 6400, 7000)", ix.name))
		case "title_idx":
			out = append(out, q(fmt.Sprintf("title = '%s'", title), ix.name), q("title < 'b'", ix.name), q(fmt.Sprintf("title >= '%s'", title), ix.name))
		case "grp_idx":
			out = append(out, q("grp = 17", ix.name), q("grp IS NULL", ix.name), q("grp IN (1, 2, 49)", ix.name), q("grp BETWEEN 40 AND 42", ix.name))
		case "tags_idx":
			out = append(out,
				q(fmt.Sprintf("array_has_any(tags, make_array('%s', '%s'))", tags[0], tags[1]), ix.name),
				q(fmt.Sprintf("array_has_all(tags, make_array('%s'))", tags[0]), ix.name),
				q(fmt.Sprintf("array_has_all(tags, make_array('%s', '%s'))", tags[0], tags[1]), ix.name))
		}
	}
	return out
}

// checkScalarSegments compares what each index's entry looks like after
// our catch-up and after Lance's optimize: one segment covering every
// fragment, the same index version, details and file names.
func checkScalarSegments(t *testing.T, path string, v uint64, control string, cv uint64, ixs []scalarCatchUpIndex) {
	t.Helper()
	om, lm := readTableManifest(t, path, v), readTableManifest(t, control, cv)
	for _, ix := range ixs {
		entry := func(m *format.Manifest) (*tablepb.IndexMetadata, []string) {
			var segs []*tablepb.IndexMetadata
			for _, s := range m.Indices.GetIndices() {
				if s.GetName() == ix.name {
					segs = append(segs, s)
				}
			}
			if len(segs) != 1 {
				t.Fatalf("%s: %d segments", ix.name, len(segs))
			}
			bm := roaring.New()
			if err := bm.UnmarshalBinary(segs[0].GetFragmentBitmap()); err != nil {
				t.Fatal(err)
			}
			var all []uint32
			for _, f := range m.PB.GetFragments() {
				all = append(all, uint32(f.GetId()))
			}
			if !slices.Equal(bm.ToArray(), all) {
				t.Fatalf("%s covers fragments %v of %v", ix.name, bm.ToArray(), all)
			}
			var files []string
			for _, f := range segs[0].GetFiles() {
				files = append(files, f.GetPath())
			}
			return segs[0], files
		}
		o, of := entry(om)
		l, lf := entry(lm)
		if o.GetIndexVersion() != l.GetIndexVersion() || !proto.Equal(o.GetIndexDetails(), l.GetIndexDetails()) || !slices.Equal(of, lf) || o.GetDatasetVersion() >= v {
			t.Fatalf("%s: ours version %d details %v files %v built on v%d; Lance's %d %v %v", ix.name, o.GetIndexVersion(), o.GetIndexDetails(), of, o.GetDatasetVersion(), l.GetIndexVersion(), l.GetIndexDetails(), lf)
		}
	}
}
