package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// Catch-up actions of an IndexDecision: what happens to rows appended
// since the index was built (fragments outside its fragment bitmaps).
const (
	// CatchUpCurrent: every live row is indexed.
	CatchUpCurrent = "current"
	// CatchUpWithin: unindexed rows are within the policy's bounds.
	CatchUpWithin = "within-policy"
	// CatchUpPlanned: the unindexed rows are added to the index with its
	// trained model.
	CatchUpPlanned = "catch-up"
	// CatchUpDue: the policy's bound is passed but lanced cannot catch up
	// this index (type, retrain, or segment merge); Lance's optimize() can.
	CatchUpDue = "due"
	// CatchUpSkipped: not considered (system index, scope).
	CatchUpSkipped = "skipped"
)

// catchUpKinds lists the index kinds lanced catches up itself.
var catchUpKinds = map[index.Kind]bool{
	index.KindIVFPQ: true, index.KindIVFFlat: true, index.KindIVFRQ: true, index.KindHNSWSQ: true, index.KindHNSWPQ: true,
	index.KindBTree: true, index.KindBitmap: true, index.KindLabelList: true,
	index.KindFTS: true, index.KindFM: true,
}

// stableCatchUpKinds lists the kinds lanced catches up on tables with
// stable row ids too (the new rows enter the index under their row ids,
// read from the fragments' row-id sequences, as lance indexes such tables).
var stableCatchUpKinds = map[index.Kind]bool{
	index.KindIVFPQ: true, index.KindIVFFlat: true, index.KindIVFRQ: true, index.KindHNSWSQ: true, index.KindHNSWPQ: true,
	index.KindBTree: true, index.KindBitmap: true, index.KindLabelList: true,
	index.KindFM: true,
}

// noCatchUp says why lanced does not catch up an index kind (the plan's
// reason); kinds not listed get a generic one.
var noCatchUp = map[index.Kind]string{}

// CatchUpMaxRows bounds the live rows of one catch-up task: the executor
// holds a row id and a code per new row (for IVF_FLAT over 128-d float32
// vectors, 128 MiB at this bound).
const CatchUpMaxRows = 256 << 10

// CatchUpSupported reports whether lanced adds unindexed rows to indices
// of the kind.
func CatchUpSupported(k index.Kind) bool { return catchUpKinds[k] }

// CatchUp is the catch-up part of an IndexDecision.
type CatchUp struct {
	index.Backlog
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Merge: the catch-up merges every segment of the index into one (a
	// delta would pass max_segments).
	Merge bool `json:"merge,omitempty"`
	// Drift is the index's recorded drift (vector indices lanced caught
	// up; Input.Drift), nil when none is recorded.
	Drift *Drift `json:"drift,omitempty"`
}

// Drift is an index's distribution drift as lanced's catch-ups measured
// it (package drift): Far of the Rows they added with the trained model
// were far from every centroid.
type Drift struct {
	Ratio     float64 `json:"ratio"`
	Rows      uint64  `json:"rows"`
	Far       uint64  `json:"far"`
	Threshold float64 `json:"threshold"`
	// Retrain: Ratio is above Threshold, retraining is recommended.
	Retrain bool `json:"retrain_recommended,omitempty"`
}

// driftReasons attaches each index's recorded drift to its catch-up
// decision and, past the policy's drift_threshold, recommends a retrain in
// the reason. lanced never retrains (the policy refuses retrain = true):
// the catch-up still adds rows with the trained model, which keeps every
// row indexed while recall degrades.
func driftReasons(in Input, p *Plan) {
	thr := in.Policy.Index.DriftThreshold
	for i := range p.Indices {
		d := &p.Indices[i]
		r, ok := in.Drift[d.Name]
		if !ok || d.CatchUp == nil || r.Rows == 0 {
			continue
		}
		dr := &Drift{Ratio: r.Ratio(), Rows: r.Rows, Far: r.Far, Threshold: thr.Value}
		d.CatchUp.Drift = dr
		if thr.Value > 0 && dr.Ratio > thr.Value {
			dr.Retrain = true
			d.CatchUp.Reason += fmt.Sprintf("; drift %.1f%% > %g%% (drift_threshold, %s): %d of the %d row(s) lanced caught up are far from every centroid, retrain recommended (Lance's createIndex with replace; lanced keeps adding rows with the trained model)",
				100*dr.Ratio, 100*thr.Value, thr.Source, r.Far, r.Rows)
		}
	}
}

// catchUpDecisions fills in the catch-up decision of every index.
func catchUpDecisions(ic *indexCoverage, frags []*tablepb.DataFragment, decisions []IndexDecision, pol policy.Effective) {
	existing := roaring.New()
	for _, f := range frags {
		existing.Add(uint32(f.GetId()))
	}
	scope := pol.Scope.Value
	inScope := scope == policy.ScopeAll || scope == policy.ScopeIndex
	_, segs := nameGroups(ic)
	for i := range decisions {
		d := &decisions[i]
		s := segs[d.Name]
		cu := &CatchUp{Backlog: index.ComputeBacklog(covered(ic, s, existing), frags)}
		d.CatchUp = cu
		kind := ic.kinds[s[0]]
		switch {
		case kind.IsSystem():
			cu.Action, cu.Reason = CatchUpSkipped, fmt.Sprintf("system index %s: Lance's optimize_indices leaves it alone", kind)
			continue
		case !inScope:
			cu.Action, cu.Reason = CatchUpSkipped, "index catch-up not in scope (scope = "+scope+")"
			continue
		}
		decideCatchUp(cu, kind, len(s), pol.Index)
		if kind == index.KindFTS && cu.Action == CatchUpPlanned {
			if err := ftsCatchUpSupported(ic.metas[s[0]]); err != nil {
				cu.Action = CatchUpDue
				cu.Reason += "; but lanced cannot tokenize new rows exactly as Lance does for this index (" + err.Error() + "): run Lance's optimize()"
			}
		}
		if kind == index.KindFM && cu.Action == CatchUpPlanned {
			cu.Reason = strings.Replace(cu.Reason, "rows added with the index's trained model", "the index rebuilt from the column over every fragment it covers and the new ones (as Lance's optimize() rebuilds an FM index)", 1)
			if est, part := fmPartitionText(ic, s); est > pol.Index.FMMaxBytes.Value {
				cu.Action = CatchUpDue
				cu.Reason += fmt.Sprintf("; but its largest partition holds about %d bytes of text (estimated from %s's size), over index.fm_max_bytes %d (%s): run Lance's optimize() or raise the bound",
					est, part, pol.Index.FMMaxBytes.Value, pol.Index.FMMaxBytes.Source)
			}
		}
		if kind == index.KindIVFRQ && cu.Action == CatchUpPlanned {
			if bits, ok := index.RQNumBits(ic.metas[s[0]]); !ok || bits < 1 || bits > 9 {
				cu.Action = CatchUpDue
				cu.Reason += fmt.Sprintf("; but lanced encodes IVF_RQ with 1 to 9 bits per dimension, as lance 8.0.0 builds it (this index: %d, read %v): run Lance's optimize()", bits, ok)
			}
		}
		if cu.Action == CatchUpPlanned {
			if why := reuseBlocksCatchUp(ic, s); why != "" {
				cu.Action = CatchUpDue
				cu.Reason += "; " + why + ": run Lance's optimize()"
			}
		}
	}
}

// reuseBlocksCatchUp says why the segments at segs may not be caught up
// because of the table's fragment reuse index, or "". The backlog itself is
// computed on bitmaps translated through it; but a catch-up may merge the
// index's segments, and a segment whose files still hold addresses a
// reuse version translates cannot be merged without that translation.
func reuseBlocksCatchUp(ic *indexCoverage, segs []int) string {
	if ic.reuseErr != "" {
		return "the table's fragment reuse index cannot be read (" + ic.reuseErr + ")"
	}
	for _, p := range segs {
		if ic.behind[p] {
			return "a segment still relies on the fragment reuse index (Lance's deferred index remap) for rows of rewritten fragments, and lanced's catch-up does not merge through it"
		}
	}
	return ""
}

// decideCatchUp applies the index policy to one index's backlog.
func decideCatchUp(cu *CatchUp, kind index.Kind, segments int, p policy.Index) {
	maxRows, maxFrac := p.MaxUnindexedRows.Value, p.MaxUnindexedFraction.Value
	var trigger string
	switch {
	case cu.Rows == 0 && len(cu.Fragments) == 0:
	case maxRows == 0 && maxFrac == 0:
		trigger = fmt.Sprintf("%d unindexed row(s) in %d fragment(s); no bound set, so any unindexed row is caught up (as Lance's optimize() does)", cu.Rows, len(cu.Fragments))
	case maxRows > 0 && cu.Rows > maxRows:
		trigger = fmt.Sprintf("%d unindexed row(s) in %d fragment(s) > max_unindexed_rows %d (%s)", cu.Rows, len(cu.Fragments), maxRows, p.MaxUnindexedRows.Source)
	case maxFrac > 0 && cu.Fraction() > maxFrac:
		trigger = fmt.Sprintf("%.2f%% of live rows unindexed (%d of %d) > max_unindexed_fraction %g (%s)", 100*cu.Fraction(), cu.Rows, cu.LiveRows, maxFrac, p.MaxUnindexedFraction.Source)
	}
	// Lance's optimize_indices (the default options lancedb's optimize()
	// passes) adds a delta segment to a vector index (it merges every
	// segment only when a partition is to be split or joined, which the
	// plan cannot see) and replaces a scalar index by one segment:
	// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/append.rs
	// Past max_segments lanced merges every segment of a vector index and
	// the new rows into one, as optimize_indices does when asked to merge
	// at least as many segments as there are (num_indices_to_merge).
	after := segments
	if trigger != "" && kind.IsVector() {
		after++
	} else if trigger != "" {
		after = 1
	}
	var merge string
	if maxSeg := p.MaxSegments.Value; maxSeg > 0 && uint64(after) > maxSeg {
		merge = fmt.Sprintf("%d segment(s) > max_segments %d (%s)", after, maxSeg, p.MaxSegments.Source)
	}
	if trigger == "" && merge == "" {
		if len(cu.Fragments) == 0 {
			cu.Action, cu.Reason = CatchUpCurrent, "every live row is indexed"
			return
		}
		cu.Action, cu.Reason = CatchUpWithin, fmt.Sprintf("%d unindexed row(s) in %d fragment(s) (%.2f%% of live rows) are within the index policy", cu.Rows, len(cu.Fragments), 100*cu.Fraction())
		return
	}
	why := trigger
	if merge != "" {
		why = joinReason(trigger, merge)
	}
	var blocked []string
	switch {
	case noCatchUp[kind] != "":
		blocked = append(blocked, noCatchUp[kind])
	case !catchUpKinds[kind]:
		blocked = append(blocked, fmt.Sprintf("lanced cannot catch up %s indices yet", kind))
	}
	if len(blocked) > 0 {
		cu.Action = CatchUpDue
		cu.Reason = why + "; " + strings.Join(blocked, "; ") + ": run Lance's optimize() (or createIndex with replace to retrain)"
		return
	}
	cu.Action, cu.Reason = CatchUpPlanned, why+"; rows added with the index's trained model"
	cu.Merge = merge != ""
	if !kind.IsVector() && segments > 1 {
		// Lance keeps one segment per scalar index: the catch-up merges
		// every segment and the new rows into one.
		cu.Reason += fmt.Sprintf("; its %d segments merged into one", segments)
	} else if cu.Merge {
		cu.Reason += "; every segment merged into one"
	}
}

// With neither max_unindexed_rows nor max_unindexed_fraction set, an
// index is caught up ahead of the compaction of its unindexed fragments
// (see catchUpFirst) once it has more than DefaultCatchUpFirstRows
// unindexed rows and they are more than DefaultCatchUpFirstFraction of its
// live rows. Below that the rewrite comes first, as in Lance's optimize()
// (the plan bins as Lance does, and a new fragment is caught up once, after
// it is compacted, instead of caught up and then remapped).
const (
	DefaultCatchUpFirstRows     = 10_000
	DefaultCatchUpFirstFraction = 0.10
)

// catchUpFirst returns excluded with, added, the unindexed fragments of every
// index whose bound (max_unindexed_rows or max_unindexed_fraction; with
// neither set, the defaults above) is passed and that lanced catches up:
// those are caught up by this plan and compacted once indexed (their
// rewrite remaps the index). Compacting them first, as Lance's optimize()
// orders it, lets a live writer starve the catch-up: each plan rewrites the
// last rewrite's unindexed output together with the newest appends, so
// those rows stay unindexed until the output reaches
// target_rows_per_fragment; the bound keeps the unindexed share bounded.
func catchUpFirst(ic *indexCoverage, frags []*tablepb.DataFragment, pol policy.Effective, mode string, excluded []string) []string {
	minRows := uint64(0)
	if pol.Index.MaxUnindexedRows.Value == 0 && pol.Index.MaxUnindexedFraction.Value == 0 {
		pol.Index.MaxUnindexedFraction = policy.Setting[float64]{Value: DefaultCatchUpFirstFraction, Source: policy.Source{Kind: policy.FromLancedDefault}}
		minRows = DefaultCatchUpFirstRows
	}
	pre := indexDecisions(ic, frags, make([]bool, len(frags)), mode, false)
	catchUpDecisions(ic, frags, pre, pol)
	pos := map[uint64]int{}
	for i, f := range frags {
		pos[f.GetId()] = i
	}
	out, cloned := excluded, false
	for _, d := range pre {
		// An FM catch-up rebuilds the whole index, and so does a rewrite
		// of fragments it covers: the unindexed fragments are compacted
		// first (untouched by the index), then caught up once, as Lance's
		// optimize() orders it.
		if d.CatchUp == nil || d.CatchUp.Action != CatchUpPlanned || d.CatchUp.Rows <= minRows || d.Kind == string(index.KindFM) {
			continue
		}
		reason := d.CatchUp.Reason
		if minRows > 0 {
			reason = fmt.Sprintf("no bound set: %d unindexed rows > %d and %.2f%% of live rows > %g%% (lanced defaults)", d.CatchUp.Rows, minRows, 100*d.CatchUp.Fraction(), 100*DefaultCatchUpFirstFraction)
		}
		for _, id := range d.CatchUp.Fragments {
			i, ok := pos[id]
			if !ok || out[i] != "" {
				continue
			}
			if !cloned {
				out, cloned = slices.Clone(excluded), true
			}
			out[i] = fmt.Sprintf("caught up into %s before it is compacted (%s)", d.Name, reason)
		}
	}
	return out
}

// planCatchUps turns every catch-up decision into one task over the
// unindexed fragments no rewrite of this plan takes and no task in flight
// holds (those are caught up once they settle). A kind that runs in parts
// (job.CatchUpSplits) takes them all, as delta tasks of at most
// index.catchup_part_rows live rows (Slices) when there are more; other
// kinds take up to CatchUpMaxRows live rows in fragment order. One task
// per index: a task may merge the index's segments, which a second one
// would then miss; the rest is caught up by the next plan.
func planCatchUps(in Input, p *Plan, frags []*tablepb.DataFragment, excluded []string, inRewrite []bool) {
	pos := map[uint64]int{}
	for i, f := range frags {
		pos[f.GetId()] = i
	}
	stable := in.Manifest.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0
	remapping := remapsInFlight(in)
	for i := range p.Indices {
		d := &p.Indices[i]
		cu := d.CatchUp
		if cu == nil || cu.Action != CatchUpPlanned {
			continue
		}
		if key := remapOf(in.Indices, d.Name, remapping); key != "" {
			// The rewrite's remaps replace the segment a catch-up would
			// build on (or merge): caught up once it committed.
			cu.Reason += "; caught up on a later plan: a rewrite or remap of its fragments is in flight (" + key + ")"
			continue
		}
		if d.Kind == string(index.KindFM) && d.Action == IndexRemap && len(d.Rewritten) > 0 {
			// This plan's Rewrite rebuilds the FM segment from the column;
			// a catch-up beside it would rebuild the same segment, and
			// whichever commits second is dropped.
			cu.Reason += fmt.Sprintf("; caught up on a later plan: this plan's rewrite of fragment(s) %v it covers rebuilds it first", d.Rewritten)
			continue
		}
		if stable && !stableCatchUpKinds[index.Kind(d.Kind)] {
			cu.Action = CatchUpDue
			cu.Reason += fmt.Sprintf("; lanced cannot catch up %s indices of tables with stable row ids yet: run Lance's optimize()", d.Kind)
			continue
		}
		// A catch-up that may run in parts takes the whole backlog: past
		// catchup_part_rows it runs as delta tasks merged by one task.
		split := job.CatchUpSplits(index.Kind(d.Kind)) && (index.Kind(d.Kind).IsVector() || d.Segments == 1) && in.Policy.Index.CatchUpPartRows.Value > 0
		var ids, lives []uint64
		var rows uint64
		var left []string
		full, pastRows := 0, uint64(0)
		for _, id := range cu.Fragments {
			fi := pos[id]
			switch {
			case inRewrite[fi]:
				left = append(left, fmt.Sprintf("fragment %d is rewritten first", id))
				continue
			case excluded[fi] != "":
				left = append(left, fmt.Sprintf("fragment %d %s", id, excluded[fi]))
				continue
			}
			ph, del, _ := fragRows(frags[fi])
			// An FM catch-up rebuilds the index over every fragment:
			// bounded by its partitions (index.fm_max_bytes), not rows.
			if !split && d.Kind != string(index.KindFM) && (full > 0 || (len(ids) > 0 && rows+ph-del > CatchUpMaxRows)) {
				full++
				pastRows += ph - del
				continue
			}
			ids = append(ids, id)
			lives = append(lives, ph-del)
			rows += ph - del
		}
		var parts []job.RowRange
		if split {
			parts = catchUpParts(lives, in.Policy.Index.CatchUpPartRows.Value)
		}
		// A backlog past one task is caught up by delta tasks, one per
		// plan; the task that takes its last fragments merges.
		merge := cu.Merge && full == 0
		switch {
		case len(ids) > 0 || merge:
			task := job.CatchUpTask{Table: in.Table, ReadVersion: in.Manifest.GetVersion(), Index: d.Name, Fragments: ids, Rows: rows, Merge: merge, Slices: parts}
			if d.Kind == string(index.KindFM) {
				task.FMMaxBytes = in.Policy.Index.FMMaxBytes.Value
			}
			p.CatchUps = append(p.CatchUps, task)
			cu.Reason += fmt.Sprintf(" (%d row(s) of %d fragment(s) in this plan's task", rows, len(ids))
			if len(parts) > 0 {
				cu.Reason += fmt.Sprintf(", run as %d delta tasks of at most %d row(s) (catchup_part_rows, %s; whole fragments) merged by one task",
					len(parts), in.Policy.Index.CatchUpPartRows.Value, in.Policy.Index.CatchUpPartRows.Source)
			} else if why := noCatchUpParts(index.Kind(d.Kind), d.Segments); why != "" && in.Policy.Index.CatchUpPartRows.Value > 0 && rows+pastRows > in.Policy.Index.CatchUpPartRows.Value {
				cu.Reason += "; not split into delta tasks (catchup_part_rows): " + why
			}
			if merge {
				cu.Reason += fmt.Sprintf(", which merges the index's %d segment(s)", d.Segments)
			}
			cu.Reason += ")"
		}
		if cu.Merge && !merge {
			cu.Reason += "; the segments are merged by the task that takes the backlog's last fragments"
		}
		if full > 0 {
			left = append(left, fmt.Sprintf("%d fragment(s) past the task bound of %d rows", full, CatchUpMaxRows))
		}
		if len(left) > 0 {
			cu.Reason += "; caught up on a later plan: " + strings.Join(left, "; ")
		}
	}
}

// noCatchUpParts says why a catch-up of an index of kind k with segments
// segments is not run as delta tasks, and what bounds its one task ("" when
// it may be).
func noCatchUpParts(k index.Kind, segments int) string {
	switch {
	case k == index.KindBitmap || k == index.KindLabelList:
		return fmt.Sprintf("a %s catch-up rewrites the segment's one bitmap file with the added rows' bitmaps, and lanced merges no bitmap deltas; one task per plan takes at most %d rows (the rest on later plans), holding their bitmaps", k, CatchUpMaxRows)
	case k == index.KindFM:
		return "an FM catch-up rebuilds the index over every fragment in one task, bounded per partition by index.fm_max_bytes"
	case !k.IsVector() && segments > 1:
		return fmt.Sprintf("the catch-up merges the index's %d segments into one, which a merge of deltas (built on one segment) does not; one task per plan takes at most %d rows (the rest on later plans)", segments, CatchUpMaxRows)
	}
	return ""
}

// catchUpParts cuts fragments of lives live rows (in task order) into
// ranges of at most bound rows of whole fragments (a bigger fragment is a
// range of its own); nil when that makes one range or bound is 0.
func catchUpParts(lives []uint64, bound uint64) []job.RowRange {
	if bound == 0 {
		return nil
	}
	var out []job.RowRange
	var rows uint64
	for i, n := range lives {
		if len(out) == 0 || rows+n > bound && rows > 0 {
			out = append(out, job.RowRange{Lo: uint64(i), Hi: uint64(i)})
			rows = 0
		}
		out[len(out)-1].Hi = uint64(i + 1)
		rows += n
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// remapsInFlight returns the remap and rewrite tasks (slices and joins of
// rewrites included) in flight for the table, their keys parsed: a
// rewrite commits with the remaps of every segment that covers its old
// fragments and replaces those segments, so a catch-up built on (or
// merging) one of them would be refused at commit.
func remapsInFlight(in Input) []job.TaskKey {
	var out []job.TaskKey
	for _, key := range in.InFlight {
		k, err := job.ParseTaskKey(key)
		if err != nil || k.Table != in.Table {
			continue
		}
		kind := string(k.Kind)
		if kind == string(job.KindRewrite) || strings.HasPrefix(kind, string(job.KindRemap)+"/") ||
			strings.HasPrefix(kind, string(job.KindSlice)+"/"+string(job.KindRewrite)) ||
			strings.HasPrefix(kind, string(job.KindJoin)+"/"+string(job.KindRewrite)) {
			out = append(out, k)
		}
	}
	return out
}

// remapOf returns the key of an in-flight remap batch whose rewrite will
// replace a segment of index name (the segment covers one of its
// fragments), or "".
func remapOf(indices []*tablepb.IndexMetadata, name string, remapping []job.TaskKey) string {
	for _, ix := range indices {
		if ix.GetName() != name {
			continue
		}
		bm, err := index.DecodeBitmap(ix.GetFragmentBitmap())
		for _, k := range remapping {
			if err != nil || bm == nil || slices.ContainsFunc(k.Fragments, func(id uint64) bool { return bm.Contains(uint32(id)) }) {
				return k.String()
			}
		}
	}
	return ""
}

// fmFileTextRatio: an FM partition file holds about 0.8 bytes per byte of
// text (wavelet tree bits about 0.55 for text, suffix array samples 0.25).
const fmFileTextRatio = 0.8

// fmPartitionText estimates the text of the largest partition of the FM
// segments at segs from their files' recorded sizes, and names that file
// (0 and "" when no size is recorded).
func fmPartitionText(ic *indexCoverage, segs []int) (uint64, string) {
	var est uint64
	var name string
	for _, s := range segs {
		for _, f := range ic.metas[s].GetFiles() {
			if e := uint64(float64(f.GetSizeBytes()) / fmFileTextRatio); e > est {
				est, name = e, f.GetPath()
			}
		}
	}
	return est, name
}

// ftsCatchUpSupported reports whether lanced tokenizes exactly as Lance does
// with the tokenizer params the FTS index entry records (the executor
// checks metadata.lance's params again, custom stop words included).
func ftsCatchUpSupported(seg *tablepb.IndexMetadata) error {
	p, err := text.ParamsFromDetails(seg.GetIndexDetails().GetValue())
	if err != nil {
		return err
	}
	return p.Supported()
}
