package plan

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// candidacy mirrors Lance's CompactionCandidacy.
type candidacy int

const (
	notCandidate candidacy = iota
	withNeighbors
	itself
)

// candidateBin mirrors Lance's CandidateBin: adjacent candidate fragments
// (positions in the manifest) with one index set.
type candidateBin struct {
	pos  []int
	cand []candidacy
	rows []uint64 // live rows (physical - deleted)
	idx  []int    // positions of the indices covering the fragments
}

func (b *candidateBin) isNoop() bool {
	return len(b.pos) == 0 || (len(b.pos) == 1 && b.cand[0] == withNeighbors)
}

// splitForSize is Lance's split_for_size: take fragments until the chunk
// has at least min live rows; emit it only if the rest also has at least
// min, else the rest joins the last chunk.
func (b *candidateBin) splitForSize(min uint64) [][]int {
	var out [][]int
	pos, rows := b.pos, b.rows
	for {
		n := 0
		var sum uint64
		for sum < min && n < len(rows) {
			sum += rows[n]
			n++
		}
		var rest uint64
		for _, r := range rows[n:] {
			rest += r
		}
		if rest >= min && n > 0 && n < len(rows) {
			out = append(out, pos[:n])
			pos, rows = pos[n:], rows[n:]
			continue
		}
		return append(out, pos)
	}
}

// indexCoverage holds every index segment's fragment bitmap and whether
// it keeps the fragments it covers out of rewrites.
type indexCoverage struct {
	metas  []*tablepb.IndexMetadata
	names  []string
	kinds  []index.Kind
	maps   []*roaring.Bitmap // nil: covers everything (legacy index, unknown range)
	blocks []string          // why the segment's fragments are kept; "" when they may be rewritten
	// reuse is the table's fragment reuse index (nil when none); the
	// bitmaps in maps are translated through it, as Lance's load_indices
	// translates them, and metas are the segments as recorded.
	reuse *index.FragReuse
	// reuseErr says why the fragment reuse index cannot be read ("" when
	// it can): coverage is then unknown and indexed fragments are kept.
	reuseErr string
	// behind marks segments whose files may still hold addresses a reuse
	// version translates (index.FragReuse.Behind).
	behind []bool
}

func newIndexCoverage(indices []*tablepb.IndexMetadata, legacy map[uint64]uint32, warn func(string)) *indexCoverage {
	ic := &indexCoverage{}
	through, reuse, err := index.ThroughReuse(indices)
	if err != nil {
		ic.reuseErr = err.Error()
		warn("fragment reuse index: " + ic.reuseErr + "; fragments covered by an index are kept")
		through = indices
	}
	ic.reuse = reuse
	for n, ix := range indices {
		if ix.GetName() == index.FragReuseName {
			// Lance's compaction plans around it (it covers no rows).
			continue
		}
		behind, err := reuse.Behind(ix)
		if err != nil {
			behind = true
		}
		ic.behind = append(ic.behind, behind)
		seen := through[n]
		name := ix.GetName()
		if name == "" {
			name = fmt.Sprintf("index@%d", ix.GetDatasetVersion())
		}
		ic.metas = append(ic.metas, ix)
		ic.names = append(ic.names, name)
		ic.kinds = append(ic.kinds, index.Detect(ix))
		ic.blocks = append(ic.blocks, "")
		if len(ix.GetFragmentBitmap()) == 0 {
			if maxID, ok := legacy[ix.GetDatasetVersion()]; ok {
				bm := roaring.New()
				bm.AddRange(0, uint64(maxID))
				ic.maps = append(ic.maps, bm)
				continue
			}
			warn(fmt.Sprintf("index %s has no fragment bitmap and its version %d is unknown; treating it as covering every fragment", name, ix.GetDatasetVersion()))
			ic.maps = append(ic.maps, nil)
			continue
		}
		bm, err := index.DecodeBitmap(seen.GetFragmentBitmap())
		if err != nil {
			warn(fmt.Sprintf("index %s: undecodable fragment bitmap (%v); treating it as covering every fragment", name, err))
			ic.maps = append(ic.maps, nil)
			continue
		}
		ic.maps = append(ic.maps, bm)
	}
	return ic
}

// covering appends to out the positions of the indices whose bitmap holds
// id, as Lance's indices_containing_frag (ids are compared as u32).
func (ic *indexCoverage) covering(id uint64, out []int) []int {
	for i, bm := range ic.maps {
		if bm == nil || bm.Contains(uint32(id)) {
			out = append(out, i)
		}
	}
	return out
}

// blocking returns the reason the first blocking index among pos keeps its
// fragments, naming the indices, or "".
func (ic *indexCoverage) blocking(pos []int) string {
	var names []string
	why := ""
	for _, p := range pos {
		if ic.blocks[p] != "" {
			names = append(names, ic.names[p])
			if why == "" {
				why = ic.blocks[p]
			}
		}
	}
	if why == "" {
		return ""
	}
	return fmt.Sprintf("covered by index %s (%s)", strings.Join(names, ", "), why)
}

// fragRows returns a fragment's physical and deleted rows from the manifest,
// or a reason they are unknown (Lance would read the files to find out).
func fragRows(f *tablepb.DataFragment) (physical, deleted uint64, unknown string) {
	physical = f.GetPhysicalRows()
	if physical == 0 && len(f.GetFiles()) > 0 {
		return 0, 0, "physical_rows not recorded in the manifest (legacy fragment)"
	}
	if df := f.GetDeletionFile(); df != nil {
		deleted = df.GetNumDeletedRows()
		if deleted == 0 {
			return 0, 0, "deletion file without a recorded row count"
		}
		if deleted > physical {
			return 0, 0, fmt.Sprintf("deletion file counts %d deleted rows of %d", deleted, physical)
		}
	}
	return physical, deleted, ""
}

// rewriteOpts are the rewrite settings the binning reads.
type rewriteOpts struct {
	target      uint64
	materialize bool
	threshold   float32
	minReclaim  float64 // min_reclaim_ratio; 0 is none
}

// Cost is the planner's estimate for a fragment or task, from the manifest
// alone (recorded data file sizes and physical/deleted row counts, no
// reads): a rewrite reads every data file whole and writes the live rows'
// share of those bytes, so the deleted rows' share is what it reclaims.
type Cost struct {
	// Read is the recorded size of the data files read.
	Read uint64 `json:"read_bytes"`
	// Write is the estimated bytes written: Read times live / physical rows.
	Write uint64 `json:"write_bytes"`
	// Reclaimed is Read - Write, the deleted rows' estimated bytes.
	Reclaimed uint64 `json:"reclaimed_bytes"`
}

// Ratio is bytes reclaimed per byte written (0 when nothing is written but
// nothing is reclaimed either).
func (c Cost) Ratio() float64 {
	if c.Write == 0 {
		if c.Reclaimed == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(c.Reclaimed) / float64(c.Write)
}

// fragCost estimates what rewriting f costs.
func fragCost(f *tablepb.DataFragment) Cost {
	read := dataBytes(f)
	physical, deleted, _ := fragRows(f)
	c := Cost{Read: read, Write: read}
	if physical > 0 && deleted > 0 {
		c.Write = uint64(math.Round(float64(read) * float64(physical-deleted) / float64(physical)))
		c.Reclaimed = read - c.Write
	}
	return c
}

// rowDensity is the bytes per physical row of the table's fragment with the
// most physical rows: the density of the large files a rewrite writes.
// Small files carry more bytes per row (each column's pages and metadata
// are paid per file), so a merge of small fragments writes fewer bytes than
// it reads even without deletions. 0 when no fragment has recorded sizes.
func rowDensity(frags []*tablepb.DataFragment) float64 {
	var best *tablepb.DataFragment
	for _, f := range frags {
		if dataBytes(f) > 0 && (best == nil || f.GetPhysicalRows() > best.GetPhysicalRows()) {
			best = f
		}
	}
	if best == nil || best.GetPhysicalRows() == 0 {
		return 0
	}
	return float64(dataBytes(best)) / float64(best.GetPhysicalRows())
}

// taskCost estimates a rewrite of the fragments: every file read, the live
// rows written at the fragment's own density or, when the rewrite will
// re-encode, at the table's large-file density (density), whichever is
// lower. pageCost is what an extra page costs on the table's store
// (job.PageCost): where the page rule lets the rewrite copy the sources'
// pages, the output keeps their density.
func taskCost(fs []*tablepb.DataFragment, density float64, pageCost int64) Cost {
	var c Cost
	for _, f := range fs {
		c.add(fragCost(f))
	}
	if density <= 0 || pagesCopied(fs, c.Read, pageCost) {
		return c
	}
	c = Cost{}
	for _, f := range fs {
		fc := fragCost(f)
		physical, deleted, _ := fragRows(f)
		if physical > 0 {
			if w := uint64(math.Round(density * float64(physical-deleted))); w < fc.Write {
				fc.Write, fc.Reclaimed = w, fc.Read-w
			}
		}
		c.add(fc)
	}
	return c
}

// pagesCopied predicts the rewrite's page rule from the manifest alone: a
// fragment smaller than a page holds about one page per column, so
// merging n of them adds about n-1 pages per column, each charged
// pageCost; the pages are copied when those charges stay within
// job.CopyMaxOverhead of the bytes read.
func pagesCopied(fs []*tablepb.DataFragment, read uint64, pageCost int64) bool {
	if len(fs) <= 1 {
		return true
	}
	cols := 0
	for _, df := range fs[0].GetFiles() {
		cols += len(df.GetFields())
	}
	extra := float64(cols) * float64(len(fs)-1) * float64(pageCost)
	return extra <= job.CopyMaxOverhead*float64(read)
}

func (c *Cost) add(o Cost) {
	c.Read += o.Read
	c.Write += o.Write
	c.Reclaimed += o.Reclaimed
}

// costReason says why a deletion candidate is not worth its rewrite.
func costReason(ratio float32, threshold float32, c Cost, min float64) string {
	return fmt.Sprintf("deletions %s%% over materialize_deletions_threshold %s%%, but a rewrite reclaims ~%d of %d bytes read and writes ~%d: ratio %.3f under min_reclaim_ratio %g",
		strconv.FormatFloat(100*float64(ratio), 'f', 1, 64), strconv.FormatFloat(100*float64(threshold), 'g', -1, 32),
		c.Reclaimed, c.Read, c.Write, c.Ratio(), min)
}

// planBins runs Lance 8.0.0's candidate selection and binning over the
// fragments. excluded[i] (in flight, unknown rows) makes fragment i a
// non-candidate with that reason. It returns the tasks as manifest
// positions and sets a skip reason for every fragment no task takes.
//
// costs[i] is set for a fragment min_reclaim_ratio kept out of a rewrite.
func planBins(frags []*tablepb.DataFragment, ic *indexCoverage, o rewriteOpts, excluded []string, reasons []string, costs []*Cost) [][]int {
	var bins []*candidateBin
	var cur *candidateBin
	var idx []int
	// Fragments of equal size get equal reasons; share the strings.
	type rk struct {
		c                        candidacy
		physical, deleted, bytes uint64
	}
	memo := map[rk]string{}
	for i, f := range frags {
		c := notCandidate
		var live uint64
		idx = ic.covering(f.GetId(), idx[:0])
		switch {
		case excluded[i] != "":
			reasons[i] = excluded[i]
		case len(idx) > 0 && ic.blocking(idx) != "":
			reasons[i] = ic.blocking(idx)
		default:
			physical, deleted, _ := fragRows(f)
			live = physical - deleted
			var ratio float32
			if physical > 0 {
				ratio = float32(deleted) / float32(physical)
			}
			cheap := ""
			switch {
			case o.materialize && ratio > o.threshold:
				c = itself
				// Deletions alone make it a candidate: weigh the bytes
				// reclaimed against the bytes rewritten. A small fragment
				// still joins its neighbours as Lance's would.
				if o.minReclaim > 0 {
					if cost := fragCost(f); cost.Ratio() < o.minReclaim {
						costs[i] = &cost
						cheap = costReason(ratio, o.threshold, cost, o.minReclaim)
						c = notCandidate
						if physical < o.target {
							c = withNeighbors
						}
					}
				}
			case physical < o.target:
				c = withNeighbors
			}
			key := rk{c, physical, deleted, 0}
			if cheap != "" {
				key.bytes = dataBytes(f) + 1
			}
			if r, ok := memo[key]; ok {
				reasons[i] = r
				break
			}
			switch {
			case cheap != "" && c == withNeighbors:
				reasons[i] = "small: " + strconv.FormatUint(physical, 10) + " physical rows under target_rows_per_fragment " + strconv.FormatUint(o.target, 10) + "; " + cheap
			case cheap != "":
				reasons[i] = "skipped by cost: " + cheap
			case c == itself:
				reasons[i] = "deletions " + strconv.FormatFloat(100*float64(ratio), 'f', 1, 64) + "% over materialize_deletions_threshold " +
					strconv.FormatFloat(100*float64(o.threshold), 'g', -1, 32) + "%"
			case c == withNeighbors:
				reasons[i] = "small: " + strconv.FormatUint(physical, 10) + " physical rows under target_rows_per_fragment " + strconv.FormatUint(o.target, 10)
			default:
				reasons[i] = "not a rewrite candidate: " + strconv.FormatUint(physical, 10) + " physical rows, " + strconv.FormatUint(deleted, 10) + " deleted"
			}
			if len(memo) < 1<<16 {
				memo[key] = reasons[i]
			}
		}
		switch {
		case c == notCandidate:
			if cur != nil {
				bins = append(bins, cur)
				cur = nil
			}
		case cur != nil && slices.Equal(cur.idx, idx):
			cur.pos = append(cur.pos, i)
			cur.cand = append(cur.cand, c)
			cur.rows = append(cur.rows, live)
		default:
			if cur != nil {
				bins = append(bins, cur)
			}
			cur = &candidateBin{pos: []int{i}, cand: []candidacy{c}, rows: []uint64{live}, idx: slices.Clone(idx)}
		}
	}
	if cur != nil {
		bins = append(bins, cur)
	}
	var tasks [][]int
	for _, b := range bins {
		if b.isNoop() {
			reasons[b.pos[0]] += "; no adjacent candidate with the same index set to compact with"
			continue
		}
		tasks = append(tasks, b.splitForSize(o.target)...)
	}
	return tasks
}
