package oracle

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// BenchmarkDigest digests a 200k-row batch (int64, utf8, list<int32>,
// struct, fixed_size_list) and reports its cost as a multiple of copying
// the same Arrow buffers (x_memcpy), measured in the same run.
func BenchmarkDigest(b *testing.B) {
	rec := sampleRecord(b, arrow.BinaryTypes.String, 200_000, nil)
	defer rec.Release()
	var bufs [][]byte
	var total int
	var collect func(d arrow.ArrayData)
	collect = func(d arrow.ArrayData) {
		for _, buf := range d.Buffers() {
			if buf != nil {
				bufs = append(bufs, buf.Bytes())
				total += buf.Len()
			}
		}
		for _, c := range d.Children() {
			collect(c)
		}
	}
	for _, c := range rec.Columns() {
		collect(c.Data())
	}
	dst := make([][]byte, len(bufs))
	for i, src := range bufs {
		dst[i] = make([]byte, len(src))
	}
	b.SetBytes(int64(total))
	b.ResetTimer()
	var digestTime, copyTime time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		_ = DigestRecords(rec.Schema(), []arrow.RecordBatch{rec})
		digestTime += time.Since(t0)
		t1 := time.Now()
		for j, src := range bufs {
			copy(dst[j], src)
		}
		copyTime += time.Since(t1)
	}
	if copyTime > 0 {
		b.ReportMetric(float64(digestTime)/float64(copyTime), "x_memcpy")
	}
}
