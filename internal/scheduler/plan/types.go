package plan

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// FormatVersion is the version of a Plan's JSON form.
const FormatVersion = 1

// ErrPlanFormat is returned when a serialized plan was written by a release
// with another plan format.
var ErrPlanFormat = errors.New("unsupported plan format")

// Input is everything the planner looks at.
type Input struct {
	// Table is the table URI the tasks name.
	Table string
	// Manifest is the manifest at the read version.
	Manifest *tablepb.Manifest
	// Indices is the manifest's index section (may be nil).
	Indices []*tablepb.IndexMetadata
	// Stats are the manifest's layout stats (format.ComputeLayoutStats);
	// optional: the planner counts live files itself when nil. The file-count
	// trigger uses Fragments[].DataFiles.
	Stats *format.LayoutStats
	// Policy is the table's effective policy.
	Policy policy.Effective
	// InFlight are the keys (job.Task.Key) of tasks queued or running
	// for this table; their fragments are left out.
	InFlight []string
	// Quarantined are fragments lanced found corrupt, with the reason
	// (engine/quarantine); they are left out until they change.
	Quarantined map[uint64]string
	// Unremappable are index segments whose files lanced could not remap
	// (engine/quarantine index marks), segment uuid → reason: with
	// index_coverage = remap the fragments such a segment covers are kept
	// with the reason, the rest of the table is planned as usual.
	Unremappable map[string]string
	// Drift is the recorded drift of the table's vector indices, by index
	// name (engine/drift records that apply to these index entries).
	Drift map[string]drift.Record
	// LegacyIndexMaxFragmentID gives, for an index without a fragment
	// bitmap, the max_fragment_id of the manifest at the index's
	// dataset_version (Lance treats such an index as covering ids below
	// it). Keyed by dataset_version. A missing entry makes the index cover
	// every fragment, which is the safe side for index_coverage = keep.
	LegacyIndexMaxFragmentID map[uint64]uint32
}

// Actions of a Decision.
const (
	ActionRewrite = "rewrite"
	ActionRepack  = "repack"
	ActionSkip    = "skip"
)

// Decision says what the plan does with one fragment and why.
type Decision struct {
	Fragment uint64 `json:"fragment"`
	Action   string `json:"action"`
	Reason   string `json:"reason"`
	// Task is the index of the fragment's task in Rewrites or Repacks, or
	// -1 when skipped.
	Task int `json:"task"`
	// Cost is the estimated cost of rewriting the fragment, set when it is
	// rewritten or when min_reclaim_ratio kept it out of a rewrite.
	Cost *Cost `json:"cost,omitempty"`
}

// Plan is the planner's output.
type Plan struct {
	Version     int               `json:"plan_version"`
	Table       string            `json:"table"`
	ReadVersion uint64            `json:"read_version"`
	Rewrites    []job.RewriteTask `json:"rewrites"`
	Repacks     []job.RepackTask  `json:"repacks"`
	// CatchUps add unindexed rows to indices (one new segment each).
	CatchUps  []job.CatchUpTask `json:"catch_ups,omitempty"`
	Decisions []Decision        `json:"decisions"`
	// Indices says per index what the plan does to it: to the fragments
	// it covers (rewrite scope) and to the rows it does not (catch-up).
	Indices  []IndexDecision `json:"indices,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
}

// Empty reports whether the plan has no task.
func (p *Plan) Empty() bool {
	return len(p.Rewrites) == 0 && len(p.Repacks) == 0 && len(p.CatchUps) == 0
}

// Tasks returns the plan's tasks in execution order: rewrites, then
// repacks, then index catch-ups; a task planned in row slices (or a
// catch-up planned in delta parts) comes as its slices (job.Task.Slices).
func (p *Plan) Tasks() []job.Task {
	out := make([]job.Task, 0, len(p.Rewrites)+len(p.Repacks)+len(p.CatchUps))
	add := func(t job.Task) {
		if ss := t.Slices(); ss != nil {
			out = append(out, ss...)
			return
		}
		out = append(out, t)
	}
	for i := range p.Rewrites {
		add(job.Task{Rewrite: &p.Rewrites[i]})
	}
	for i := range p.Repacks {
		add(job.Task{Repack: &p.Repacks[i]})
	}
	for i := range p.CatchUps {
		add(job.Task{CatchUp: &p.CatchUps[i]})
	}
	return out
}

// Decode reads a plan's JSON form, refusing other format versions.
func Decode(data []byte) (*Plan, error) {
	var probe struct {
		Version *int `json:"plan_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	if probe.Version == nil || *probe.Version != FormatVersion {
		v := "none"
		if probe.Version != nil {
			v = fmt.Sprint(*probe.Version)
		}
		return nil, fmt.Errorf("decode plan: %w: plan_version %s, this release reads %d", ErrPlanFormat, v, FormatVersion)
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	return &p, nil
}
