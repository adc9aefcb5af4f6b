package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// budget applies max_source_fragments/rows/bytes to tasks in order: whole
// tasks are taken until the next one would pass a limit, and then nothing
// more is.
type budget struct {
	maxFrags, maxRows, maxBytes uint64
	frags, rows, bytes          uint64
	closed                      string
}

// take reports whether a task of the given size fits, and books it if so.
// Once one task does not fit, no later task is taken.
func (b *budget) take(frags, rows, bytes uint64) (bool, string) {
	if b.closed != "" {
		return false, b.closed
	}
	over := func(limit, used, add uint64, name string) string {
		if limit > 0 && used+add > limit {
			return fmt.Sprintf("over %s %d (this task adds %d to %d already planned); left for a later run", name, limit, add, used)
		}
		return ""
	}
	for _, why := range []string{
		over(b.maxFrags, b.frags, frags, "max_source_fragments"),
		over(b.maxRows, b.rows, rows, "max_source_rows"),
		over(b.maxBytes, b.bytes, bytes, "max_source_bytes"),
	} {
		if why != "" {
			b.closed = why
			return false, why
		}
	}
	b.frags += frags
	b.rows += rows
	b.bytes += bytes
	return true, ""
}

func dataBytes(f *tablepb.DataFragment) uint64 {
	var n uint64
	for _, df := range f.GetFiles() {
		n += df.GetFileSizeBytes()
	}
	return n
}

// Compute computes the maintenance plan of one table version. It is pure.
func Compute(in Input) *Plan {
	m := in.Manifest
	frags := m.GetFragments()
	p := &Plan{Version: FormatVersion, Table: in.Table, ReadVersion: m.GetVersion(),
		Rewrites: []job.RewriteTask{}, Repacks: []job.RepackTask{}}
	warn := func(s string) { p.Warnings = append(p.Warnings, s) }
	pol := in.Policy
	reasons := make([]string, len(frags))
	decided := make([]bool, len(frags))
	p.Decisions = make([]Decision, len(frags))
	for i, f := range frags {
		p.Decisions[i] = Decision{Fragment: f.GetId(), Action: ActionSkip, Task: -1}
	}
	if !pol.Enabled.Value {
		for i := range reasons {
			reasons[i] = "maintenance disabled by policy (" + pol.Enabled.Source.String() + ")"
		}
		return finishPlan(p, decided, reasons)
	}
	// Unknown writer feature flags: lanced must not write this table.
	if err := format.CheckWritable(m); err != nil {
		warn(err.Error())
		for i := range reasons {
			reasons[i] = "table not writable by this release: " + err.Error()
		}
		return finishPlan(p, decided, reasons)
	}

	excluded := excludedFragments(in, frags, warn)
	c := pol.Compaction
	b := &budget{maxFrags: c.MaxSourceFragments.Value, maxRows: c.MaxSourceRows.Value, maxBytes: c.MaxSourceBytes.Value}
	inRewrite := make([]bool, len(frags))
	scope := pol.Scope.Value
	if scope == policy.ScopeAll || scope == policy.ScopeRewrite {
		planRewrites(in, p, frags, excluded, inRewrite, decided, reasons, b, warn)
	} else {
		for i := range reasons {
			reasons[i] = "rewrites not in scope (scope = " + scope + ")"
		}
		ic := newIndexCoverage(in.Indices, in.LegacyIndexMaxFragmentID, warn)
		p.Indices = indexDecisions(ic, frags, inRewrite, c.IndexCoverage.Value, false)
		catchUpDecisions(ic, frags, p.Indices, pol)
	}

	if scope == policy.ScopeAll || scope == policy.ScopeRepack {
		planRepacks(in, p, frags, excluded, inRewrite, decided, reasons, b, warn)
	}
	planCatchUps(in, p, frags, excluded, inRewrite)
	driftReasons(in, p)
	planSlices(p, frags, c.SliceBytes.Value)
	return finishPlan(p, decided, reasons)
}

// minSliceRows keeps slices from getting tiny: a fragment is cut into at
// most physical rows / minSliceRows slices.
const minSliceRows = 64 * 1024

// planSlices splits every rewrite of one fragment and every repack whose
// files hold more than sliceBytes into row slices of about sliceBytes
// each (job.SliceTask), saying so in the fragment's decision.
func planSlices(p *Plan, frags []*tablepb.DataFragment, sliceBytes uint64) {
	if sliceBytes == 0 {
		return
	}
	byID := format.FragmentsByID(&tablepb.Manifest{Fragments: frags})
	cut := func(id, bytes uint64) []job.RowRange {
		f := byID[id]
		rows := f.GetPhysicalRows()
		if bytes <= sliceBytes || rows < 2*minSliceRows {
			return nil
		}
		n := min((bytes+sliceBytes-1)/sliceBytes, rows/minSliceRows)
		out := make([]job.RowRange, n)
		for i := range out {
			out[i] = job.RowRange{Lo: rows * uint64(i) / n, Hi: rows * uint64(i+1) / n}
		}
		return out
	}
	note := func(action string, task int, rs []job.RowRange) {
		for i := range p.Decisions {
			d := &p.Decisions[i]
			if d.Action == action && d.Task == task {
				d.Reason = joinReason(d.Reason, fmt.Sprintf("in %d row slices of about %d rows (files over slice_bytes %d)", len(rs), rs[0].Hi-rs[0].Lo, sliceBytes))
			}
		}
	}
	for i := range p.Rewrites {
		t := &p.Rewrites[i]
		if len(t.Fragments) == 1 {
			if t.Slices = cut(t.Fragments[0], t.Bytes); t.Slices != nil {
				note(ActionRewrite, i, t.Slices)
			}
		}
	}
	for i := range p.Repacks {
		t := &p.Repacks[i]
		if t.Slices = cut(t.Fragment, t.Bytes); t.Slices != nil {
			note(ActionRepack, i, t.Slices)
		}
	}
}

// finishPlan gives every fragment no task decided its reason.
func finishPlan(p *Plan, decided []bool, reasons []string) *Plan {
	for i := range p.Decisions {
		if !decided[i] {
			p.Decisions[i].Reason = reasons[i]
			if p.Decisions[i].Reason == "" {
				p.Decisions[i].Reason = "nothing to do"
			}
		}
	}
	return p
}

// excludedFragments says, per fragment, why no task may take it ("" when
// one may): a task in flight for this table holds it, it is quarantined,
// lanced does not support it, or its row counts are unknown.
func excludedFragments(in Input, frags []*tablepb.DataFragment, warn func(string)) []string {
	excluded := make([]string, len(frags))
	inFlight := map[uint64]string{}
	for _, key := range in.InFlight {
		k, err := job.ParseTaskKey(key)
		if err != nil {
			warn(fmt.Sprintf("ignored in-flight task key: %v", err))
			continue
		}
		if k.Table != in.Table {
			continue
		}
		for _, id := range k.Fragments {
			inFlight[id] = key
		}
	}
	for i, f := range frags {
		if key, ok := inFlight[f.GetId()]; ok {
			excluded[i] = "in flight: " + key
		} else if why, ok := in.Quarantined[f.GetId()]; ok {
			excluded[i] = "quarantined: " + why
		} else if err := job.CheckFragment(f); err != nil {
			excluded[i] = "unsupported: " + err.Error()
		} else if _, _, why := fragRows(f); why != "" {
			excluded[i] = "row counts unknown: " + why
		}
	}
	return excluded
}

// planRewrites bins the fragments into rewrite tasks within the budget,
// marks the fragments they take in inRewrite and decides the indices.
func planRewrites(in Input, p *Plan, frags []*tablepb.DataFragment, excluded []string, inRewrite, decided []bool,
	reasons []string, b *budget, warn func(string)) {
	m, pol := in.Manifest, in.Policy
	c := pol.Compaction
	coverage := c.IndexCoverage.Value
	stable := m.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0
	threshold := c.MaterializeDeletionsThreshold.Value
	ic := newIndexCoverage(in.Indices, in.LegacyIndexMaxFragmentID, warn)
	setBlocking(ic, coverage, stable, in.Unremappable)
	fmBlocking(ic, pol.Index.FMMaxBytes)
	target := c.TargetRowsPerFragment.Value
	if target == 0 {
		target = policy.DefaultTargetRowsPerFragment
	}
	costs := make([]*Cost, len(frags))
	density := rowDensity(frags)
	binExcluded := excluded
	if !stable && pol.Scope.Value == policy.ScopeAll {
		binExcluded = catchUpFirst(ic, frags, pol, coverage, excluded)
	}
	tasks := planBins(frags, ic, rewriteOpts{
		target:      target,
		materialize: c.MaterializeDeletions.Value && threshold < 1,
		threshold:   float32(threshold),
		minReclaim:  c.MinReclaimRatio.Value,
	}, binExcluded, reasons, costs)
	for i, cost := range costs {
		if cost != nil {
			p.Decisions[i].Cost = cost
		}
	}
	tasks = protectLastCoverage(ic, frags, tasks, coverage, stable, binExcluded, reasons)
	for _, task := range tasks {
		var ids []uint64
		var rows, physical, bytes uint64
		fs := make([]*tablepb.DataFragment, len(task))
		for k, i := range task {
			fs[k] = frags[i]
		}
		cost := taskCost(fs, density, job.PageCost(in.Table))
		for _, i := range task {
			inRewrite[i] = true
			f := frags[i]
			ph, del, _ := fragRows(f)
			ids = append(ids, f.GetId())
			rows += ph - del
			physical += ph
			bytes += dataBytes(f)
		}
		ok, why := b.take(uint64(len(task)), physical, bytes)
		if !ok {
			for _, i := range task {
				reasons[i] = "rewrite candidate, " + why
			}
			continue
		}
		n := len(p.Rewrites)
		if p.Rewrites == nil || cap(p.Rewrites) == 0 {
			p.Rewrites = make([]job.RewriteTask, 0, len(tasks))
		}
		p.Rewrites = append(p.Rewrites, job.RewriteTask{
			Table: in.Table, ReadVersion: m.GetVersion(), Fragments: ids,
			TargetRowsPerFragment: target, MaxRowsPerFile: c.MaxRowsPerFile.Value,
			MaxBytesPerFile: c.MaxBytesPerFile.Value, MaxRowsPerGroup: c.MaxRowsPerGroup.Value,
			MaterializeDeletions: true, IndexCoverage: coverage, RemapPartBytes: pol.Index.RemapPartBytes.Value, FMMaxBytes: pol.Index.FMMaxBytes.Value, Rows: rows, Bytes: bytes,
			EstBytesRead: cost.Read, EstBytesWritten: cost.Write,
		})
		for _, i := range task {
			decided[i] = true
			fc := taskCost(frags[i:i+1], density, job.PageCost(in.Table))
			p.Decisions[i] = Decision{Fragment: frags[i].GetId(), Action: ActionRewrite, Task: n, Reason: reasons[i], Cost: &fc}
		}
	}
	p.Indices = indexDecisions(ic, frags, inRewrite, coverage, stable)
	noteRemapParts(ic, p.Indices, pol.Index.RemapPartBytes)
	catchUpDecisions(ic, frags, p.Indices, pol)
}

// planRepacks plans a repack for every fragment no rewrite took.
func planRepacks(in Input, p *Plan, frags []*tablepb.DataFragment, excluded []string, inRewrite, decided []bool,
	reasons []string, b *budget, warn func(string)) {
	r := in.Policy.Repack
	maxFiles := r.MaxDataFilesPerFragment.Value
	if in.Policy.Compaction.ForceBinaryCopy.Value {
		if maxFiles > 0 || r.ColumnGroups.Value != nil {
			warn("repacks are not planned under forced binary copy: they re-encode")
		}
		return
	}
	if maxFiles == 0 && r.ColumnGroups.Value == nil {
		return
	}
	s := newSchema(in.Manifest.GetFields())
	var groups [][]int32
	if r.ColumnGroups.Value != nil {
		groups = [][]int32{}
		for _, g := range r.ColumnGroups.Value {
			var ids []int32
			for _, name := range g {
				id, ok := s.byName[name]
				if !ok {
					warn(fmt.Sprintf("column group names %q, which is not a top-level column; skipped (%s)", name, r.ColumnGroups.Source))
					continue
				}
				ids = append(ids, id)
			}
			if len(ids) > 0 {
				groups = append(groups, ids)
			}
		}
	}
	// The file-count trigger reads the layout stats when given (the
	// per-fragment live file count of format.LayoutStats).
	statFiles := map[uint64]int{}
	if in.Stats != nil {
		for _, fl := range in.Stats.Fragments {
			statFiles[fl.ID] = fl.DataFiles
		}
	}
	type memo struct {
		files [][]int32
		why   string
	}
	cache := map[string]memo{}
	var key []byte
	for i, f := range frags {
		if decided[i] || inRewrite[i] {
			continue
		}
		if excluded[i] != "" && !strings.HasPrefix(excluded[i], "row counts unknown") {
			reasons[i] = excluded[i]
			continue
		}
		live := -1
		if n, ok := statFiles[f.GetId()]; ok {
			live = n
		}
		key = strconv.AppendInt(layoutKey(f, key[:0]), int64(live), 10)
		var files [][]int32
		var why string
		if m, ok := cache[string(key)]; ok {
			files, why = m.files, m.why
		} else {
			var cacheable bool
			files, why, cacheable = planFragmentRepackC(s, f, live, groups, maxFiles)
			if cacheable && len(cache) < 1<<16 {
				cache[string(key)] = memo{files, why}
			}
		}
		if files == nil {
			reasons[i] = joinReason(reasons[i], "no repack: "+why)
			continue
		}
		task := repackTask(in.Table, in.Manifest.GetVersion(), s, f, files)
		ok, over := b.take(1, f.GetPhysicalRows(), task.Bytes)
		if !ok {
			reasons[i] = joinReason(reasons[i], "repack due, "+over)
			continue
		}
		n := len(p.Repacks)
		p.Repacks = append(p.Repacks, task)
		decided[i] = true
		p.Decisions[i] = Decision{Fragment: f.GetId(), Action: ActionRepack, Task: n,
			Reason: fmt.Sprintf("%d live data files (max_data_files_per_fragment %d); writes %d new file(s), drops %d", liveFileCount(s, f), maxFiles, len(task.Files), len(task.Removes))}
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
