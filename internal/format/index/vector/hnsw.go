package vector

import (
	"math"
	"math/rand/v2"

	"github.com/lanced-dev/lanced/internal/minheap"
)

// HNSW graph construction for a remapped partition, following lance's
// HnswBuilder (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/hnsw/builder.rs):
// node 0 is the entry point and lives on every level; every other node gets
// level floor(-ln(U) / ln(m)) capped at max_level-1; nodes are inserted in
// id order with a greedy descent to their level, an ef_construction beam
// search per level, the neighbour-selection heuristic of the HNSW paper
// (keep a candidate only if it is closer to the node than to every kept
// neighbour) with at most 2m neighbours on level 0 and m above, and reverse
// edges added when they beat the neighbour's current farthest.

type hnswEdge struct {
	id   uint32
	dist float32
}

type hnswGraph struct {
	maxLevel, m, ef int
	dist            func(a, b uint32) float32
	levels          [][][]hnswEdge // node -> level -> ranked neighbours
	levelCount      []int
}

// buildHNSW builds the graph of n nodes.
func buildHNSW(n, maxLevel, m, ef int, dist func(a, b uint32) float32, rng *rand.Rand) *hnswGraph {
	g := &hnswGraph{maxLevel: maxLevel, m: m, ef: max(ef, 1), dist: dist, levelCount: make([]int, maxLevel)}
	if n == 0 {
		return g
	}
	g.levels = make([][][]hnswEdge, n)
	g.levels[0] = make([][]hnswEdge, maxLevel)
	ml := 1 / math.Log(float64(m))
	for i := 1; i < n; i++ {
		u := 1 - rng.Float64() // (0, 1]
		lvl := min(int(-math.Log(u)*ml), maxLevel-1)
		g.levels[i] = make([][]hnswEdge, lvl+1)
	}
	g.levelCount[0] = 1
	for i := 1; i < n; i++ {
		g.insert(uint32(i))
	}
	return g
}

func (g *hnswGraph) mMax(level int) int {
	if level == 0 {
		return 2 * g.m
	}
	return g.m
}

func (g *hnswGraph) insert(v uint32) {
	target := len(g.levels[v]) - 1
	ep := hnswEdge{0, g.dist(v, 0)}
	for level := g.maxLevel - 1; level > target; level-- {
		ep = g.greedy(v, ep, level)
	}
	pruned := make([][]hnswEdge, target+1)
	for level := target; level >= 0; level-- {
		g.levelCount[level]++
		found := g.search(v, ep, level)
		g.levels[v][level] = append(g.levels[v][level], found...)
		g.prune(v, level)
		pruned[level] = append([]hnswEdge(nil), g.levels[v][level]...)
		ep = found[0]
	}
	for level, es := range pruned {
		for _, e := range es {
			if e.dist < g.cutoff(e.id, level) {
				g.levels[e.id][level] = append(g.levels[e.id][level], hnswEdge{v, e.dist})
				g.prune(e.id, level)
			}
		}
	}
}

func (g *hnswGraph) cutoff(v uint32, level int) float32 {
	ns := g.levels[v][level]
	if len(ns) < g.mMax(level) {
		return float32(math.Inf(1))
	}
	return ns[len(ns)-1].dist
}

// prune keeps at most mMax neighbours chosen by the heuristic, nearest first.
func (g *hnswGraph) prune(v uint32, level int) {
	ns := g.levels[v][level]
	k := g.mMax(level)
	if len(ns) <= k {
		return
	}
	sortEdges(ns)
	kept := make([]hnswEdge, 0, k)
	for _, u := range ns {
		if len(kept) >= k {
			break
		}
		ok := true
		for _, w := range kept {
			if !(u.dist < g.dist(u.id, w.id)) {
				ok = false
				break
			}
		}
		if ok {
			kept = append(kept, u)
		}
	}
	g.levels[v][level] = kept
}

func (g *hnswGraph) greedy(q uint32, ep hnswEdge, level int) hnswEdge {
	cur := ep
	for changed := true; changed; {
		changed = false
		for _, nb := range g.levels[cur.id][level] {
			if d := g.dist(q, nb.id); d < cur.dist {
				cur, changed = hnswEdge{nb.id, d}, true
			}
		}
	}
	return cur
}

// search is the beam search of one level: the ef nearest nodes to q
// reachable from ep, nearest first.
func (g *hnswGraph) search(q uint32, ep hnswEdge, level int) []hnswEdge {
	visited := map[uint32]bool{ep.id: true, q: true}
	cand := minheap.New(func(a, b hnswEdge) bool { return a.dist < b.dist })
	res := minheap.New(func(a, b hnswEdge) bool { return a.dist > b.dist }) // farthest first
	cand.Push(ep)
	res.Push(ep)
	for cand.Len() > 0 {
		c := cand.Pop()
		if res.Len() >= g.ef && c.dist > res.Peek().dist {
			break
		}
		for _, nb := range g.levels[c.id][level] {
			if visited[nb.id] {
				continue
			}
			visited[nb.id] = true
			d := g.dist(q, nb.id)
			if res.Len() < g.ef || d < res.Peek().dist {
				cand.Push(hnswEdge{nb.id, d})
				res.Push(hnswEdge{nb.id, d})
				if res.Len() > g.ef {
					res.Pop()
				}
			}
		}
	}
	out := append([]hnswEdge(nil), res.All()...)
	sortEdges(out)
	return out
}

func sortEdges(es []hnswEdge) {
	// insertion sort is fine for the short lists here, and stable.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].dist < es[j-1].dist; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// levelOffsets is lance's HnswMetadata.level_offsets: the running sum of
// the per-level insert counts (node 0 counted on level 0 only), max_level+1
// entries.
func (g *hnswGraph) levelOffsets() []int {
	out := make([]int, 0, g.maxLevel+1)
	sum := 0
	for _, c := range g.levelCount {
		out = append(out, sum)
		sum += c
	}
	return append(out, sum)
}
