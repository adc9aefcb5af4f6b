package vector

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// OpenTestFile opens a Lance file for a test (closed when it ends); exported
// for the package's external tests.
func OpenTestFile(t *testing.T, p string) *lancefile.File {
	t.Helper()
	return lancefiletest.Open(t, p)
}

// loadLanceGraph loads partition p's graph the way lance's HNSW::load does.
func loadLanceGraph(t *testing.T, x *IndexFile, p int, dist func(a, b uint32) float32) *hnswGraph {
	t.Helper()
	rec, err := x.ReadPartition(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var md struct {
		LevelOffsets []int `json:"level_offsets"`
		Params       struct {
			MaxLevel int `json:"max_level"`
			M        int `json:"m"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(x.PartitionMeta[p]), &md); err != nil {
		t.Fatal(err)
	}
	n := md.LevelOffsets[1]
	g := &hnswGraph{maxLevel: md.Params.MaxLevel, m: md.Params.M, dist: dist}
	g.levels = make([][][]hnswEdge, n)
	nl := len(md.LevelOffsets) - 1
	for i := range g.levels {
		g.levels[i] = make([][]hnswEdge, nl)
	}
	ids := rec.Column(0).(*array.Uint32)
	nbs := rec.Column(1).(*array.List)
	nbv := nbs.ListValues().(*array.Uint32)
	for l := 0; l < nl; l++ {
		for r := md.LevelOffsets[l]; r < md.LevelOffsets[l+1]; r++ {
			a, b := nbs.ValueOffsets(r)
			var es []hnswEdge
			for k := a; k < b; k++ {
				es = append(es, hnswEdge{nbv.Value(int(k)), 0})
			}
			g.levels[ids.Value(r)][l] = es
		}
	}
	return g
}

// TestHNSWGraphQualityOracle: over the storage real Lance wrote for
// IVF_HNSW_SQ and IVF_HNSW_PQ, the graph we build finds a random query's
// 10 nearest stored rows (by the storage's own distance, searched as lance
// searches: greedy descent, then ef = k + k/2 on level 0) as often as the
// graph Lance built, loaded as lance loads it (level_offsets slices).
func TestHNSWGraphQualityOracle(t *testing.T) {
	oracle.Require(t)
	for _, typ := range []string{"hnsw_sq", "hnsw_pq"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-4x1000-v32-t0-d0", t.TempDir())
			res := oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "vec", "type": typ, "options": map[string]any{"numPartitions": 4, "numSubVectors": 4}}})
			var r struct {
				Indices []struct {
					UUID string `json:"indexUuid"`
				} `json:"indices"`
			}
			if err := json.Unmarshal(res[0], &r); err != nil || len(r.Indices) != 1 {
				t.Fatalf("create_index result %s: %v", res[0], err)
			}
			compareGraphs(t, filepath.Join(path, "_indices", r.Indices[0].UUID))
		})
	}
}

func compareGraphs(t *testing.T, dir string) {
	x, err := OpenIndexFile(OpenTestFile(t, filepath.Join(dir, IndexFileName)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStorageFile(OpenTestFile(t, filepath.Join(dir, AuxiliaryFileName)))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := newHNSWRebuild(x, s, io.Discard, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	const nq, k = 200, 10
	var hits [2]int
	for p := 0; p < s.NumPartitions(); p++ {
		rec, err := s.ReadPartition(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		src, w, _, err := fixedBytes(rec.Column(1))
		if err != nil {
			t.Fatal(err)
		}
		n := int(rec.NumRows())
		rows := make([]byte, n*w, (n+nq)*w)
		if s.Quantization == QuantPQ {
			untranspose(rows, src, n, w)
		} else {
			copy(rows, src)
		}
		rec.Release()
		// Queries: stored rows' codes, perturbed, appended after the n
		// graph nodes (so the storage distance measures them).
		r := rand.New(rand.NewPCG(9, uint64(p)))
		for i := 0; i < nq; i++ {
			base := r.IntN(n)
			for j := 0; j < w; j++ {
				c := rows[base*w+j]
				if r.IntN(2) == 0 {
					c = byte(r.IntN(256))
				}
				rows = append(rows, c)
			}
		}
		dist := hb.dist(rows, w)
		ours := buildHNSW(n, hb.maxLevel, hb.m, hb.ef, dist, rand.New(rand.NewPCG(1, uint64(p))))
		for gi, g := range []*hnswGraph{loadLanceGraph(t, x, p, dist), ours} {
			g.ef = k + k/2
			for qi := 0; qi < nq; qi++ {
				q := uint32(n + qi)
				ep := hnswEdge{0, dist(q, 0)}
				for l := len(g.levels[0]) - 1; l > 0; l-- {
					ep = g.greedy(q, ep, l)
				}
				found := map[uint32]bool{}
				for _, e := range g.search(q, ep, 0) {
					found[e.id] = true
				}
				all := make([]hnswEdge, n)
				for i := range all {
					all[i] = hnswEdge{uint32(i), dist(q, uint32(i))}
				}
				sort.SliceStable(all, func(i, j int) bool { return all[i].dist < all[j].dist })
				for _, e := range all[:k] {
					if found[e.id] {
						hits[gi]++
					}
				}
			}
		}
	}
	total := float64(s.NumPartitions() * nq * k)
	lance, ours := float64(hits[0])/total, float64(hits[1])/total
	t.Logf("%s graph recall@%d (ef %d): Lance's %.3f, ours %.3f", x.Type, k, k+k/2, lance, ours)
	if ours+0.03 < lance {
		t.Errorf("our graphs find %.3f of the nearest rows, Lance's %.3f", ours, lance)
	}
}
