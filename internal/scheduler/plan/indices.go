package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// Actions of an IndexDecision.
const (
	// IndexUntouched: the plan rewrites no fragment the index covers.
	IndexUntouched = "untouched"
	// IndexBitmapOnly: stable row ids; the index keeps covering the rows
	// through a fragment-bitmap update, no index file is rewritten.
	IndexBitmapOnly = "bitmap-only"
	// IndexRemap: the index files are rewritten for the new row addresses
	// and committed with the rewrite.
	IndexRemap = "remap"
	// IndexUnindexed: index_coverage = unindex; the rewritten rows are left
	// unindexed (flat-scanned) until the index is optimized.
	IndexUnindexed = "unindexed"
	// IndexKeep: the index blocks rewrites of the fragments it covers.
	IndexKeep = "keep"
	// IndexDeferred: index_coverage = defer; the rewrite is recorded in
	// the table's fragment reuse index and no index file is rewritten.
	IndexDeferred = "deferred"
)

// IndexDecision says what the plan does to one index (all segments of one
// name).
type IndexDecision struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Segments int    `json:"segments"`
	Action   string `json:"action"`
	// Covered are the existing fragments the index covers; Rewritten are
	// those the plan rewrites.
	Covered   []uint64 `json:"covered"`
	Rewritten []uint64 `json:"rewritten,omitempty"`
	Reason    string   `json:"reason"`
	// CatchUp says what happens to the rows the index does not cover.
	CatchUp *CatchUp `json:"catch_up,omitempty"`
	// RemapParts, for a remapped index, is the part tasks its segments'
	// remaps are split into (index.remap_part_bytes); 0 when each is one
	// task.
	RemapParts int `json:"remap_parts,omitempty"`
}

// noteRemapParts says, for every remapped index of a kind that remaps in
// parts, how many part tasks its segments' remaps are split into: about
// the files' recorded bytes / index.remap_part_bytes each (the engine
// makes the same cut at commit time, no more parts than the segment has
// IVF partitions or btree pages).
func noteRemapParts(ic *indexCoverage, ds []IndexDecision, partBytes policy.Setting[uint64]) {
	_, segs := nameGroups(ic)
	for i := range ds {
		d := &ds[i]
		if d.Action != IndexRemap {
			continue
		}
		var notes []string
		for _, s := range segs[d.Name] {
			if _, ok := index.PartRemapperFor(ic.kinds[s]); !ok {
				continue
			}
			size := job.SegmentBytes(ic.metas[s])
			if n := job.RemapParts(size, partBytes.Value); n > 1 {
				d.RemapParts += n
				by := "IVF partition range"
				if ic.kinds[s] == index.KindBTree {
					by = "page range"
				}
				notes = append(notes, fmt.Sprintf("segment %s (%d bytes) in %d part tasks by %s", (&index.Segment{Meta: ic.metas[s]}).UUID(), size, n, by))
			}
		}
		if len(notes) > 0 {
			d.Reason += fmt.Sprintf("; remap of %s, over index.remap_part_bytes %d (%s), joined by page copy", strings.Join(notes, ", "), partBytes.Value, partBytes.Source)
		}
	}
}

// Remappable reports whether lanced remaps indices of the kind after a
// rewrite in address mode (a remapper is registered for it).
func Remappable(k index.Kind) bool {
	_, ok := index.RemapperFor(k)
	return ok
}

// setBlocking decides, per index segment, whether the fragments it covers
// stay out of rewrites, and why. unremappable are segments (by uuid) whose
// remap failed for good.
func setBlocking(ic *indexCoverage, mode string, stable bool, unremappable map[string]string) {
	for i, k := range ic.kinds {
		switch {
		case k.IsSystem():
			ic.blocks[i] = fmt.Sprintf("system index %s: lanced does not rewrite fragments it covers", k)
		case stable:
			// Row ids survive a rewrite: bitmap-only in every mode.
		case mode == policy.CoverageKeep:
			ic.blocks[i] = "index_coverage = keep"
		case ic.reuseErr != "" && (mode == policy.CoverageRemap || mode == policy.CoverageDefer):
			ic.blocks[i] = "the table's fragment reuse index cannot be read (" + ic.reuseErr + "), so what the index covers is unknown"
		case mode == policy.CoverageDefer && index.Deferrable(k):
			if ic.maps[i] == nil {
				ic.blocks[i] = "index_coverage = defer, but the index records no fragment bitmap (a reuse version cannot be matched to it)"
			}
		case ic.behind[i] && (mode == policy.CoverageRemap || mode == policy.CoverageDefer):
			ic.blocks[i] = fmt.Sprintf("index_coverage = %s, but the segment's files still hold row addresses from before a deferred compaction (a fragment reuse version), which lanced does not remap through; let Lance's optimize() or createIndex(replace) rebuild the index", mode)
		case mode == policy.CoverageRemap || mode == policy.CoverageDefer:
			// Under defer, a kind real Lance does not read through the
			// reuse index everywhere is remapped in the same commit.
			if why, ok := unremappable[(&index.Segment{Meta: ic.metas[i]}).UUID()]; ok {
				ic.blocks[i] = why
			} else if err := index.CanRemap(ic.metas[i]); err != nil {
				ic.blocks[i] = fmt.Sprintf("index_coverage = %s, but lanced cannot remap %s indices yet (%v)", mode, k, err)
			} else if ic.maps[i] == nil {
				ic.blocks[i] = fmt.Sprintf("index_coverage = %s, but the index records no fragment bitmap (Lance cannot rewrite it either)", mode)
			}
		}
	}
}

// fmBlocking keeps the fragments of an FM segment a rewrite would rebuild
// (remap) out of rewrites when its largest partition's text, estimated
// from its files' sizes, is over index.fm_max_bytes.
func fmBlocking(ic *indexCoverage, bound policy.Setting[uint64]) {
	for i, k := range ic.kinds {
		if k != index.KindFM || ic.blocks[i] != "" {
			continue
		}
		if est, part := fmPartitionText(ic, []int{i}); est > bound.Value {
			ic.blocks[i] = fmt.Sprintf("a rewrite rebuilds this FM index from the column, but its largest partition holds about %d bytes of text (estimated from %s's size), over index.fm_max_bytes %d (%s)",
				est, part, bound.Value, bound.Source)
		}
	}
}

// nameGroups returns the segment positions of each index name, in order of
// first appearance.
func nameGroups(ic *indexCoverage) (names []string, pos map[string][]int) {
	pos = map[string][]int{}
	for i, n := range ic.names {
		if _, ok := pos[n]; !ok {
			names = append(names, n)
		}
		pos[n] = append(pos[n], i)
	}
	return names, pos
}

// covered returns the existing fragments the segments cover.
func covered(ic *indexCoverage, segs []int, existing *roaring.Bitmap) *roaring.Bitmap {
	out := roaring.New()
	for _, s := range segs {
		if ic.maps[s] == nil {
			return existing.Clone()
		}
		out.Or(roaring.And(ic.maps[s], existing))
	}
	return out
}

// protectLastCoverage drops tasks, last first, until no index would be
// left covering no existing fragment. In address mode a rewrite that does
// not remap an index leaves its bitmap naming removed fragments; once none
// of them exists, Lance's next Delete/Update/Merge/Project commit drops a
// vector index outright (trained model included) and keeps a scalar one
// that indexes nothing. So index_coverage = unindex keeps each index's last
// covered fragments. Only indices that are neither remapped nor
// bitmap-only are considered.
//
// Fragments of tasks in flight count as rewritten: their task may commit
// first.
func protectLastCoverage(ic *indexCoverage, frags []*tablepb.DataFragment, tasks [][]int, mode string, stable bool, excluded, reasons []string) [][]int {
	if stable || mode != policy.CoverageUnindex || len(tasks) == 0 {
		return tasks
	}
	existing := roaring.New()
	pos := map[uint32]int{}
	for i, f := range frags {
		existing.Add(uint32(f.GetId()))
		pos[uint32(f.GetId())] = i
	}
	names, segs := nameGroups(ic)
	taskOf := make([]int, len(frags))
	for i := range taskOf {
		taskOf[i] = -1
	}
	for t, task := range tasks {
		for _, i := range task {
			taskOf[i] = t
		}
	}
	dropped := make([]bool, len(tasks))
	for _, n := range names {
		if ic.kinds[segs[n][0]].IsSystem() {
			continue
		}
		cov := covered(ic, segs[n], existing)
		if cov.IsEmpty() {
			continue
		}
		// The index survives when one covered fragment is in no kept task.
		last := -1
		kept := false
		for _, id := range cov.ToArray() {
			i := pos[id]
			t := taskOf[i]
			if t < 0 && strings.HasPrefix(excluded[i], "in flight") {
				continue
			}
			if t < 0 || dropped[t] {
				kept = true
				break
			}
			if t > last {
				last = t
			}
		}
		if kept || last < 0 {
			continue
		}
		dropped[last] = true
		kind := ic.kinds[segs[n][0]]
		why := "Lance keeps a scalar index that covers nothing, but it would index no row"
		if kind.IsVector() {
			why = "Lance drops a vector index that covers no fragment at its next delete/update/merge_insert/add_columns commit, trained model included"
		}
		for _, i := range tasks[last] {
			reasons[i] = fmt.Sprintf("kept: last fragments covered by index %s (%s); rewriting them with index_coverage = unindex would leave it covering no fragment: %s", n, kind, why)
		}
	}
	out := tasks[:0]
	for t, task := range tasks {
		if !dropped[t] {
			out = append(out, task)
		}
	}
	return out
}

// indexDecisions reports per index what the plan does to it; inRewrite
// marks the fragments of the tasks taken.
func indexDecisions(ic *indexCoverage, frags []*tablepb.DataFragment, inRewrite []bool, mode string, stable bool) []IndexDecision {
	existing := roaring.New()
	rewritten := roaring.New()
	for i, f := range frags {
		existing.Add(uint32(f.GetId()))
		if inRewrite[i] {
			rewritten.Add(uint32(f.GetId()))
		}
	}
	names, segs := nameGroups(ic)
	var out []IndexDecision
	for _, n := range names {
		s := segs[n]
		kind := ic.kinds[s[0]]
		cov := covered(ic, s, existing)
		d := IndexDecision{Name: n, Kind: string(kind), Segments: len(s), Covered: toU64(cov)}
		rw := roaring.And(cov, rewritten)
		d.Rewritten = toU64(rw)
		var blocks []string
		for _, p := range s {
			if ic.blocks[p] != "" {
				blocks = append(blocks, ic.blocks[p])
			}
		}
		switch {
		case len(blocks) > 0:
			d.Action, d.Reason = IndexKeep, "fragments it covers are not rewritten: "+strings.Join(dedupe(blocks), "; ")
		case rw.IsEmpty():
			d.Action, d.Reason = IndexUntouched, "no fragment it covers is rewritten"
		case stable:
			d.Action, d.Reason = IndexBitmapOnly, "stable row ids: the fragment bitmap follows the rewrite, no index file is rewritten"
		case mode == policy.CoverageDefer && index.Deferrable(kind):
			d.Action, d.Reason = IndexDeferred, "index files untouched: the rewrite is recorded as a new version of the fragment reuse index (__lance_frag_reuse), through which real Lance translates the index's row addresses and fragment bitmap when it loads it"
		case mode == policy.CoverageDefer:
			d.Action, d.Reason = IndexRemap, fmt.Sprintf("index_coverage = defer, but real Lance does not read %s indices through the fragment reuse index when its optimize() rewrites them: index files rewritten for the new row addresses under a new uuid, committed with the rewrite", kind)
		case (mode == policy.CoverageRemap || mode == policy.CoverageDefer) && kind == index.KindFM:
			d.Action, d.Reason = IndexRemap, "FM index rebuilt from the column over the fragments it covers after the rewrite (new row addresses; lance 8.0.0's optimize() rebuilds it the same way) under a new uuid, committed with the rewrite"
		case mode == policy.CoverageRemap:
			d.Action, d.Reason = IndexRemap, "index files rewritten for the new row addresses under a new uuid, committed with the rewrite"
		default:
			left := roaring.AndNot(cov, rw)
			d.Action, d.Reason = IndexUnindexed, fmt.Sprintf("index_coverage = unindex: %d rewritten fragment(s) become unindexed; it still covers %d fragment(s)", rw.GetCardinality(), left.GetCardinality())
		}
		out = append(out, d)
	}
	return out
}

func toU64(bm *roaring.Bitmap) []uint64 {
	out := make([]uint64, 0, bm.GetCardinality())
	it := bm.Iterator()
	for it.HasNext() {
		out = append(out, uint64(it.Next()))
	}
	return out
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
