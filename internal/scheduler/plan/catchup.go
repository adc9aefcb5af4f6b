package plan

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/index"
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
var catchUpKinds = map[index.Kind]bool{}

// CatchUpSupported reports whether lanced adds unindexed rows to indices
// of the kind.
func CatchUpSupported(k index.Kind) bool { return catchUpKinds[k] }

// CatchUp is the catch-up part of an IndexDecision.
type CatchUp struct {
	index.Backlog
	Action string `json:"action"`
	Reason string `json:"reason"`
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
	}
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
	// Lance's optimize_indices (default options) writes one new delta
	// segment per vector index and replaces a scalar index by one merged
	// segment: https://github.com/lancedb/lance/blob/main/rust/lance/src/index/append.rs
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
	why := joinReason(trigger, merge)
	var blocked []string
	if !catchUpKinds[kind] {
		blocked = append(blocked, fmt.Sprintf("lanced cannot catch up %s indices yet", kind))
	}
	if merge != "" {
		blocked = append(blocked, "lanced cannot merge index segments yet")
	}
	if len(blocked) > 0 {
		cu.Action = CatchUpDue
		cu.Reason = why + "; " + joinAll(blocked) + ": run Lance's optimize() (or createIndex with replace to retrain)"
		return
	}
	cu.Action, cu.Reason = CatchUpPlanned, why+"; rows added with the index's trained model"
	if p.Retrain.Value {
		cu.Reason += " (retrain = true, but lanced does not detect drift or retrain yet)"
	}
}

func joinAll(s []string) string {
	out := ""
	for _, v := range s {
		out = joinReason(out, v)
	}
	return out
}
