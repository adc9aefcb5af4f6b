package vector

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// vectorColumn builds a fixed-size list column of n dim-vectors from gen.
func vectorColumn(t *testing.T, n, dim int, gen func() float32) arrow.Array {
	t.Helper()
	b := array.NewFixedSizeListBuilder(memory.DefaultAllocator, int32(dim), arrow.PrimitiveTypes.Float32)
	defer b.Release()
	vb := b.ValueBuilder().(*array.Float32Builder)
	for i := 0; i < n; i++ {
		b.Append(true)
		for j := 0; j < dim; j++ {
			vb.Append(gen())
		}
	}
	return b.NewArray()
}

// TestDriftCounts: with a model of four centroids at (±2, ±2, 0...) and a
// reference sample drawn around them, about 1% of new rows from the same
// distribution are far (the 0.99 quantile), and every row of a
// distribution shifted away from every centroid is; the far rows are
// counted from the distances assignment computes, under L2 and dot, over
// PQ codes (whose decoded residuals a shift would not show) and FLAT.
func TestDriftCounts(t *testing.T) {
	const dim = 8
	centroids := make([]float32, 4*dim)
	for p := 0; p < 4; p++ {
		centroids[p*dim] = float32(2 - 4*(p&1))
		centroids[p*dim+1] = float32(2 - 4*(p>>1))
	}
	for _, tc := range []struct {
		name  string
		quant Quantization
		dot   bool
	}{{"flat_l2", QuantFlat, false}, {"pq_l2", QuantPQ, false}, {"flat_dot", QuantFlat, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Model{x: &IndexFile{Type: "IVF_FLAT"}, s: &StorageFile{Quantization: tc.quant}, dim: dim, parts: 4, centroids: centroids, dot: tc.dot, codeWidth: 4 * dim}
			if tc.quant == QuantPQ {
				// 2 sub-vectors of 4 values, 256 entries each, all small:
				// every residual decodes to a short one.
				m.s.PQBits, m.s.PQSubVectors, m.codeWidth, m.residual = 8, 2, 2, !tc.dot
				m.book = make([]float32, 2*256*4)
				r := rand.New(rand.NewPCG(3, 4))
				for i := range m.book {
					m.book[i] = float32(r.NormFloat64() * 0.1)
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			around := func(shift float32) func() float32 {
				i := 0
				return func() float32 {
					// Coordinate 0 and 1 pick a centroid; the rest is noise.
					v := float32(r.NormFloat64() * 0.5)
					switch i % dim {
					case 0, 1:
						v += float32(2 - 4*r.IntN(2))
					}
					i++
					return v + shift
				}
			}
			ref := m.NewDriftReference()
			col := vectorColumn(t, 5000, dim, around(0))
			if err := ref.Add(col); err != nil {
				t.Fatal(err)
			}
			col.Release()
			if ref.Len() != 5000 || ref.Bound() <= 0 && !tc.dot {
				t.Fatalf("reference of %d rows, bound %v", ref.Len(), ref.Bound())
			}
			count := func(gen func() float32) (uint64, uint64) {
				d := m.NewDelta()
				d.Workers = 2
				d.SetDriftBound(ref.Bound())
				col := vectorColumn(t, 4000, dim, gen)
				defer col.Release()
				ids := make([]uint64, 4000)
				for i := range ids {
					ids[i] = uint64(i)
				}
				if err := d.Add(ids, col); err != nil {
					t.Fatal(err)
				}
				return d.Far, d.Rows
			}
			far, rows := count(around(0))
			if rows != 4000 || far < 10 || far > 100 {
				t.Fatalf("in-distribution: %d of %d far, want about 1%%", far, rows)
			}
			shifted := around(6)
			if tc.dot {
				// Dot distance 1 - x·c falls along any centroid's
				// direction, so a shift lowers it for some; vectors near
				// the origin are far from every centroid.
				shifted = func() float32 { return float32(r.NormFloat64() * 0.01) }
			}
			far, rows = count(shifted)
			t.Logf("%s: in-distribution bound %v; shifted %d of %d far", tc.name, ref.Bound(), far, rows)
			if rows != 4000 || far < 3900 {
				t.Fatalf("shifted: %d of %d far, want nearly all", far, rows)
			}
			if d := m.NewDelta(); d.Far != 0 {
				t.Fatal("a delta without a bound counts far rows")
			}
		})
	}
}

// TestQuantile: nearest-rank quantiles.
func TestQuantile(t *testing.T) {
	xs := make([]float32, 100)
	for i := range xs {
		xs[i] = float32(100 - i)
	}
	if q := quantile(xs, 0.99); q != 99 {
		t.Fatalf("0.99 quantile of 1..100 = %v, want 99", q)
	}
	if q := quantile([]float32{5}, 0.99); q != 5 {
		t.Fatalf("quantile of one value = %v", q)
	}
}
