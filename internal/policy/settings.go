package policy

import (
	"fmt"
	"time"

	"github.com/lanced-dev/lanced/internal/duration"
)

// kind is how a setting's HCL value is read.
type kind int

const (
	kCount    kind = iota // whole number >= min
	kSize                 // "90GiB" or a number of bytes
	kBool                 // true/false
	kFraction             // number in (0, 1]
	kRate                 // number > 0
	kEnum                 // one of enum
	kDuration             // "168h", "7d"
	kGroups               // [["a"], ["b", "c"]]
	kWindows              // ["Mon-Fri 01:00-05:00"]
	kText                 // any string (table config only)
)

// spec describes one setting: where it lives in HCL, how it is read, the
// table config key that may set it, and how it lands in Effective.
type spec struct {
	section string // "" for top-level attributes (scope, enabled)
	name    string
	kind    kind
	min     uint64   // kCount only
	enum    []string // kEnum only
	// refused are values a kEnum or kBool setting recognizes but does not
	// accept, each with the reason and what to use instead.
	refused map[string]string
	// configKey is the manifest config key that sets it, if any.
	configKey string
	set       func(e *Effective, v any, s Source)
}

func (s *spec) path() string {
	if s.section == "" {
		return s.name
	}
	return s.section + "." + s.name
}

func setU(f func(e *Effective) *Setting[uint64]) func(*Effective, any, Source) {
	return func(e *Effective, v any, s Source) { *f(e) = Setting[uint64]{Value: v.(uint64), Source: s} }
}

func setB(f func(e *Effective) *Setting[bool]) func(*Effective, any, Source) {
	return func(e *Effective, v any, s Source) { *f(e) = Setting[bool]{Value: v.(bool), Source: s} }
}

func setF(f func(e *Effective) *Setting[float64]) func(*Effective, any, Source) {
	return func(e *Effective, v any, s Source) { *f(e) = Setting[float64]{Value: v.(float64), Source: s} }
}

func setS(f func(e *Effective) *Setting[string]) func(*Effective, any, Source) {
	return func(e *Effective, v any, s Source) { *f(e) = Setting[string]{Value: v.(string), Source: s} }
}

func setD(f func(e *Effective) *Setting[Duration]) func(*Effective, any, Source) {
	return func(e *Effective, v any, s Source) {
		*f(e) = Setting[Duration]{Value: Duration(v.(time.Duration)), Source: s}
	}
}

// specs lists every setting, in the order explain prints them.
var specs = []*spec{
	{name: "enabled", kind: kBool, set: setB(func(e *Effective) *Setting[bool] { return &e.Enabled })},
	{name: "scope", kind: kEnum, enum: []string{ScopeAll, ScopeRewrite, ScopeRepack, ScopeIndex}, set: setS(func(e *Effective) *Setting[string] { return &e.Scope })},

	{section: "compaction", name: "target_rows_per_fragment", kind: kCount, min: 1, configKey: "lance.compaction.target_rows_per_fragment",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.TargetRowsPerFragment })},
	{section: "compaction", name: "max_rows_per_file", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxRowsPerFile })},
	{section: "compaction", name: "max_bytes_per_file", kind: kSize, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxBytesPerFile })},
	{section: "compaction", name: "max_rows_per_group", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxRowsPerGroup })},
	{section: "compaction", name: "materialize_deletions", kind: kBool, configKey: "lance.compaction.materialize_deletions",
		set: setB(func(e *Effective) *Setting[bool] { return &e.Compaction.MaterializeDeletions })},
	{section: "compaction", name: "materialize_deletions_threshold", kind: kFraction, configKey: "lance.compaction.materialize_deletions_threshold",
		set: setF(func(e *Effective) *Setting[float64] { return &e.Compaction.MaterializeDeletionsThreshold })},
	{section: "compaction", name: "max_source_fragments", kind: kCount, min: 1, configKey: "lance.compaction.max_source_fragments",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxSourceFragments })},
	{section: "compaction", name: "max_source_rows", kind: kCount, min: 1, configKey: "lance.compaction.max_source_rows",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxSourceRows })},
	{section: "compaction", name: "max_source_bytes", kind: kSize, min: 1, configKey: "lance.compaction.max_source_bytes",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.MaxSourceBytes })},
	{section: "compaction", name: "min_reclaim_ratio", kind: kRate,
		set: setF(func(e *Effective) *Setting[float64] { return &e.Compaction.MinReclaimRatio })},
	{section: "compaction", name: "index_coverage", kind: kEnum, enum: []string{CoverageKeep, CoverageUnindex, CoverageRemap, CoverageDefer},
		set: setS(func(e *Effective) *Setting[string] { return &e.Compaction.IndexCoverage })},
	{section: "compaction", name: "commit_batch_tasks", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.CommitBatchTasks })},
	{section: "compaction", name: "slice_bytes", kind: kSize, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Compaction.SliceBytes })},

	{section: "repack", name: "max_data_files_per_fragment", kind: kCount, min: 1, configKey: "lance.compaction.max_data_files_per_fragment",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Repack.MaxDataFilesPerFragment })},
	{section: "repack", name: "column_groups", kind: kGroups, configKey: "lance.compaction.column_groups",
		set: func(e *Effective, v any, s Source) {
			e.Repack.ColumnGroups = Setting[[][]string]{Value: v.([][]string), Source: s}
		}},

	{section: "cleanup", name: "older_than", kind: kDuration, configKey: "lance.auto_cleanup.older_than",
		set: setD(func(e *Effective) *Setting[Duration] { return &e.Cleanup.OlderThan })},
	{section: "cleanup", name: "keep_versions", kind: kCount, min: 1, configKey: "lance.auto_cleanup.retain_versions",
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Cleanup.KeepVersions })},
	{section: "cleanup", name: "keep_tagged", kind: kBool,
		set: setB(func(e *Effective) *Setting[bool] { return &e.Cleanup.KeepTagged })},
	{section: "cleanup", name: "unverified_after", kind: kDuration,
		set: setD(func(e *Effective) *Setting[Duration] { return &e.Cleanup.UnverifiedAfter })},
	{section: "cleanup", name: "delete_rate", kind: kRate, configKey: "lance.auto_cleanup.delete_rate_limit",
		set: setF(func(e *Effective) *Setting[float64] { return &e.Cleanup.DeleteRate })},

	{section: "schedule", name: "debounce", kind: kDuration,
		set: setD(func(e *Effective) *Setting[Duration] { return &e.Schedule.Debounce })},
	{section: "schedule", name: "max_delay", kind: kDuration,
		set: setD(func(e *Effective) *Setting[Duration] { return &e.Schedule.MaxDelay })},
	{section: "schedule", name: "min_interval", kind: kDuration,
		set: setD(func(e *Effective) *Setting[Duration] { return &e.Schedule.MinInterval })},
	{section: "schedule", name: "windows", kind: kWindows,
		set: func(e *Effective, v any, s Source) {
			e.Schedule.Windows = Setting[[]Window]{Value: v.([]Window), Source: s}
		}},

	{section: "index", name: "max_unindexed_rows", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Index.MaxUnindexedRows })},
	{section: "index", name: "max_unindexed_fraction", kind: kFraction,
		set: setF(func(e *Effective) *Setting[float64] { return &e.Index.MaxUnindexedFraction })},
	{section: "index", name: "max_segments", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Index.MaxSegments })},
	{section: "index", name: "drift_threshold", kind: kFraction,
		set: setF(func(e *Effective) *Setting[float64] { return &e.Index.DriftThreshold })},
	{section: "index", name: "remap_part_bytes", kind: kSize, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Index.RemapPartBytes })},
	{section: "index", name: "catchup_part_rows", kind: kCount, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Index.CatchUpPartRows })},
	{section: "index", name: "fm_max_bytes", kind: kSize, min: 1,
		set: setU(func(e *Effective) *Setting[uint64] { return &e.Index.FMMaxBytes })},
	{section: "index", name: "retrain", kind: kBool,
		refused: map[string]string{"true": "retrain = true: lanced does not retrain an index's model (IVF k-means, PQ/SQ training); it adds new rows with the trained model and reports drift (lanced_index_drift_ratio, the plan's retrain recommendation past drift_threshold). Retrain with Lance's createIndex(replace: true) and leave retrain unset or false."},
		set:     setB(func(e *Effective) *Setting[bool] { return &e.Index.Retrain })},
}

// sections lists the nested blocks of a table or defaults block.
var sections = []string{"compaction", "repack", "cleanup", "schedule", "index"}

// parseConfigValue reads a table config value for sp. Table config is not
// ours, so a bad value is a warning and the next layer decides.
func parseConfigValue(sp *spec, raw string) (any, error) {
	switch sp.kind {
	case kCount:
		var n uint64
		if _, err := fmt.Sscan(raw, &n); err != nil || fmt.Sprint(n) != raw {
			return nil, fmt.Errorf("%s = %q: not a whole number", sp.configKey, raw)
		}
		if n < sp.min {
			return nil, fmt.Errorf("%s = %q: must be at least %d", sp.configKey, raw, sp.min)
		}
		return n, nil
	case kSize:
		n, err := ParseSize(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.configKey, err)
		}
		if n < sp.min {
			return nil, fmt.Errorf("%s = %q: must be at least %d", sp.configKey, raw, sp.min)
		}
		return n, nil
	case kBool:
		switch raw {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("%s = %q: want true or false", sp.configKey, raw)
	case kFraction, kRate:
		var f float64
		if _, err := fmt.Sscan(raw, &f); err != nil {
			return nil, fmt.Errorf("%s = %q: not a number", sp.configKey, raw)
		}
		if sp.kind == kFraction && !(f > 0 && f <= 1) {
			return nil, fmt.Errorf("%s = %q: must be in (0, 1]", sp.configKey, raw)
		}
		if sp.kind == kRate && !(f > 0) {
			return nil, fmt.Errorf("%s = %q: must be above 0", sp.configKey, raw)
		}
		return f, nil
	case kDuration:
		d, err := duration.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.configKey, err)
		}
		return d, nil
	case kGroups:
		g, err := ParseColumnGroups(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.configKey, err)
		}
		return g, nil
	case kText:
		return raw, nil
	}
	return nil, fmt.Errorf("%s: not settable from table config", sp.configKey)
}
