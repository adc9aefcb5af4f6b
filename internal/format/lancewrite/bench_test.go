package lancewrite

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// memcpyTime is the time one copy of n bytes takes in this run (the
// baseline the encode and copy benchmarks report their ratio against).
func memcpyTime(n int) time.Duration {
	src := make([]byte, n)
	dst := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	const reps = 20
	start := time.Now()
	for i := 0; i < reps; i++ {
		copy(dst, src)
	}
	return time.Since(start) / reps
}

type benchCol struct {
	name  string
	field arrow.Field
	build func(b array.Builder, i int, r *rand.Rand)
}

func benchColumns() []benchCol {
	words := strings.Fields("the quick brown fox jumps over the lazy dog lance table fragment compaction")
	return []benchCol{
		{"int64_bitpacked", arrow.Field{Name: "v", Type: arrow.PrimitiveTypes.Int64}, func(b array.Builder, i int, r *rand.Rand) {
			b.(*array.Int64Builder).Append(int64(r.IntN(1 << 20)))
		}},
		{"float64_flat", arrow.Field{Name: "v", Type: arrow.PrimitiveTypes.Float64}, func(b array.Builder, i int, r *rand.Rand) {
			b.(*array.Float64Builder).Append(r.Float64())
		}},
		{"int32_nullable", arrow.Field{Name: "v", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, func(b array.Builder, i int, r *rand.Rand) {
			if i%7 == 0 {
				b.AppendNull()
				return
			}
			b.(*array.Int32Builder).Append(int32(r.IntN(1000)))
		}},
		{"string_fsst", arrow.Field{Name: "v", Type: arrow.BinaryTypes.String}, func(b array.Builder, i int, r *rand.Rand) {
			var s strings.Builder
			for k := 0; k < 3+r.IntN(6); k++ {
				s.WriteString(words[r.IntN(len(words))])
				s.WriteByte(' ')
			}
			b.(*array.StringBuilder).Append(s.String())
		}},
		{"string_dictionary", arrow.Field{Name: "v", Type: arrow.BinaryTypes.String}, func(b array.Builder, i int, r *rand.Rand) {
			b.(*array.StringBuilder).Append(words[r.IntN(8)])
		}},
		{"vector128_fullzip", arrow.Field{Name: "v", Type: arrow.FixedSizeListOf(128, arrow.PrimitiveTypes.Float32)}, func(b array.Builder, i int, r *rand.Rand) {
			fb := b.(*array.FixedSizeListBuilder)
			fb.Append(true)
			vb := fb.ValueBuilder().(*array.Float32Builder)
			for k := 0; k < 128; k++ {
				vb.Append(r.Float32())
			}
		}},
		{"list_int32", arrow.Field{Name: "v", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}, func(b array.Builder, i int, r *rand.Rand) {
			lb := b.(*array.ListBuilder)
			lb.Append(true)
			for k := 0; k < r.IntN(5); k++ {
				lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
			}
		}},
	}
}

func benchRecord(c benchCol, rows int) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{c.field}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < rows; i++ {
		c.build(rb.Field(0), i, r)
	}
	return rb.NewRecordBatch()
}

// BenchmarkEncode reports encode throughput per encoding and its ratio to a
// memcpy of the same (Arrow) bytes in the same run ("x_memcpy": how many
// times slower than memcpy).
func BenchmarkEncode(b *testing.B) {
	for _, c := range benchColumns() {
		b.Run(c.name, func(b *testing.B) {
			rows := 1 << 18
			if c.name == "vector128_fullzip" {
				rows = 1 << 14
			}
			rec := benchRecord(c, rows)
			defer rec.Release()
			fields, err := FieldsFromArrow(rec.Schema(), 0)
			if err != nil {
				b.Fatal(err)
			}
			n := int(dataBytes(rec.Column(0).Data()))
			base := memcpyTime(n)
			var out int64
			b.SetBytes(int64(n))
			b.ResetTimer()
			for b.Loop() {
				w, err := NewWriter(io.Discard, fields, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Write(rec); err != nil {
					b.Fatal(err)
				}
				res, err := w.Close()
				if err != nil {
					b.Fatal(err)
				}
				out = res.Size
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per)/float64(base), "x_memcpy")
			b.ReportMetric(float64(out)/float64(n), "size_ratio")
		})
	}
}

// BenchmarkCopy reports ConcatRows and CopyColumns throughput on files on
// disk and the ratio to a plain byte copy (cp) of the same files in the
// same run ("x_cp").
func BenchmarkCopy(b *testing.B) {
	dir := b.TempDir()
	cols := benchColumns()
	var fieldsAll []arrow.Field
	for i, c := range cols {
		f := c.field
		f.Name = fmt.Sprintf("c%d", i)
		fieldsAll = append(fieldsAll, f)
	}
	rows := 1 << 15
	var arrays []arrow.Array
	for _, c := range cols {
		rec := benchRecord(c, rows)
		arrays = append(arrays, rec.Column(0))
		rec.Column(0).Retain()
		rec.Release()
	}
	schema := arrow.NewSchema(fieldsAll, nil)
	all, err := FieldsFromArrow(schema, 0)
	if err != nil {
		b.Fatal(err)
	}
	writeFile := func(name string, idx []int) (string, *tablepb.DataFile) {
		var fs []arrow.Field
		var arrs []arrow.Array
		var lf []*filepb.Field
		for _, i := range idx {
			fs = append(fs, fieldsAll[i])
			arrs = append(arrs, arrays[i])
			lf = append(lf, fieldsOf(all, fieldsAll[i].Name)...)
		}
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w, err := NewWriter(f, lf, Options{})
		if err != nil {
			b.Fatal(err)
		}
		rec := array.NewRecordBatch(arrow.NewSchema(fs, nil), arrs, int64(rows))
		defer rec.Release()
		if err := w.Write(rec); err != nil {
			b.Fatal(err)
		}
		res, err := w.Close()
		if err != nil {
			b.Fatal(err)
		}
		return p, &tablepb.DataFile{Fields: res.Fields, ColumnIndices: res.ColumnIndices}
	}
	pa, da := writeFile("a.lance", []int{0, 1, 2, 3})
	pb, db := writeFile("b.lance", []int{4, 5, 6})
	pc, dc := writeFile("c.lance", []int{0, 1, 2, 3})
	open := func(p string, df *tablepb.DataFile) (CopySource, func()) {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		st, _ := f.Stat()
		return CopySource{R: f, Size: st.Size(), Name: p, File: df}, func() { f.Close() }
	}
	cpFiles := func(paths ...string) time.Duration {
		start := time.Now()
		out, err := os.Create(filepath.Join(dir, "cp.out"))
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range paths {
			in, err := os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(out, in); err != nil {
				b.Fatal(err)
			}
			in.Close()
		}
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	run := func(b *testing.B, paths []string, op func(dst io.Writer) error) {
		var total int64
		for _, p := range paths {
			st, _ := os.Stat(p)
			total += st.Size()
		}
		var base time.Duration
		for i := 0; i < 3; i++ {
			base += cpFiles(paths...)
		}
		base /= 3
		b.SetBytes(total)
		b.ResetTimer()
		for b.Loop() {
			out, err := os.Create(filepath.Join(dir, "copy.out"))
			if err != nil {
				b.Fatal(err)
			}
			if err := op(out); err != nil {
				b.Fatal(err)
			}
			if err := out.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(base), "x_cp")
	}
	b.Run("copy_columns", func(b *testing.B) {
		sa, ca := open(pa, da)
		defer ca()
		sb, cb := open(pb, db)
		defer cb()
		run(b, []string{pa, pb}, func(dst io.Writer) error {
			_, err := CopyColumns(context.Background(), dst, []CopySource{sa, sb}, all)
			return err
		})
	})
	b.Run("concat_rows", func(b *testing.B) {
		sa, ca := open(pa, da)
		defer ca()
		sc, cc := open(pc, dc)
		defer cc()
		run(b, []string{pa, pc}, func(dst io.Writer) error {
			_, err := ConcatRows(context.Background(), dst, sa, sc)
			return err
		})
	})
}

// fieldsOf returns the top-level field name and its descendants.
func fieldsOf(all []*filepb.Field, name string) []*filepb.Field {
	keep := map[int32]bool{}
	var out []*filepb.Field
	for _, f := range all {
		if (f.ParentId < 0 && f.Name == name) || (f.ParentId >= 0 && keep[f.ParentId]) {
			keep[f.Id] = true
			out = append(out, f)
		}
	}
	return out
}
