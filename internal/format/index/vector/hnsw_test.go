package vector

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// A graph built over random points finds each point's true nearest
// neighbours (recall@10 of a level-by-level search with ef=64), every node
// is on level 0, and level counts nest.
func TestBuildHNSWRecall(t *testing.T) {
	const n, dim = 600, 8
	r := rand.New(rand.NewPCG(3, 4))
	pts := make([]float32, n*dim)
	for i := range pts {
		pts[i] = r.Float32()
	}
	dist := func(a, b uint32) float32 {
		var s float32
		for i := 0; i < dim; i++ {
			d := pts[int(a)*dim+i] - pts[int(b)*dim+i]
			s += d * d
		}
		return s
	}
	g := buildHNSW(n, 7, 12, 100, dist, rand.New(rand.NewPCG(1, 1)))
	if g.levelCount[0] != n {
		t.Fatalf("level 0 holds %d of %d nodes", g.levelCount[0], n)
	}
	for l := 1; l < len(g.levelCount); l++ {
		if g.levelCount[l] > g.levelCount[l-1] {
			t.Fatalf("level %d has %d nodes, level %d only %d", l, g.levelCount[l], l-1, g.levelCount[l-1])
		}
	}
	offs := g.levelOffsets()
	if len(offs) != 8 || offs[0] != 0 || offs[1] != n {
		t.Fatalf("level offsets %v", offs)
	}
	g.ef = 64
	hits := 0
	for q := uint32(0); q < 100; q++ {
		ep := hnswEdge{0, dist(q, 0)}
		for l := g.maxLevel - 1; l > 0; l-- {
			ep = g.greedy(q, ep, l)
		}
		found := map[uint32]bool{}
		if ep.id != q {
			found[ep.id] = true
		}
		for _, e := range g.search(q, ep, 0) {
			found[e.id] = true
		}
		all := make([]hnswEdge, 0, n)
		for i := uint32(0); i < n; i++ {
			if i != q {
				all = append(all, hnswEdge{i, dist(q, i)})
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].dist < all[j].dist })
		for _, e := range all[:10] {
			if found[e.id] {
				hits++
			}
		}
	}
	if recall := float64(hits) / 1000; recall < 0.95 {
		t.Fatalf("recall@10 %.3f", recall)
	}
}
