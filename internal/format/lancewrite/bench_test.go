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
	cb := newCopyBench(b)
	b.Run("copy_columns", func(b *testing.B) {
		cb.run(b, []string{"a.lance", "b.lance"}, func(dst io.Writer, srcs []CopySource) error {
			_, err := CopyColumns(context.Background(), dst, srcs, cb.all)
			return err
		})
	})
	b.Run("concat_rows", func(b *testing.B) {
		cb.run(b, []string{"a.lance", "c.lance"}, func(dst io.Writer, srcs []CopySource) error {
			_, err := ConcatRows(context.Background(), dst, srcs...)
			return err
		})
	})
}

// copyBench is BenchmarkCopy's input: files of the bench columns (a.lance
// and c.lance hold columns 0-3, b.lance columns 4-6, 32 Ki rows each) in
// dir, and the table's fields.
type copyBench struct {
	dir   string
	all   []*filepb.Field
	files map[string]*tablepb.DataFile
}

func newCopyBench(b *testing.B) *copyBench {
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
	all, err := FieldsFromArrow(arrow.NewSchema(fieldsAll, nil), 0)
	if err != nil {
		b.Fatal(err)
	}
	cb := &copyBench{dir: b.TempDir(), all: all, files: map[string]*tablepb.DataFile{}}
	writeFile := func(name string, idx []int) {
		var fs []arrow.Field
		var arrs []arrow.Array
		var lf []*filepb.Field
		for _, i := range idx {
			fs = append(fs, fieldsAll[i])
			arrs = append(arrs, arrays[i])
			lf = append(lf, fieldsOf(all, fieldsAll[i].Name)...)
		}
		f, err := os.Create(filepath.Join(cb.dir, name))
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
		cb.files[name] = &tablepb.DataFile{Fields: res.Fields, ColumnIndices: res.ColumnIndices}
	}
	writeFile("a.lance", []int{0, 1, 2, 3})
	writeFile("b.lance", []int{4, 5, 6})
	writeFile("c.lance", []int{0, 1, 2, 3})
	return cb
}

// open opens file name of the bench as a copy source.
func (cb *copyBench) open(b *testing.B, name string) (CopySource, func()) {
	p := filepath.Join(cb.dir, name)
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	st, _ := f.Stat()
	return CopySource{R: f, Size: st.Size(), Name: p, File: cb.files[name]}, func() { f.Close() }
}

// cpFiles times a plain copy of the named files into one output file.
func (cb *copyBench) cpFiles(b *testing.B, names ...string) time.Duration {
	start := time.Now()
	out, err := os.Create(filepath.Join(cb.dir, "cp.out"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		in, err := os.Open(filepath.Join(cb.dir, n))
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

// run benchmarks op writing one output file from the named files (opened
// as srcs), and reports its time per run as a multiple of cpFiles of the
// same files (x_cp).
func (cb *copyBench) run(b *testing.B, names []string, op func(dst io.Writer, srcs []CopySource) error) {
	var total int64
	var srcs []CopySource
	for _, n := range names {
		s, closeFn := cb.open(b, n)
		defer closeFn()
		srcs = append(srcs, s)
		total += s.Size
	}
	var base time.Duration
	for i := 0; i < 3; i++ {
		base += cb.cpFiles(b, names...)
	}
	base /= 3
	b.SetBytes(total)
	b.ResetTimer()
	for b.Loop() {
		out, err := os.Create(filepath.Join(cb.dir, "copy.out"))
		if err != nil {
			b.Fatal(err)
		}
		if err := op(out, srcs); err != nil {
			b.Fatal(err)
		}
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(base), "x_cp")
}

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
