package text

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/testenv/heapwatch"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// BenchmarkFTSRemap remaps a real Lance FTS segment (positions on, 80,000
// rows of about 40 words) dropping every tenth row, and reports the time
// as a ratio to copying the segment's files and the peak heap over the
// segment's size.
func BenchmarkFTSRemap(b *testing.B) {
	oracle.Require(b)
	path := oracle.Build(b, "sized-8x10000-v0-t40-d0", b.TempDir())
	oracle.RunOps(b, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}}})
	seg := indextest.Index(b, indextest.ReadManifest(b, path, oracle.Inspect(b, path, 0).Version), "body_idx")
	dir := indextest.Dir(filepath.Join(path, "_indices", indextest.UUID(b, seg.GetUuid())))
	files, err := dir.Files(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range files {
		size += f.Size
	}
	cp := func() {
		for _, f := range files {
			in, err := os.Open(filepath.Join(string(dir), f.Name))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, in); err != nil {
				b.Fatal(err)
			}
			in.Close()
		}
	}
	rm, _ := index.RemapperFor(index.KindFTS)
	drop := mappingFunc(func(old uint64) (uint64, bool) { return old, old%10 != 0 })
	var remapTime, cpTime time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	peak := heapwatch.Peak(func() {
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := rm.Remap(context.Background(), index.RemapRequest{Segment: seg, Kind: index.KindFTS, Mapping: drop, Old: dir, New: discard{}}); err != nil {
				b.Fatal(err)
			}
			remapTime += time.Since(t0)
			t0 = time.Now()
			cp()
			cpTime += time.Since(t0)
		}
	}, 2*time.Millisecond, heapwatch.HeapInuse)
	b.StopTimer()
	b.ReportMetric(float64(remapTime)/float64(cpTime), "x-cp")
	b.ReportMetric(float64(size)/(1<<20), "segment-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
