package vector

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRQEncodeOracle: real Lance builds an IVF_RQ index (l2, cosine, dot;
// dimensions 32 and 48; 1 to 9 bits per dimension);
// lanced's RaBitQ model, loaded from the segment, encodes every row of the
// table again from its vector. Each row must land in the partition Lance
// put it in with Lance's sign code and Lance's add, scale and error
// factors, and with more than 1 bit Lance's ex code and ex factors
// (float summation order may flip a sign bit near zero or move a
// factor in its last bits; anything more is a bug).
func TestRQEncodeOracle(t *testing.T) {
	oracle.Require(t)
	for _, c := range []struct {
		dt, scenario string
		bits         int
	}{
		{"l2", "sized-1x4000-v32-t0-d0", 1}, {"cosine", "sized-1x4000-v32-t0-d0", 1}, {"dot", "sized-1x4000-v32-t0-d0", 1},
		// 48 is not a power of two: lance's fast rotation alternates
		// head and tail transforms with a Kac's walk.
		{"l2", "sized-1x3000-v48-t0-d0", 1},
		// every ex-code block layout (1 to 8 ex bits); 48 dimensions pad
		// the last 64-dimension block
		{"l2", "sized-1x4000-v32-t0-d0", 2}, {"dot", "sized-1x4000-v32-t0-d0", 3}, {"cosine", "sized-1x4000-v32-t0-d0", 4},
		{"l2", "sized-1x3000-v48-t0-d0", 5}, {"l2", "sized-1x4000-v32-t0-d0", 6}, {"dot", "sized-1x3000-v48-t0-d0", 7},
		{"l2", "sized-1x4000-v32-t0-d0", 8}, {"l2", "sized-1x3000-v48-t0-d0", 9},
	} {
		dt := c.dt
		t.Run(fmt.Sprintf("%s-%s-%dbit", dt, c.scenario, c.bits), func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, c.scenario, t.TempDir())
			oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "vec", "type": "ivf_rq", "options": map[string]any{"numPartitions": 4, "distanceType": dt, "numBits": c.bits}}})
			v := oracle.Inspect(t, path, 0).Version
			m, s := segmentModel(t, path, v)
			if (m.exWidth > 0) != (c.bits > 1) || m.factors != map[bool]int{true: 5, false: 3}[c.bits > 1] {
				t.Fatalf("%d bits: model with %d ex-code bytes and %d factors", c.bits, m.exWidth, m.factors)
			}
			ours := encodeVectors(t, m, path, v)
			nf, ew := m.factors, m.exWidth
			var rows, samePart, sameCode, closeFactors int
			var worst float64
			for p := 0; p < s.NumPartitions(); p++ {
				rec, err := s.ReadPartition(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				b := baseRows(s, rec, nf, ew)
				if b == nil {
					t.Fatalf("partition %d unreadable", p)
				}
				cw := m.codeWidth
				for i, id := range b.ids {
					rows++
					o, ok := ours[id]
					if !ok {
						t.Fatalf("row %d of Lance's partition %d not encoded", id, p)
					}
					if o.part != p {
						continue
					}
					samePart++
					if bytes.Equal(o.code, append(slices.Clone(b.codes[i*cw:(i+1)*cw]), b.ex[i*ew:(i+1)*ew]...)) {
						sameCode++
					}
					ok = true
					for k := 0; k < nf; k++ {
						l := float64(b.factors[i*nf+k])
						diff := math.Abs(float64(o.factors[k])-l) / math.Max(math.Abs(l), 1e-3)
						worst = math.Max(worst, diff)
						ok = ok && diff < 1e-5
					}
					if ok {
						closeFactors++
					}
				}
				rec.Release()
			}
			t.Logf("%s: %d rows; same partition %d, same code %d, factors within 1e-5 %d (worst relative difference %.2g)", dt, rows, samePart, sameCode, closeFactors, worst)
			if rows != len(ours) || samePart < rows*995/1000 || sameCode < samePart*99/100 || closeFactors < samePart*99/100 {
				t.Fatal(fmt.Sprintf("%d rows encoded, %d in Lance's index: same partition %d, same code %d, close factors %d", len(ours), rows, samePart, sameCode, closeFactors))
			}
		})
	}
}

// segmentModel loads lanced's Model of the vec_idx segment of the table at
// path, version v, and the segment's storage.
func segmentModel(t *testing.T, path string, v uint64) (*Model, *StorageFile) {
	t.Helper()
	ix := indextest.Index(t, indextest.ReadManifest(t, path, v), "vec_idx")
	u, err := uuid.FromBytes(ix.GetUuid().GetUuid())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(path, format.IndicesDir, u.String())
	x, err := OpenIndexFile(lancefiletest.Open(t, filepath.Join(dir, IndexFileName)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStorageFile(lancefiletest.Open(t, filepath.Join(dir, AuxiliaryFileName)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(x, s)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// rqEncoding is one row as an IVF_RQ index holds it: its partition, its
// code (sign code then ex code) and its factors.
type rqEncoding struct {
	part    int
	code    []byte
	factors []float32
}

// encodeVectors encodes every row of vec in the table at path, version v,
// with m, by row address.
func encodeVectors(t *testing.T, m *Model, path string, v uint64) map[uint64]rqEncoding {
	t.Helper()
	d := m.NewDelta()
	tbl := oracle.ScanWith(t, path, oracle.ScanOptions{Version: v, Columns: []string{"vec"}, WithRowAddr: true})
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 1000)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		var addrs []uint64
		vi := -1
		for i, f := range rec.Schema().Fields() {
			switch f.Name {
			case "_rowaddr":
				addrs = rec.Column(i).(*array.Uint64).Uint64Values()
			case "vec":
				vi = i
			}
		}
		if err := d.Add(addrs, rec.Column(vi)); err != nil {
			t.Fatal(err)
		}
	}
	nf, ew := m.factors, m.exWidth
	ours := map[uint64]rqEncoding{}
	for p := range d.ids {
		for i, id := range d.ids[p] {
			code := append(slices.Clone(d.codes[p][i*m.codeWidth:(i+1)*m.codeWidth]), d.ex[p][i*ew:(i+1)*ew]...)
			ours[id] = rqEncoding{p, code, d.factors[p][i*nf : (i+1)*nf]}
		}
	}
	return ours
}
