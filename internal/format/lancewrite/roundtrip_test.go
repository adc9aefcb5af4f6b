package lancewrite

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// testSchema covers every shape the writer handles.
func testSchema(structs bool) *arrow.Schema {
	f := func(name string, t arrow.DataType) arrow.Field {
		return arrow.Field{Name: name, Type: t, Nullable: true}
	}
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		f("i8", arrow.PrimitiveTypes.Int8), f("u16", arrow.PrimitiveTypes.Uint16),
		f("i32", arrow.PrimitiveTypes.Int32), f("u64", arrow.PrimitiveTypes.Uint64),
		f("f32", arrow.PrimitiveTypes.Float32), f("f64", arrow.PrimitiveTypes.Float64),
		f("flag", arrow.FixedWidthTypes.Boolean), f("s", arrow.BinaryTypes.String),
		f("ls", arrow.BinaryTypes.LargeString), f("bin", arrow.BinaryTypes.Binary),
		f("long", arrow.BinaryTypes.String), f("cat", arrow.BinaryTypes.String),
		f("d32", arrow.FixedWidthTypes.Date32), f("ts", arrow.FixedWidthTypes.Timestamp_us),
		f("dec", &arrow.Decimal128Type{Precision: 18, Scale: 2}),
		f("vec4", arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)),
		f("vec96", arrow.FixedSizeListOf(96, arrow.PrimitiveTypes.Float32)),
		f("li", arrow.ListOf(arrow.PrimitiveTypes.Int32)),
		f("lstr", arrow.ListOf(arrow.BinaryTypes.String)),
		f("nested", arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int64))),
		f("none", arrow.PrimitiveTypes.Int32),
		f("run", arrow.PrimitiveTypes.Int32), f("konst", arrow.PrimitiveTypes.Int64),
		f("llong", arrow.ListOf(arrow.BinaryTypes.String)),
	}
	if structs {
		st := arrow.StructOf(f("a", arrow.PrimitiveTypes.Int32), f("b", arrow.BinaryTypes.String))
		fields = append(fields, f("st", st), f("lst", arrow.ListOf(st)))
	}
	return arrow.NewSchema(fields, nil)
}

// fill appends one random value (or null) to b.
func fill(b array.Builder, r *rand.Rand, name string, row int, nullP float64, structNulls bool) {
	if name == "none" || (name != "id" && r.Float64() < nullP) {
		if _, ok := b.(*array.StructBuilder); ok && !structNulls {
			// fall through: 2.0 stores no struct validity
		} else {
			b.AppendNull()
			return
		}
	}
	switch b := b.(type) {
	case *array.Int64Builder:
		switch name {
		case "id":
			b.Append(int64(row))
		case "konst":
			b.Append(42)
		default:
			b.Append(r.Int64N(1000) - 500)
		}
	case *array.Int8Builder:
		b.Append(int8(r.IntN(256) - 128))
	case *array.Uint16Builder:
		b.Append(uint16(r.IntN(300)))
	case *array.Int32Builder:
		if name == "run" {
			b.Append(int32(row / 50))
		} else {
			b.Append(int32(r.Uint32()))
		}
	case *array.Uint64Builder:
		b.Append(r.Uint64())
	case *array.Float32Builder:
		b.Append(r.Float32())
	case *array.Float64Builder:
		b.Append(float64(row) / 4)
	case *array.BooleanBuilder:
		b.Append(r.IntN(2) == 0)
	case *array.StringBuilder:
		switch name {
		case "long", "llong.item":
			b.Append(strings.Repeat(fmt.Sprintf("row %d ", row), 30+r.IntN(60)))
		case "cat":
			b.Append([]string{"red", "green", "blue"}[r.IntN(3)])
		default:
			b.Append(strings.Repeat("lance ", r.IntN(5)) + fmt.Sprint(row))
		}
	case *array.LargeStringBuilder:
		b.Append(fmt.Sprintf("large-%d", r.IntN(1000)))
	case *array.BinaryBuilder:
		v := make([]byte, r.IntN(12))
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		b.Append(v)
	case *array.Date32Builder:
		b.Append(arrow.Date32(10000 + row))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(1_700_000_000_000_000 + int64(row)*1001))
	case *array.Decimal128Builder:
		b.Append(decimal128.FromI64(int64(row)*12345 - 99999))
	case *array.FixedSizeListBuilder:
		b.Append(true)
		vb := b.ValueBuilder().(*array.Float32Builder)
		n := b.Type().(*arrow.FixedSizeListType).Len()
		for k := 0; k < int(n); k++ {
			if r.Float64() < nullP/4 {
				vb.AppendNull()
			} else {
				vb.Append(float32(row) + float32(k)/8)
			}
		}
	case *array.ListBuilder:
		b.Append(true)
		n := r.IntN(4)
		for k := 0; k < n; k++ {
			fill(b.ValueBuilder(), r, name+".item", row, nullP, structNulls)
		}
	case *array.StructBuilder:
		b.Append(true)
		st := b.Type().(*arrow.StructType)
		for i := 0; i < st.NumFields(); i++ {
			fill(b.FieldBuilder(i), r, st.Field(i).Name, row, nullP, structNulls)
		}
	default:
		panic(fmt.Sprintf("fill: %T", b))
	}
}

func randomRecords(schema *arrow.Schema, seed uint64, batches, rows int, nullP float64, structNulls bool) []arrow.RecordBatch {
	r := rand.New(rand.NewPCG(seed, 99))
	var out []arrow.RecordBatch
	row := 0
	for k := 0; k < batches; k++ {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for i := 0; i < rows; i++ {
			for c, f := range schema.Fields() {
				fill(rb.Field(c), r, f.Name, row, nullP, structNulls)
			}
			row++
		}
		out = append(out, rb.NewRecordBatch())
		rb.Release()
	}
	return out
}

// roundTrip writes recs, reads them back with lancefile, and returns a diff.
func roundTrip(t testing.TB, schema *arrow.Schema, recs []arrow.RecordBatch, opts Options) string {
	t.Helper()
	fields, err := FieldsFromArrow(schema, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, fields, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(buf.Len()) {
		t.Fatalf("Result.Size %d, wrote %d", res.Size, buf.Len())
	}
	return diffFile(t, buf.Bytes(), schema, recs)
}

// diffFile reads the data file b with lancefile and diffs it against recs.
func diffFile(t testing.TB, b []byte, schema *arrow.Schema, recs []arrow.RecordBatch) string {
	t.Helper()
	f, err := lancefile.Open(bytes.NewReader(b), int64(len(b)), "roundtrip.lance")
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.ReadAll(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	want := array.NewTableFromRecords(schema, recs)
	defer want.Release()
	gt := array.NewTableFromRecords(got.Schema(), []arrow.RecordBatch{got})
	defer gt.Release()
	return oracle.Diff(want, gt)
}

func TestRoundTripThroughReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"v2_1", Options{}},
		{"v2_1_small_pages", Options{PageBytes: 8 << 10}},
		{"v2_0", Options{Version: V2_0}},
		{"v2_0_small_pages", Options{Version: V2_0, PageBytes: 8 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			structNulls := tc.opts.Version != V2_0
			schema := testSchema(true)
			for _, nullP := range []float64{0, 0.2, 1} {
				recs := randomRecords(schema, 1, 3, 700, nullP, structNulls)
				if d := roundTrip(t, schema, recs, tc.opts); d != "" {
					t.Fatalf("null probability %.1f: %s", nullP, d)
				}
			}
		})
	}
}

func FuzzWriterRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint16(10), uint8(20), false)
	f.Add(uint64(2), uint16(1500), uint8(255), true)
	f.Add(uint64(3), uint16(0), uint8(0), false)
	f.Fuzz(func(t *testing.T, seed uint64, rows uint16, nulls uint8, v20 bool) {
		opts := Options{PageBytes: 4 << 10}
		if v20 {
			opts.Version = V2_0
		}
		schema := testSchema(true)
		recs := randomRecords(schema, seed, 2, int(rows%2000), float64(nulls)/255, !v20)
		if d := roundTrip(t, schema, recs, opts); d != "" {
			t.Fatal(d)
		}
	})
}
