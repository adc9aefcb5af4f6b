package lancefile

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// Take reads only the chunks holding the rows of mini-block pages without
// repetition, not whole pages.
func TestTakeReadsOnlyNeededChunks(t *testing.T) {
	dir := oracleTables(t)
	lf := openDataFile(t, dir, "pages")
	data, err := os.ReadFile(lf.Name())
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{r: bytes.NewReader(data)}
	f, err := Open(cr, int64(len(data)), lf.Name())
	if err != nil {
		t.Fatal(err)
	}
	want, err := f.ReadAll(context.Background(), []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	for _, id := range []int32{0, 1} { // id: bitpacked int64; emb: FSL<f32,16>
		ci := f.ColumnForField(id)
		pg := f.Columns[ci].Meta.GetPages()[0]
		pageBytes := int64(0)
		for _, s := range pg.GetBufferSizes() {
			pageBytes += int64(s)
		}
		cr.bytes = 0
		rec, err := f.Take(context.Background(), []uint64{1500}, []int32{id})
		if err != nil {
			t.Fatal(err)
		}
		w := array.NewSlice(want.Column(int(id)), 1500, 1501)
		if !array.Equal(w, rec.Column(0)) {
			t.Fatalf("field %d row 1500 = %v, want %v", id, rec.Column(0), w)
		}
		w.Release()
		rec.Release()
		if cr.bytes*4 >= pageBytes {
			t.Fatalf("field %d: take of one row read %d bytes, the page is %d", id, cr.bytes, pageBytes)
		}
		t.Logf("field %d: take read %d of %d page bytes", id, cr.bytes, pageBytes)
	}
}
