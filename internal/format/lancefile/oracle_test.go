package lancefile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Tables written by real lance 8.0.0 (testdata/gen.mjs) together with real
// Lance's own scan of each, as Arrow IPC.
var (
	genOnce sync.Once
	genDir  string
	genErr  error
)

func oracleTables(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs node and the lance oracle (testenv/oracle)")
	}
	oracle, _ := filepath.Abs("../../../testenv/oracle")
	if _, err := os.Stat(filepath.Join(oracle, "node_modules", "@lancedb", "lancedb")); err != nil {
		t.Fatalf("lance oracle not installed (run make oracle): %v", err)
	}
	genOnce.Do(func() {
		if d := os.Getenv("LANCEFILE_ORACLE_DIR"); d != "" { // reuse a generated set while iterating
			genDir = d
			return
		}
		genDir, genErr = os.MkdirTemp("", "lancefile-oracle-")
		if genErr != nil {
			return
		}
		cmd := exec.Command("node", "testdata/gen.mjs", oracle, genDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			genErr = fmt.Errorf("gen.mjs: %v\n%s", err, out)
		}
	})
	if genErr != nil {
		t.Fatal(genErr)
	}
	return genDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if genDir != "" && os.Getenv("LANCEFILE_ORACLE_DIR") == "" {
		os.RemoveAll(genDir)
	}
	os.Exit(code)
}

func openDataFile(t *testing.T, dir, table string) *File {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "db", table+".lance", "data", "*.lance"))
	if len(files) != 1 {
		t.Fatalf("%s: want 1 data file, have %d", table, len(files))
	}
	fh, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	st, _ := fh.Stat()
	f, err := Open(fh, st.Size(), files[0])
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// lanceScan loads real Lance's scan of a table: one array per column.
func lanceScan(t *testing.T, dir, table string) (*arrow.Schema, []arrow.Array) {
	t.Helper()
	fh, err := os.Open(filepath.Join(dir, table+".arrow"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := ipc.NewFileReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sch := r.Schema()
	chunks := make([][]arrow.Array, sch.NumFields())
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		for c := range chunks {
			a := rec.Column(c)
			a.Retain()
			chunks[c] = append(chunks[c], a)
		}
	}
	cols := make([]arrow.Array, len(chunks))
	for c, ch := range chunks {
		a, err := array.Concatenate(ch, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		cols[c] = a
	}
	return sch, cols
}

// sameValues compares two arrays value by value (ignoring field metadata and
// nullability flags in the types) and describes the first difference.
func sameValues(want, got arrow.Array) string {
	if want.Len() != got.Len() {
		return fmt.Sprintf("length %d, want %d", got.Len(), want.Len())
	}
	if !sameShape(want.DataType(), got.DataType()) {
		return fmt.Sprintf("type %s, want %s", got.DataType(), want.DataType())
	}
	wa, _ := want.MarshalJSON()
	ga, _ := got.MarshalJSON()
	if string(wa) == string(ga) {
		return ""
	}
	for i := 0; i < want.Len(); i++ {
		ws, gs := array.NewSlice(want, int64(i), int64(i+1)), array.NewSlice(got, int64(i), int64(i+1))
		wj, _ := ws.MarshalJSON()
		gj, _ := gs.MarshalJSON()
		ws.Release()
		gs.Release()
		if string(wj) != string(gj) {
			return fmt.Sprintf("row %d = %s, want %s", i, gj, wj)
		}
	}
	return ""
}

func sameShape(a, b arrow.DataType) bool {
	if a.ID() != b.ID() {
		return false
	}
	switch ta := a.(type) {
	case arrow.NestedType:
		tb := b.(arrow.NestedType)
		fa, fb := ta.Fields(), tb.Fields()
		if len(fa) != len(fb) {
			return false
		}
		for i := range fa {
			if !sameShape(fa[i].Type, fb[i].Type) {
				return false
			}
		}
		if l, ok := a.(*arrow.FixedSizeListType); ok && l.Len() != b.(*arrow.FixedSizeListType).Len() {
			return false
		}
		return true
	}
	return arrow.TypeEqual(a, b)
}

func compareTable(t *testing.T, dir, table string) {
	f := openDataFile(t, dir, table)
	sch, want := lanceScan(t, dir, table)
	rec, err := f.ReadAll(context.Background(), nil)
	if err != nil {
		t.Fatalf("%s: read: %v", table, err)
	}
	defer rec.Release()
	for i, fld := range sch.Fields() {
		idx := rec.Schema().FieldIndices(fld.Name)
		if len(idx) != 1 {
			t.Errorf("%s.%s: missing in our read", table, fld.Name)
			continue
		}
		if d := sameValues(want[i], rec.Column(idx[0])); d != "" {
			t.Errorf("%s.%s: %s", table, fld.Name, d)
		}
	}
	// Streaming in small batches equals the one-shot read.
	r, err := f.NewReader(context.Background(), ReadOptions{BatchRows: 777})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	row := 0
	for r.Next() {
		b := r.RecordBatch()
		for c := 0; c < int(b.NumCols()); c++ {
			exp := array.NewSlice(rec.Column(c), int64(row), int64(row)+b.NumRows())
			if !array.Equal(exp, b.Column(c)) {
				t.Errorf("%s: batch at row %d column %s differs from full read", table, row, b.ColumnName(c))
			}
			exp.Release()
		}
		row += int(b.NumRows())
	}
	if r.Err() != nil || row != int(f.NumRows()) {
		t.Fatalf("%s: streamed %d rows, err %v", table, row, r.Err())
	}
	// Random takes equal the rows of real Lance's scan.
	rng := rand.New(rand.NewPCG(1, uint64(len(table))))
	rows := make([]uint64, 120)
	for i := range rows {
		rows[i] = rng.Uint64N(f.NumRows())
	}
	rows = append(rows, 0, f.NumRows()-1, rows[3])
	tk, err := f.Take(context.Background(), rows, nil)
	if err != nil {
		t.Fatalf("%s: take: %v", table, err)
	}
	defer tk.Release()
	for i, fld := range sch.Fields() {
		idx := tk.Schema().FieldIndices(fld.Name)
		if len(idx) != 1 {
			continue
		}
		parts := make([]arrow.Array, len(rows))
		for k, r := range rows {
			parts[k] = array.NewSlice(want[i], int64(r), int64(r)+1)
		}
		w, err := array.Concatenate(parts, memory.DefaultAllocator)
		releaseAll(parts)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameValues(w, tk.Column(idx[0])); d != "" {
			t.Errorf("%s.%s: take: %s", table, fld.Name, d)
		}
		w.Release()
	}
}

func TestOracleTables(t *testing.T) {
	dir := oracleTables(t)
	tables := []string{"types", "layouts", "comp", "pages", "types20", "dict", "longlist"}
	sort.Strings(tables)
	for _, tb := range tables {
		t.Run(tb, func(t *testing.T) { compareTable(t, dir, tb) })
	}
}
