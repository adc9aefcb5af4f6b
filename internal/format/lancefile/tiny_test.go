package lancefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The tiny files are data files lance 8.0.0 wrote for testdata/tiny.mjs
// (300 rows); their expected values follow the generator's formulas.

func openTiny(t testing.TB, name string) (*File, []byte) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		t.Fatal(err)
	}
	return f, data
}

// tinyRow renders row i as arrow-go's JSON of the generator's values.
// In format 2.0 struct validity is not stored: a null struct reads back as
// a struct of nulls.
func tinyRow(i int, v20 bool) map[string]string {
	r := map[string]string{"id": fmt.Sprint(i)}
	r["s"] = "null"
	if i%7 != 0 {
		r["s"] = fmt.Sprintf("%q", fmt.Sprintf("str%d", i))
	}
	r["b"] = "null"
	if i%5 != 0 {
		r["b"] = fmt.Sprint(i%2 == 0)
	}
	switch {
	case i%6 == 0:
		r["l"] = "null"
	case i%6 == 1:
		r["l"] = "[]"
	case i%4 == 0:
		r["l"] = fmt.Sprintf("[%d,null]", i)
	default:
		r["l"] = fmt.Sprintf("[%d,%d]", i, i+1)
	}
	r["st"] = "null"
	if v20 {
		r["st"] = `{"x":null,"y":null}`
	}
	if i%9 != 0 {
		r["st"] = fmt.Sprintf(`{"x":%d,"y":"y%d"}`, i, i)
	}
	r["v"] = fmt.Sprintf("[%d,%d,%d,%d]", i, i+1, i+2, i+3)
	r["cat"] = fmt.Sprintf("%q", []string{"a", "b", "c"}[i%3])
	return r
}

func checkTinyRecord(t *testing.T, rec arrow.RecordBatch, rows []int, v20 bool) {
	t.Helper()
	if int(rec.NumRows()) != len(rows) {
		t.Fatalf("%d rows, want %d", rec.NumRows(), len(rows))
	}
	for c, fld := range rec.Schema().Fields() {
		col := rec.Column(c)
		for k, i := range rows {
			s := array.NewSlice(col, int64(k), int64(k)+1)
			raw, _ := s.MarshalJSON()
			s.Release()
			var jb bytes.Buffer
			_ = json.Compact(&jb, raw)
			j := jb.Bytes()
			want := "[" + tinyRow(i, v20)[fld.Name] + "]"
			if string(j) != want {
				t.Fatalf("%s row %d = %s, want %s", fld.Name, i, j, want)
			}
		}
	}
}

func TestTinyFiles(t *testing.T) {
	for _, name := range []string{"tiny21.lance", "tiny20.lance"} {
		t.Run(name, func(t *testing.T) {
			f, _ := openTiny(t, name)
			if f.NumRows() != 300 {
				t.Fatalf("rows = %d", f.NumRows())
			}
			rec, err := f.ReadAll(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			all := make([]int, 300)
			for i := range all {
				all[i] = i
			}
			checkTinyRecord(t, rec, all, f.Format == Format20)
			rows := []uint64{299, 0, 7, 7, 150, 1}
			tk, err := f.Take(context.Background(), rows, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tk.Release()
			checkTinyRecord(t, tk, []int{299, 0, 7, 7, 150, 1}, f.Format == Format20)
			// Projection by field id, with offset/limit.
			st := f.Field(5)
			if st == nil || st.GetName() != "st" {
				t.Fatalf("field 5 = %v", st)
			}
			r, err := f.NewReader(context.Background(), ReadOptions{FieldIDs: []int32{5, 0}, BatchRows: 64, Offset: 10, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			got := 0
			for r.Next() {
				b := r.RecordBatch()
				if b.Schema().Field(0).Name != "id" || b.Schema().Field(1).Name != "st" {
					t.Fatalf("projection schema %s", b.Schema())
				}
				rows := make([]int, b.NumRows())
				for k := range rows {
					rows[k] = 10 + got + k
				}
				checkTinyRecord(t, b, rows, f.Format == Format20)
				got += int(b.NumRows())
			}
			if r.Err() != nil || got != 100 {
				t.Fatalf("read %d rows, err %v", got, r.Err())
			}
		})
	}
}

func TestRefuseUnknownVersion(t *testing.T) {
	_, data := openTiny(t, "tiny21.lance")
	for _, v := range [][2]byte{{2, 2}, {0, 2}, {3, 0}} {
		d := bytes.Clone(data)
		n := len(d)
		d[n-8], d[n-6] = v[0], v[1]
		d[n-7], d[n-5] = 0, 0
		_, err := Open(bytes.NewReader(d), int64(n), "x.lance")
		if !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("version %d.%d: err %v, want ErrUnsupportedVersion", v[0], v[1], err)
		}
		if !bytes.Contains([]byte(err.Error()), []byte("x.lance")) {
			t.Fatalf("error does not name the file: %v", err)
		}
	}
}

func TestCorruptPageNamesColumnAndPage(t *testing.T) {
	f, data := openTiny(t, "tiny21.lance")
	// Corrupt the chunk table of column 1 (s): claim a huge chunk.
	pg := f.Columns[1].Meta.GetPages()[0]
	off := pg.GetBufferOffsets()[0]
	d := bytes.Clone(data)
	d[off], d[off+1] = 0xF0, 0xFF
	g, err := Open(bytes.NewReader(d), int64(len(d)), "bad.lance")
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.ReadAll(context.Background(), []int32{1})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	for _, s := range []string{"bad.lance", "column 1", "page 0"} {
		if !bytes.Contains([]byte(err.Error()), []byte(s)) {
			t.Fatalf("error %q does not name %q", err, s)
		}
	}
}

type countingReader struct {
	r     *bytes.Reader
	bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.bytes += int64(len(p))
	return c.r.ReadAt(p, off)
}
