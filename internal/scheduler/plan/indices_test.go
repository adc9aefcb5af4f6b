package plan

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

func vectorIndex(t *testing.T, name string, ids ...uint32) *tablepb.IndexMetadata {
	ix := indexMeta(t, name, ids...)
	ix.IndexDetails = &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails", Value: []byte{0x22, 0x04, 0x08, 0x08, 0x10, 0x04}}
	return ix
}

func btreeIndex(t *testing.T, name string, ids ...uint32) *tablepb.IndexMetadata {
	ix := indexMeta(t, name, ids...)
	ix.IndexDetails = &anypb.Any{TypeUrl: "/lance.table.BTreeIndexDetails"}
	return ix
}

func indexDecision(t *testing.T, p *Plan, name string) IndexDecision {
	t.Helper()
	for _, d := range p.Indices {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no decision for index %s: %+v", name, p.Indices)
	return IndexDecision{}
}

// The failure the unindex guard prevents: a BTree on id and an IVF_PQ on
// vec over fragments 0-3, all rewritten. Real Lance then drops the vector
// index at its next delete. The guard keeps the last task that holds
// covered fragments, for both indices, and says why.
func TestUnindexKeepsLastCoverage(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Compaction.IndexCoverage, policy.CoverageUnindex)
	})
	m := manifest(7, ab, small(0, 300), small(1, 300), small(2, 300), small(3, 300), small(4, 300), small(5, 300))
	idx := []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0, 1, 2, 3), vectorIndex(t, "vec_idx", 0, 1, 2, 3)}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx})
	// Lance bins {0,1,2,3} as [0..3] split at 1000 live rows: {0,1,2,3} is
	// one bin of 1200 rows → one task; {4,5} another.
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{4, 5}}) {
		t.Fatalf("rewrites %v\n%s", got, decisionsText(p))
	}
	for i := 0; i < 4; i++ {
		r := p.Decisions[i].Reason
		if p.Decisions[i].Action != ActionSkip || !strings.Contains(r, "last fragments covered by index") || !strings.Contains(r, "ivfPq") && !strings.Contains(r, "btree") {
			t.Fatalf("fragment %d: %+v", i, p.Decisions[i])
		}
	}
	if d := indexDecision(t, p, "vec_idx"); d.Action != IndexUntouched || len(d.Covered) != 4 || d.Kind != "ivfPq" {
		t.Fatalf("%+v", d)
	}

	// With a covered fragment that is not a candidate, the index keeps
	// coverage and the covered small fragments are rewritten (unindexed).
	m = manifest(7, ab, small(0, 300), small(1, 300), small(2, 300), small(3, 300), small(4, 5000), small(5, 300), small(6, 300))
	idx = []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0, 1, 2, 3, 4), vectorIndex(t, "vec_idx", 0, 1, 2, 3, 4)}
	p = Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx})
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{0, 1, 2, 3}, {5, 6}}) {
		t.Fatalf("rewrites %v\n%s", got, decisionsText(p))
	}
	d := indexDecision(t, p, "vec_idx")
	if d.Action != IndexUnindexed || !reflect.DeepEqual(d.Rewritten, []uint64{0, 1, 2, 3}) || !reflect.DeepEqual(d.Covered, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("%+v", d)
	}
}

// Several segments of one name: the index survives as long as one segment
// still covers a fragment.
func TestUnindexCountsEverySegmentOfAName(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Compaction.IndexCoverage, policy.CoverageUnindex)
	})
	m := manifest(7, ab, small(0, 300), small(1, 300), small(2, 5000), small(3, 300), small(4, 300))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0, 1), vectorIndex(t, "vec_idx", 2)}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx})
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{0, 1}, {3, 4}}) {
		t.Fatalf("rewrites %v\n%s", got, decisionsText(p))
	}
	if d := indexDecision(t, p, "vec_idx"); d.Segments != 2 || d.Action != IndexUnindexed {
		t.Fatalf("%+v", d)
	}
}

func TestIndexDecisions(t *testing.T) {
	frags := func() *tablepb.Manifest {
		return manifest(7, ab, small(0, 300), small(1, 300), small(2, 300), small(3, 300))
	}
	idx := func() []*tablepb.IndexMetadata {
		return []*tablepb.IndexMetadata{btreeIndex(t, "id_idx", 0, 1), vectorIndex(t, "vec_idx", 0, 1), btreeIndex(t, "gone", 9)}
	}
	for _, c := range []struct {
		name     string
		coverage string
		stable   bool
		want     map[string]string
		reason   string
	}{
		{"keep", policy.CoverageKeep, false, map[string]string{"id_idx": IndexKeep, "vec_idx": IndexKeep, "gone": IndexKeep}, "index_coverage = keep"},
		{"remap", policy.CoverageRemap, false, map[string]string{"id_idx": IndexRemap, "vec_idx": IndexRemap, "gone": IndexUntouched}, "new uuid"},
		{"stable row ids", policy.CoverageKeep, true, map[string]string{"id_idx": IndexBitmapOnly, "vec_idx": IndexBitmapOnly, "gone": IndexUntouched}, "stable row ids"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := pol(func(e *policy.Effective) {
				set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
				set(&e.Compaction.IndexCoverage, c.coverage)
			})
			m := frags()
			if c.stable {
				m.ReaderFeatureFlags |= format.FlagStableRowIDs
			}
			p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx()})
			got := map[string]string{}
			for _, d := range p.Indices {
				got[d.Name] = d.Action
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			if d := indexDecision(t, p, "id_idx"); !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("reason %q", d.Reason)
			}
			if d := indexDecision(t, p, "gone"); len(d.Covered) != 0 {
				t.Fatalf("gone covers %v", d.Covered)
			}
		})
	}
}

// A task in flight may commit first: its fragments do not keep an index
// alive, so the guard holds back the last task of this plan.
func TestUnindexCountsInFlightFragmentsAsRewritten(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Compaction.IndexCoverage, policy.CoverageUnindex)
	})
	m := manifest(7, ab, small(0, 300), small(1, 300), small(2, 5000), small(3, 300), small(4, 300))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0, 1, 3, 4)}
	busy := job.Task{Rewrite: &job.RewriteTask{Table: "t", ReadVersion: 6, Fragments: []uint64{0, 1}, TargetRowsPerFragment: 1000}}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx, InFlight: []string{busy.Key()}})
	if got := rewriteGroups(p); got != nil {
		t.Fatalf("rewrites %v\n%s", got, decisionsText(p))
	}
	if !strings.Contains(p.Decisions[3].Reason, "last fragments covered by index vec_idx") {
		t.Fatalf("%+v", p.Decisions[3])
	}
}

// With a remapper for every index type that covers them, indexed fragments
// are rewritten under index_coverage = remap and the index is remapped.
func TestRemapPlansIndexedFragments(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Compaction.IndexCoverage, policy.CoverageRemap)
	})
	m := manifest(7, ab, small(0, 300), small(1, 300), small(2, 300), small(3, 300))
	idx := []*tablepb.IndexMetadata{vectorIndex(t, "vec_idx", 0, 1)}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: idx})
	d := indexDecision(t, p, "vec_idx")
	if d.Action != IndexRemap || !reflect.DeepEqual(d.Rewritten, []uint64{0, 1}) {
		t.Fatalf("vec_idx: %+v\n%s", d, decisionsText(p))
	}
	got := rewriteGroups(p)
	if len(got) != 2 {
		t.Fatalf("rewrites %v, want the indexed pair and the unindexed pair apart (Lance bins by index set)", got)
	}
	for _, r := range p.Rewrites {
		if r.IndexCoverage != policy.CoverageRemap {
			t.Fatalf("task coverage %q", r.IndexCoverage)
		}
	}
}

// An index type no remapper takes keeps the fragments it covers under
// remap, with the reason; another index over the same fragments is then
// untouched.
func TestRemapKeepsFragmentsOfUnremappableIndices(t *testing.T) {
	e := pol(func(e *policy.Effective) {
		set(&e.Compaction.TargetRowsPerFragment, uint64(1000))
		set(&e.Compaction.IndexCoverage, policy.CoverageRemap)
	})
	m := manifest(7, ab, small(0, 300), small(1, 300), small(2, 300), small(3, 300))
	odd := indexMeta(t, "odd_idx", 0, 1)
	odd.IndexDetails = &anypb.Any{TypeUrl: "/lance.table.SomeFutureIndexDetails"}
	p := Compute(Input{Table: "t", Manifest: m, Policy: e, Indices: []*tablepb.IndexMetadata{odd, vectorIndex(t, "vec_idx", 0, 1)}})
	if d := indexDecision(t, p, "odd_idx"); d.Action != IndexKeep || !strings.Contains(d.Reason, "cannot remap") || !strings.Contains(d.Reason, "odd_idx") {
		t.Fatalf("odd_idx: %+v", d)
	}
	if d := indexDecision(t, p, "vec_idx"); d.Action != IndexUntouched {
		t.Fatalf("vec_idx: %+v", d)
	}
	if got := rewriteGroups(p); !reflect.DeepEqual(got, [][]uint64{{2, 3}}) {
		t.Fatalf("rewrites %v", got)
	}
	if !strings.Contains(p.Decisions[0].Reason, "odd_idx") {
		t.Fatalf("fragment 0: %s", p.Decisions[0].Reason)
	}
}
