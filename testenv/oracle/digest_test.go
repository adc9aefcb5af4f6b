package oracle

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// sampleRecord builds one batch with nested, variable and fixed-width
// columns; strType picks the string column's offset width.
func sampleRecord(t testing.TB, strType arrow.DataType, n int, mutate func(i int, s string) string) arrow.RecordBatch {
	t.Helper()
	st := arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: strType, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "li", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "st", Type: st, Nullable: true},
		{Name: "fsl", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float32), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		s := strings.Repeat("x", i%5)
		if mutate != nil {
			s = mutate(i, s)
		}
		switch sb := b.Field(1).(type) {
		case *array.StringBuilder:
			if i%7 == 6 {
				sb.AppendNull()
			} else {
				sb.Append(s)
			}
		case *array.LargeStringBuilder:
			if i%7 == 6 {
				sb.AppendNull()
			} else {
				sb.Append(s)
			}
		default:
			t.Fatalf("unexpected builder %T", sb)
		}
		if i%9 == 8 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float64Builder).Append(float64(i) / 3)
		}
		lb := b.Field(3).(*array.ListBuilder)
		if i%4 == 3 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for k := 0; k < i%4; k++ {
				lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
			}
		}
		sbld := b.Field(4).(*array.StructBuilder)
		if i%6 == 5 {
			sbld.AppendNull()
		} else {
			sbld.Append(true)
			sbld.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
			sbld.FieldBuilder(1).(*array.StringBuilder).Append("v")
		}
		fb := b.Field(5).(*array.FixedSizeListBuilder)
		fb.Append(true)
		for k := 0; k < 3; k++ {
			fb.ValueBuilder().(*array.Float32Builder).Append(float32(i * k))
		}
	}
	return b.NewRecordBatch()
}

func tableOf(rec arrow.RecordBatch, chunk int64) arrow.Table {
	var recs []arrow.RecordBatch
	for off := int64(0); off < rec.NumRows(); off += chunk {
		end := min(off+chunk, rec.NumRows())
		recs = append(recs, rec.NewSlice(off, end))
	}
	tbl := array.NewTableFromRecords(rec.Schema(), recs)
	for _, r := range recs {
		r.Release()
	}
	return tbl
}

func TestDigestIndependentOfChunkingAndOffsetWidth(t *testing.T) {
	rec := sampleRecord(t, arrow.BinaryTypes.String, 100, nil)
	defer rec.Release()
	large := sampleRecord(t, arrow.BinaryTypes.LargeString, 100, nil)
	defer large.Release()
	want := DigestRecords(rec.Schema(), []arrow.RecordBatch{rec})
	for _, chunk := range []int64{1, 7, 33, 100} {
		tbl := tableOf(rec, chunk)
		got := Digest(tbl)
		tbl.Release()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("chunk %d: column %s digest changed", chunk, k)
			}
		}
	}
	gotLarge := DigestRecords(large.Schema(), []arrow.RecordBatch{large})
	for k, v := range want {
		if gotLarge[k] != v {
			t.Errorf("utf8 vs large_utf8: column %s digest changed", k)
		}
	}
	a, b := tableOf(rec, 13), tableOf(large, 50)
	defer a.Release()
	defer b.Release()
	if d := Diff(a, b); d != "" {
		t.Errorf("Diff of equal tables: %s", d)
	}
}

func TestDigestDetectsChanges(t *testing.T) {
	rec := sampleRecord(t, arrow.BinaryTypes.String, 50, nil)
	defer rec.Release()
	changed := sampleRecord(t, arrow.BinaryTypes.String, 50, func(i int, s string) string {
		if i == 40 {
			return s + "!"
		}
		return s
	})
	defer changed.Release()
	d1 := DigestRecords(rec.Schema(), []arrow.RecordBatch{rec})
	d2 := DigestRecords(changed.Schema(), []arrow.RecordBatch{changed})
	if d1["s"] == d2["s"] {
		t.Fatalf("changed value, same digest")
	}
	for _, k := range []string{"id", "f", "li", "st", "fsl"} {
		if d1[k] != d2[k] {
			t.Errorf("column %s changed though its data did not", k)
		}
	}
	short := rec.NewSlice(0, 49)
	defer short.Release()
	if DigestRecords(rec.Schema(), []arrow.RecordBatch{short})["id"] == d1["id"] {
		t.Errorf("dropping a row kept the digest")
	}

	a, b := tableOf(rec, 10), tableOf(changed, 10)
	defer a.Release()
	defer b.Release()
	diff := Diff(a, b)
	if !strings.Contains(diff, `column "s"`) || !strings.Contains(diff, "row 40") {
		t.Errorf("diff does not point at column s row 40:\n%s", diff)
	}
	if strings.Contains(diff, `column "id"`) {
		t.Errorf("diff names an unchanged column:\n%s", diff)
	}
}

func TestDigestNullVsEmptyAndTypes(t *testing.T) {
	mk := func(dt arrow.DataType, vals []string, valid []bool) arrow.Table {
		schema := arrow.NewSchema([]arrow.Field{{Name: "c", Type: dt, Nullable: true}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		switch fb := b.Field(0).(type) {
		case *array.StringBuilder:
			fb.AppendValues(vals, valid)
		case *array.BinaryBuilder:
			bs := make([][]byte, len(vals))
			for i, v := range vals {
				bs[i] = []byte(v)
			}
			fb.AppendValues(bs, valid)
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		return array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	}
	empty := mk(arrow.BinaryTypes.String, []string{"", "a"}, []bool{true, true})
	null := mk(arrow.BinaryTypes.String, []string{"", "a"}, []bool{false, true})
	bin := mk(arrow.BinaryTypes.Binary, []string{"", "a"}, []bool{true, true})
	defer empty.Release()
	defer null.Release()
	defer bin.Release()
	if Digest(empty)["c"] == Digest(null)["c"] {
		t.Errorf("empty string and null digest alike")
	}
	if Digest(empty)["c"] == Digest(bin)["c"] {
		t.Errorf("utf8 and binary digest alike")
	}
}

func TestDigestByKeyIgnoresRowOrder(t *testing.T) {
	rec := sampleRecord(t, arrow.BinaryTypes.String, 60, nil)
	defer rec.Release()
	// Same rows, second half first.
	a, b := rec.NewSlice(30, 60), rec.NewSlice(0, 30)
	defer a.Release()
	defer b.Release()
	swapped := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{a, b})
	defer swapped.Release()
	orig := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
	defer orig.Release()

	if Diff(orig, swapped) == "" {
		t.Fatalf("scan-order Diff missed a reordering")
	}
	d1, err := DigestByKey(orig, "id")
	if err != nil {
		t.Fatal(err)
	}
	d2, err := DigestByKey(swapped, "id")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d1 {
		if d2[k] != v {
			t.Errorf("column %s: DigestByKey depends on row order", k)
		}
	}
	EqualByKey(t, orig, swapped, "id")

	changed := sampleRecord(t, arrow.BinaryTypes.String, 60, func(i int, s string) string {
		if i == 10 {
			return "changed"
		}
		return s
	})
	defer changed.Release()
	ct := array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{changed})
	defer ct.Release()
	wo, _ := keyOrder(orig, "id")
	co, _ := keyOrder(ct, "id")
	msg := diffOrdered(orig, ct, wo, co, "id")
	if !strings.Contains(msg, `column "s"`) || !strings.Contains(msg, "id 10 / 10") {
		t.Errorf("diff does not name id 10 in column s:\n%s", msg)
	}
	if _, err := DigestByKey(orig, "f"); err == nil {
		t.Errorf("a float key with nulls was accepted")
	}
}
