package lancefile

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Take reads only the chunks holding the rows of mini-block pages without
// repetition, and only the rows of full-zip pages, not whole pages.
func TestTakeReadsOnlyNeededChunks(t *testing.T) {
	dir := oracleTables(t)
	checkTakeBytes(t, dir, "pages", []string{"id", "emb"}, 1500)          // bitpacked int64, FSL<f32,16> mini-block
	checkTakeBytes(t, dir, "layouts", []string{"bigstr", "vec128"}, 1500) // full-zip variable (rep index) and fixed
	checkTakeBytes(t, dir, "types", []string{"tags"}, 2500)               // list<string>: mini-block repetition index
	for _, row := range []uint64{0, 1, 1023, 2999} {
		checkTakeBytes(t, dir, "layouts", []string{"nested_list", "list_struct", "list_i32"}, row)
	}
}

// openCounting opens the data file of an oracle table through a reader
// that counts the bytes read, and returns the ids of the top-level fields
// named.
func openCounting(t *testing.T, dir, table string, names ...string) (*File, *countingReader, []int32) {
	t.Helper()
	lf := openDataFile(t, dir, table)
	data, err := os.ReadFile(lf.Name())
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{r: bytes.NewReader(data)}
	f, err := Open(cr, int64(len(data)), lf.Name())
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for _, n := range names {
		for _, fl := range f.Fields() {
			if fl.GetName() == n && fl.GetParentId() < 0 {
				ids = append(ids, fl.GetId())
			}
		}
	}
	return f, cr, ids
}

func checkTakeBytes(t *testing.T, dir, table string, names []string, row uint64) {
	f, cr, ids := openCounting(t, dir, table, names...)
	want, err := f.ReadAll(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	for k, id := range ids {
		// Bytes of the pages holding the row, over the field's leaf columns.
		pageBytes := int64(0)
		var leaves func(id int32)
		leaves = func(id int32) {
			if ci := f.ColumnForField(id); ci >= 0 {
				start := uint64(0)
				for _, pg := range f.Columns[ci].Meta.GetPages() {
					if row >= start && row < start+pg.GetLength() {
						for _, s := range pg.GetBufferSizes() {
							pageBytes += int64(s)
						}
					}
					start += pg.GetLength()
				}
				return
			}
			for _, k := range f.Children(id) {
				leaves(k.GetId())
			}
		}
		leaves(id)
		cr.bytes = 0
		rec, err := f.Take(context.Background(), []uint64{row}, []int32{id})
		if err != nil {
			t.Fatal(err)
		}
		w := array.NewSlice(want.Column(want.Schema().FieldIndices(names[k])[0]), int64(row), int64(row)+1)
		if !array.Equal(w, rec.Column(0)) {
			t.Fatalf("%s.%s row %d = %v (%s), want %v (%s)", table, names[k], row, rec.Column(0), rec.Column(0).DataType(), w, w.DataType())
		}
		w.Release()
		rec.Release()
		limit := pageBytes / 4 // big pages: a small fraction
		if pageBytes < 64<<10 {
			limit = pageBytes // small pages: chunk table and index weigh in
		}
		if cr.bytes >= limit {
			t.Fatalf("%s.%s: take of one row read %d bytes, the page is %d", table, names[k], cr.bytes, pageBytes)
		}
		t.Logf("%s.%s: take read %d of %d page bytes", table, names[k], cr.bytes, pageBytes)
	}
}

// ChunkReads (decode only the chunks or rows a batch needs) returns the
// same rows as whole-page reads, for every layout real Lance writes
// (mini-block with and without repetition, full-zip fixed, variable and
// repeated), at batch sizes that cut through chunks and pages, and the
// same values as real Lance's scan of the table.
func TestChunkReadsEqualWholePages(t *testing.T) {
	dir := oracleTables(t)
	for _, table := range []string{"types", "layouts", "comp", "pages", "dict", "longlist"} {
		f := openDataFile(t, dir, table)
		sch, lance := lanceScan(t, dir, table)
		want, err := f.ReadAll(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int{7, 1000} {
			r, err := f.NewReader(context.Background(), ReadOptions{BatchRows: batch, ChunkReads: true})
			if err != nil {
				t.Fatal(err)
			}
			var at int64
			for r.Next() {
				rec := r.RecordBatch()
				for c := 0; c < int(rec.NumCols()); c++ {
					w := array.NewSlice(want.Column(c), at, at+rec.NumRows())
					if !sameRows(w, rec.Column(c)) {
						t.Fatalf("%s column %s rows [%d,%d) batch %d: chunk reads differ from the whole page: %v want %v", table, rec.Schema().Field(c).Name, at, at+rec.NumRows(), batch, rec.Column(c), w)
					}
					w.Release()
					name := rec.Schema().Field(c).Name
					if i := sch.FieldIndices(name); len(i) == 1 {
						lw := array.NewSlice(lance[i[0]], at, at+rec.NumRows())
						if d := sameValues(lw, rec.Column(c)); d != "" {
							t.Fatalf("%s column %s rows [%d,%d) batch %d: chunk reads differ from real Lance's scan: %s", table, name, at, at+rec.NumRows(), batch, d)
						}
						lw.Release()
					} else {
						t.Fatalf("%s: column %s not in real Lance's scan", table, name)
					}
				}
				at += rec.NumRows()
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%s batch %d: %v", table, batch, err)
			}
			r.Release()
			if at != want.NumRows() {
				t.Fatalf("%s: chunk reads returned %d rows, want %d", table, at, want.NumRows())
			}
		}
		want.Release()
		releaseAll(lance)
	}
}

// sameRows compares two arrays row by row; dictionary arrays by their
// values (each read batch builds its own dictionary).
func sameRows(a, b arrow.Array) bool {
	if _, ok := a.DataType().(*arrow.DictionaryType); !ok {
		return array.Equal(a, b)
	}
	if a.Len() != b.Len() {
		return false
	}
	for i := 0; i < a.Len(); i++ {
		if a.ValueStr(i) != b.ValueStr(i) {
			return false
		}
	}
	return true
}

// A batch of ChunkReads over a list column whose rows span several
// mini-block chunks (real Lance's "longlist" table) reads the chunks of its
// own rows, through the chunk where its last row ends, not on to the end
// of the page: over the whole scan, one row per batch, each chunk is read
// once, and again only by a batch whose row starts in it.
func TestChunkReadsStopAtTheirLastRow(t *testing.T) {
	f, cr, ids := openCounting(t, oracleTables(t), "longlist", "ll")
	id := ids[0]
	want, err := f.ReadAll(context.Background(), []int32{id})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	var colBytes int64
	var leaves func(id int32)
	leaves = func(id int32) {
		if ci := f.ColumnForField(id); ci >= 0 {
			for _, pg := range f.Columns[ci].Meta.GetPages() {
				for _, s := range pg.GetBufferSizes() {
					colBytes += int64(s)
				}
			}
			return
		}
		for _, k := range f.Children(id) {
			leaves(k.GetId())
		}
	}
	leaves(id)
	cr.bytes = 0
	r, err := f.NewReader(context.Background(), ReadOptions{FieldIDs: []int32{id}, BatchRows: 1, ChunkReads: true, ChunkWindow: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var at int64
	for r.Next() {
		rec := r.RecordBatch()
		w := array.NewSlice(want.Column(0), at, at+rec.NumRows())
		if !array.Equal(w, rec.Column(0)) {
			t.Fatalf("row %d differs from the whole page", at)
		}
		w.Release()
		at += rec.NumRows()
	}
	if err := r.Err(); err != nil || at != want.NumRows() {
		t.Fatalf("read %d rows of %d: %v", at, want.NumRows(), err)
	}
	// Each batch may read again the chunk it shares with the previous
	// row (no read-ahead window here); lance's mini-block chunks hold at
	// most 8 KiB.
	if limit := colBytes + at*(8<<10); cr.bytes > limit {
		t.Fatalf("one row per batch read %d bytes, over %d (the column's pages hold %d)", cr.bytes, limit, colBytes)
	}
	t.Logf("one row per batch read %d bytes for %d bytes of pages", cr.bytes, colBytes)
}
