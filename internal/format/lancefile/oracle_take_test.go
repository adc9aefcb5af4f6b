package lancefile

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// Take reads only the chunks holding the rows of mini-block pages without
// repetition, and only the rows of full-zip pages, not whole pages.
func TestTakeReadsOnlyNeededChunks(t *testing.T) {
	dir := oracleTables(t)
	checkTakeBytes(t, dir, "pages", []string{"id", "emb"}, 1500)          // bitpacked int64, FSL<f32,16> mini-block
	checkTakeBytes(t, dir, "layouts", []string{"bigstr", "vec128"}, 1500) // full-zip variable (rep index) and fixed
}

func checkTakeBytes(t *testing.T, dir, table string, names []string, row uint64) {
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
	want, err := f.ReadAll(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	for k, id := range ids {
		ci := f.ColumnForField(id)
		pg := f.Columns[ci].Meta.GetPages()[0]
		pageBytes := int64(0)
		for _, s := range pg.GetBufferSizes() {
			pageBytes += int64(s)
		}
		cr.bytes = 0
		rec, err := f.Take(context.Background(), []uint64{row}, []int32{id})
		if err != nil {
			t.Fatal(err)
		}
		w := array.NewSlice(want.Column(k), int64(row), int64(row)+1)
		if !array.Equal(w, rec.Column(0)) {
			t.Fatalf("%s.%s row %d = %v, want %v", table, names[k], row, rec.Column(0), w)
		}
		w.Release()
		rec.Release()
		if cr.bytes*4 >= pageBytes {
			t.Fatalf("%s.%s: take of one row read %d bytes, the page is %d", table, names[k], cr.bytes, pageBytes)
		}
		t.Logf("%s.%s: take read %d of %d page bytes", table, names[k], cr.bytes, pageBytes)
	}
}
