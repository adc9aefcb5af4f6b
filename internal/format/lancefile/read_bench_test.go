package lancefile

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

func arrayBytes(a arrow.ArrayData) int {
	n := 0
	for _, b := range a.Buffers() {
		if b != nil {
			n += b.Len()
		}
	}
	for _, c := range a.Children() {
		n += arrayBytes(c)
	}
	return n
}

// BenchmarkReadFile decodes every column of a lance 8.0.0 file (the tiny
// seeds, or LANCEFILE_BENCH_FILE) into Arrow; MB/s counts decoded Arrow
// bytes and x_memcpy compares with copying that many bytes in the same run.
func BenchmarkReadFile(b *testing.B) {
	name := os.Getenv("LANCEFILE_BENCH_FILE")
	if name == "" {
		name = "testdata/tiny21.lance"
	}
	data, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	f, err := Open(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		b.Fatal(err)
	}
	out := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec, err := f.ReadAll(context.Background(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			for _, c := range rec.Columns() {
				out += arrayBytes(c.Data())
			}
		}
		rec.Release()
	}
	b.StopTimer()
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	src, dst := make([]byte, out), make([]byte, out)
	reps := 0
	start := time.Now()
	for time.Since(start) < 50*time.Millisecond {
		copy(dst, src)
		reps++
	}
	b.ReportMetric(per/(float64(time.Since(start).Nanoseconds())/float64(reps)), "x_memcpy")
	b.SetBytes(int64(out))
}
