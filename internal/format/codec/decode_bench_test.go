package codec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Decode benchmarks report MB/s of decoded output and x_memcpy: decode time
// divided by the time of a plain copy of the same number of output bytes,
// measured in the same run.

var sinkBytes []byte

func memcpyNsPerOp(n int) float64 {
	src := make([]byte, n)
	dst := make([]byte, n)
	copy(dst, src)
	reps := 0
	start := time.Now()
	for time.Since(start) < 50*time.Millisecond {
		for i := 0; i < 16; i++ {
			copy(dst, src)
		}
		reps += 16
	}
	sinkBytes = dst
	return float64(time.Since(start).Nanoseconds()) / float64(reps)
}

func reportVsMemcpy(b *testing.B, outBytes int) {
	b.StopTimer()
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	mc := memcpyNsPerOp(outBytes)
	if mc > 0 {
		b.ReportMetric(per/mc, "x_memcpy")
	}
	b.SetBytes(int64(outBytes))
}

func BenchmarkDecodeInlineBitpacked(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, w := range []int{1, 3, 10, 17, 32} {
		b.Run(fmt.Sprintf("T32/W%d", w), func(b *testing.B) {
			var vals [1024]uint32
			for i := range vals {
				vals[i] = uint32(rng.Uint64() & (1<<w - 1))
			}
			chunks := 64
			var bufs [][]byte
			for c := 0; c < chunks; c++ {
				bufs = append(bufs, AppendInlineBitpacked[uint32](nil, vals[:]))
			}
			out := make([]uint32, 0, 1024*chunks)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out = out[:0]
				for _, c := range bufs {
					out, _ = DecodeInlineBitpacked[uint32](out, c, 1024)
				}
			}
			reportVsMemcpy(b, 4*1024*chunks)
		})
	}
	b.Run("T64/W40", func(b *testing.B) {
		var vals [1024]uint64
		for i := range vals {
			vals[i] = rng.Uint64() & (1<<40 - 1)
		}
		buf := AppendInlineBitpacked[uint64](nil, vals[:])
		out := make([]uint64, 0, 1024*64)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			out = out[:0]
			for c := 0; c < 64; c++ {
				out, _ = DecodeInlineBitpacked[uint64](out, buf, 1024)
			}
		}
		reportVsMemcpy(b, 8*1024*64)
	})
}

func BenchmarkDecodeOutOfLineLevels(b *testing.B) {
	vals := make([]uint16, 1024*64)
	for i := range vals {
		vals[i] = uint16(i % 3 / 2)
	}
	buf := AppendOutOfLineBitpacked[uint16](nil, vals, 1)
	out := make([]uint16, 0, len(vals))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = DecodeOutOfLineBitpacked[uint16](out[:0], buf, 1, len(vals))
	}
	reportVsMemcpy(b, 2*len(vals))
}

func benchStrings(n int) [][]byte {
	words := []string{"lance", "columnar", "format", "object", "storage", "compaction", "the", "of", "and"}
	rng := rand.New(rand.NewPCG(2, 2))
	out := make([][]byte, n)
	for i := range out {
		var s bytes.Buffer
		for k := 0; k < 8; k++ {
			s.WriteString(words[rng.IntN(len(words))])
			s.WriteByte(' ')
		}
		out[i] = s.Bytes()
	}
	return out
}

func BenchmarkDecodeFSST(b *testing.B) {
	strs := benchStrings(4096)
	enc := TrainFSST(strs)
	var comp [][]byte
	total := 0
	for _, s := range strs {
		comp = append(comp, enc.AppendEncode(nil, s))
		total += len(s)
	}
	dec, err := NewFSSTDecoder(enc.Table())
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, 0, total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out = out[:0]
		for _, c := range comp {
			out, _ = dec.Decode(out, c)
		}
	}
	reportVsMemcpy(b, total)
}

func generalFrames(b *testing.B) (raw, lz, zs []byte) {
	var buf bytes.Buffer
	for _, s := range benchStrings(20000) {
		buf.Write(s)
	}
	raw = buf.Bytes()
	lzb := make([]byte, lz4.CompressBlockBound(len(raw)))
	n, err := lz4.CompressBlock(raw, lzb, nil)
	if err != nil {
		b.Fatal(err)
	}
	lz = append([]byte{byte(len(raw)), byte(len(raw) >> 8), byte(len(raw) >> 16), byte(len(raw) >> 24)}, lzb[:n]...)
	e, _ := zstd.NewWriter(nil)
	zs = append(make([]byte, 8), e.EncodeAll(raw, nil)...)
	for i := 0; i < 8; i++ {
		zs[i] = byte(uint64(len(raw)) >> (8 * i))
	}
	return raw, lz, zs
}

func BenchmarkDecompress(b *testing.B) {
	raw, lz, zs := generalFrames(b)
	for _, c := range []struct {
		name   string
		scheme Scheme
		frame  []byte
	}{{"lz4", SchemeLZ4, lz}, {"zstd", SchemeZSTD, zs}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				out, err := Decompress(c.scheme, c.frame)
				if err != nil || len(out) != len(raw) {
					b.Fatal(err)
				}
			}
			reportVsMemcpy(b, len(raw))
		})
	}
}

func BenchmarkDecodeRLE(b *testing.B) {
	var vals []byte
	var runs []byte
	n := 0
	for v := 0; n < 1<<16; v++ {
		vals = append(vals, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		runs = append(runs, 100)
		n += 100
	}
	out := make([]uint32, 0, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = DecodeRLE[uint32](out[:0], vals, runs, n)
	}
	reportVsMemcpy(b, 4*n)
}

func BenchmarkDecodeByteStreamSplit(b *testing.B) {
	n := 1 << 16
	src := make([]byte, 4*n)
	out := make([]byte, 0, 4*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = DecodeByteStreamSplit(out[:0], src, 4, n)
	}
	reportVsMemcpy(b, 4*n)
}
