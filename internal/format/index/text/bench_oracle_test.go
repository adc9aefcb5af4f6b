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

// BenchmarkFTSRemap remaps real Lance FTS segments (positions on, 40,000,
// 80,000 and 160,000 rows of about 40 words, one partition each) dropping
// every tenth row, and reports the time as a ratio to copying the
// segment's files, the segment's size, and the peak heap and the peak
// resident set size (over the resident set before) while remapping:
// memory follows the largest posting list, not the segment.
func BenchmarkFTSRemap(b *testing.B) {
	oracle.Require(b)
	for _, rows := range []string{"4x10000", "8x10000", "16x10000"} {
		b.Run(rows, func(b *testing.B) { benchFTSRemap(b, "sized-"+rows+"-v0-t40-d0") })
	}
}

func benchFTSRemap(b *testing.B, scenario string) {
	path := oracle.Build(b, scenario, b.TempDir())
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
	var peak uint64
	b.SetBytes(size)
	b.ResetTimer()
	rss, before, rssOK := heapwatch.PeakRSS(func() {
		peak = heapwatch.Peak(func() {
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
	})
	b.StopTimer()
	b.ReportMetric(float64(remapTime)/float64(cpTime), "x-cp")
	b.ReportMetric(float64(size)/(1<<20), "segment-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	if rssOK {
		b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
		b.ReportMetric(float64(before)/(1<<20), "rss-before-MiB")
	}
}
