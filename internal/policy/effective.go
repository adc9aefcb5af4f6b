package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SourceKind says which layer a setting's value came from.
type SourceKind string

// The layers, highest precedence first.
const (
	FromPolicy       SourceKind = "policy"        // a matching table block
	FromTableConfig  SourceKind = "table_config"  // a key in the manifest's config
	FromDefaults     SourceKind = "defaults"      // the policy defaults block
	FromLanceDefault SourceKind = "lance_default" // Lance's own default
	// FromLancedDefault marks lanced's own settings (scheduling, caps,
	// repack), which Lance has no default for.
	FromLancedDefault SourceKind = "lanced_default"
	// FromDaemonConfig marks a scheduling default the daemon's config file
	// gave (its events block), below every policy layer.
	FromDaemonConfig SourceKind = "daemon_config"
)

// Source is where one setting's value came from.
type Source struct {
	Kind SourceKind `json:"kind"`
	// Where is "file:line" for policy and defaults, the config key for
	// table config, and empty for Lance defaults.
	Where string `json:"where,omitempty"`
	// Block is the glob of the table block that set it (policy only).
	Block string `json:"block,omitempty"`
}

func (s Source) String() string {
	switch s.Kind {
	case FromPolicy:
		return fmt.Sprintf("table %q (%s)", s.Block, s.Where)
	case FromTableConfig:
		return "table config " + s.Where
	case FromDefaults:
		return "defaults (" + s.Where + ")"
	}
	if s.Kind == FromLancedDefault {
		return "lanced default"
	}
	if s.Kind == FromDaemonConfig {
		return "daemon config (" + s.Where + ")"
	}
	return "lance default"
}

// Setting is one resolved value with its source.
type Setting[T any] struct {
	Value  T      `json:"value"`
	Source Source `json:"source"`
}

// Duration is a time.Duration that encodes to JSON as a Go duration string.
type Duration time.Duration

// MarshalJSON encodes the duration as a string like "168h0m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Index coverage modes: what a rewrite does with index coverage of the
// fragments it replaces (see internal/scheduler/plan/PLANNER.md).
const (
	CoverageKeep    = "keep"
	CoverageUnindex = "unindex"
	CoverageRemap   = "remap"
	// CoverageDefer is Lance's deferred index remap: the rewrite is
	// recorded in the table's fragment reuse index; index kinds real Lance
	// does not read through it everywhere are remapped in the same commit.
	CoverageDefer = "defer"
)

// Scopes select the kinds of task a table gets.
const (
	ScopeAll     = "all"
	ScopeRewrite = "rewrite"
	ScopeRepack  = "repack"
	// ScopeIndex: only index catch-up (adding unindexed rows to indices).
	ScopeIndex = "index"
)

// Compaction holds the rewrite (and shared) settings. Zero in the Max*
// settings means "no limit".
type Compaction struct {
	TargetRowsPerFragment         Setting[uint64]  `json:"target_rows_per_fragment"`
	MaxRowsPerFile                Setting[uint64]  `json:"max_rows_per_file"`
	MaxBytesPerFile               Setting[uint64]  `json:"max_bytes_per_file"`
	MaxRowsPerGroup               Setting[uint64]  `json:"max_rows_per_group"`
	MaterializeDeletions          Setting[bool]    `json:"materialize_deletions"`
	MaterializeDeletionsThreshold Setting[float64] `json:"materialize_deletions_threshold"`
	MaxSourceFragments            Setting[uint64]  `json:"max_source_fragments"`
	MaxSourceRows                 Setting[uint64]  `json:"max_source_rows"`
	MaxSourceBytes                Setting[uint64]  `json:"max_source_bytes"`
	// MinReclaimRatio is the least estimated bytes reclaimed (the deleted
	// rows' share of the fragment's data files) per byte rewritten for a
	// fragment that deletions alone make a rewrite candidate; 0 is no minimum.
	MinReclaimRatio  Setting[float64] `json:"min_reclaim_ratio"`
	IndexCoverage    Setting[string]  `json:"index_coverage"`
	CommitBatchTasks Setting[uint64]  `json:"commit_batch_tasks"`
	// SliceBytes: a rewrite or repack of one fragment whose files hold
	// more than this many bytes runs as row slices of about this many
	// bytes each, on any workers, joined by page copy.
	SliceBytes Setting[uint64] `json:"slice_bytes"`
	// ForceBinaryCopy mirrors Lance's CompactionMode::ForceBinaryCopy. lanced
	// has no policy knob for it yet; the planner honours it (no repacks).
	ForceBinaryCopy Setting[bool] `json:"force_binary_copy"`
}

// Repack holds the column repack settings: when a fragment's columns are
// moved into fewer data files without moving rows.
type Repack struct {
	// MaxDataFilesPerFragment is the live file limit; 0 means none.
	MaxDataFilesPerFragment Setting[uint64] `json:"max_data_files_per_fragment"`
	// ColumnGroups are groups of top-level column names; nil means none.
	ColumnGroups Setting[[][]string] `json:"column_groups"`
}

// Cleanup holds the retention settings.
type Cleanup struct {
	OlderThan       Setting[Duration] `json:"older_than"`
	KeepVersions    Setting[uint64]   `json:"keep_versions"`
	KeepTagged      Setting[bool]     `json:"keep_tagged"`
	UnverifiedAfter Setting[Duration] `json:"unverified_after"`
	// DeleteRate is deletes per second; 0 means unlimited.
	DeleteRate Setting[float64] `json:"delete_rate"`
}

// Schedule holds the timing settings.
type Schedule struct {
	Debounce    Setting[Duration] `json:"debounce"`
	MaxDelay    Setting[Duration] `json:"max_delay"`
	MinInterval Setting[Duration] `json:"min_interval"`
	// Windows are maintenance windows ("Mon-Fri 01:00-05:00", UTC); nil
	// means any time.
	Windows Setting[[]Window] `json:"windows"`
}

// Index holds the index catch-up settings: when rows appended since an
// index was built are added to it with its trained model, as Lance's
// optimize_indices does. Zero in the Max* settings means unset.
type Index struct {
	// MaxUnindexedRows: catch an index up once more live rows than this
	// are outside its fragment bitmaps.
	MaxUnindexedRows Setting[uint64] `json:"max_unindexed_rows"`
	// MaxUnindexedFraction: catch up once unindexed / live rows is above
	// this. With neither bound set, any unindexed row is caught up (as
	// Lance's optimize() does).
	MaxUnindexedFraction Setting[float64] `json:"max_unindexed_fraction"`
	// MaxSegments: merge an index's segments once it has more than this.
	MaxSegments Setting[uint64] `json:"max_segments"`
	// DriftThreshold: past this share of caught-up vectors far from every
	// centroid (see package drift), the plan recommends retraining.
	DriftThreshold Setting[float64] `json:"drift_threshold"`
	// Retrain would allow retraining the model (centroids, codebooks)
	// instead of reusing it; lanced refuses true (it does not retrain).
	Retrain Setting[bool] `json:"retrain"`
	// RemapPartBytes: the remap of a vector or btree index segment whose
	// files hold more than this many bytes runs as part tasks of about
	// this many bytes each (ranges of its IVF partitions or btree pages),
	// on any workers, joined by page copy.
	// 0: one task per segment.
	RemapPartBytes Setting[uint64] `json:"remap_part_bytes"`
	// CatchUpPartRows: a catch-up of more unindexed rows than this (of a
	// btree or FTS index of one segment, or an IVF/HNSW index) runs as
	// delta tasks of at most this many live rows each (whole fragments; a
	// bigger fragment is a delta of its own), on any workers, merged by
	// one final task.
	CatchUpPartRows Setting[uint64] `json:"catchup_part_rows"`
	// FMMaxBytes bounds the text of one partition (10,000 documents) of an
	// FM index lanced rebuilds (catch-up, or a rewrite of fragments it
	// covers): the build holds about 6 bytes per byte of it (text, a
	// 4-byte suffix array entry and a BWT byte per text byte). Past it the
	// plan reports the catch-up due and keeps the fragments the index
	// covers out of rewrites; a build that finds more fails with the
	// numbers.
	FMMaxBytes Setting[uint64] `json:"fm_max_bytes"`
}

// Effective is the resolved policy of one table: every setting with its
// value and where the value came from.
type Effective struct {
	Table      string          `json:"table"`
	Matched    []string        `json:"matched,omitempty"` // globs of matching table blocks, most specific first
	Enabled    Setting[bool]   `json:"enabled"`
	Scope      Setting[string] `json:"scope"`
	Compaction Compaction      `json:"compaction"`
	Repack     Repack          `json:"repack"`
	Cleanup    Cleanup         `json:"cleanup"`
	Schedule   Schedule        `json:"schedule"`
	Index      Index           `json:"index"`
	// Warnings are problems with table config values that were ignored.
	Warnings []string `json:"warnings,omitempty"`
}

// Lance 8.0.0's defaults (CompactionOptions in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/optimize.rs; LanceDB optimize for cleanup).
const (
	DefaultTargetRowsPerFragment = 1024 * 1024
	DefaultMaxRowsPerGroup       = 1024
	DefaultDeletionsThreshold    = 0.1
	DefaultOlderThan             = 7 * 24 * time.Hour
	DefaultUnverifiedAfter       = 7 * 24 * time.Hour
	// The daemon's defaults for waiting after a table changes (its config
	// file's events block replaces them; a policy's schedule block wins
	// over both).
	DefaultDebounce    = 5 * time.Second
	DefaultMaxDelay    = time.Minute
	DefaultMinInterval = 5 * time.Minute
	// DefaultSliceBytes is lanced's default slice_bytes: a fragment of
	// more than 2 GiB of files is rewritten or repacked in row slices.
	DefaultSliceBytes = 2 << 30
	// DefaultDriftThreshold is lanced's default drift_threshold: a fifth
	// of the caught-up vectors far from every centroid (rows from the
	// training distribution are far about 1% of the time).
	DefaultDriftThreshold = 0.2
	// DefaultRemapPartBytes is lanced's default index.remap_part_bytes: a
	// vector or btree index segment of more than 512 MiB of files is remapped in
	// parts.
	DefaultRemapPartBytes = 512 << 20
	// DefaultCatchUpPartRows is lanced's default catchup_part_rows: a
	// delta task holds at most 262,144 rows' codes (for IVF_FLAT over
	// 128-d float32 vectors, 128 MiB).
	DefaultCatchUpPartRows = 256 << 10
	// DefaultFMMaxBytes is lanced's default index.fm_max_bytes: an FM
	// partition of 256 MiB of text takes about 1.5 GiB to rebuild.
	DefaultFMMaxBytes = 256 << 20
)

func lance[T any](v T) Setting[T] {
	return Setting[T]{Value: v, Source: Source{Kind: FromLanceDefault}}
}

func lanced[T any](v T) Setting[T] {
	return Setting[T]{Value: v, Source: Source{Kind: FromLancedDefault}}
}

// LanceDefaults returns the Effective policy with nothing set: Lance's
// defaults everywhere.
func LanceDefaults(table string) Effective {
	return Effective{
		Table:   table,
		Enabled: lanced(true),
		Scope:   lanced(ScopeAll),
		Compaction: Compaction{
			TargetRowsPerFragment:         lance(uint64(DefaultTargetRowsPerFragment)),
			MaxRowsPerFile:                lance(uint64(0)),
			MaxBytesPerFile:               lance(uint64(0)),
			MaxRowsPerGroup:               lance(uint64(DefaultMaxRowsPerGroup)),
			MaterializeDeletions:          lance(true),
			MaterializeDeletionsThreshold: lance(DefaultDeletionsThreshold),
			MaxSourceFragments:            lanced(uint64(0)),
			MaxSourceRows:                 lanced(uint64(0)),
			MaxSourceBytes:                lanced(uint64(0)),
			MinReclaimRatio:               lanced(0.0),
			IndexCoverage:                 lance(CoverageRemap),
			CommitBatchTasks:              lanced(uint64(0)),
			SliceBytes:                    lanced(uint64(DefaultSliceBytes)),
			ForceBinaryCopy:               lanced(false),
		},
		Repack: Repack{
			MaxDataFilesPerFragment: lanced(uint64(0)),
			ColumnGroups:            lanced([][]string(nil)),
		},
		Cleanup: Cleanup{
			OlderThan:       lance(Duration(DefaultOlderThan)),
			KeepVersions:    lance(uint64(1)),
			KeepTagged:      lance(true),
			UnverifiedAfter: lance(Duration(DefaultUnverifiedAfter)),
			DeleteRate:      lanced(0.0),
		},
		Schedule: Schedule{
			Debounce:    lanced(Duration(DefaultDebounce)),
			MaxDelay:    lanced(Duration(DefaultMaxDelay)),
			MinInterval: lanced(Duration(DefaultMinInterval)),
			Windows:     lanced([]Window(nil)),
		},
		Index: Index{
			MaxUnindexedRows:     lanced(uint64(0)),
			MaxUnindexedFraction: lanced(0.0),
			MaxSegments:          lanced(uint64(0)),
			DriftThreshold:       lanced(DefaultDriftThreshold),
			RemapPartBytes:       lanced(uint64(DefaultRemapPartBytes)),
			CatchUpPartRows:      lanced(uint64(DefaultCatchUpPartRows)),
			FMMaxBytes:           lanced(uint64(DefaultFMMaxBytes)),
			Retrain:              lance(false),
		},
	}
}

// Row is one line of an explanation: a setting, its value and its source.
type Row struct {
	Setting string `json:"setting"`
	Value   any    `json:"value"`
	Source  Source `json:"source"`
	// ConfigKey is the table config key that can also set it.
	ConfigKey string `json:"config_key,omitempty"`
	// Display is the value as a policy file writes it ("64GiB", "7d").
	Display string `json:"display"`
	// Note says how the daemon uses the setting when that is not plain.
	Note string `json:"note,omitempty"`
}

// settingNotes are what explain adds to the settings the daemon does not
// apply as their name suggests.
var settingNotes = map[string]string{
	"schedule.debounce":     "the daemon maintains the table once no change came for this long (policy, else the config's events block, else 5s)",
	"schedule.max_delay":    "but at most this long after the first change (policy, else the config's events block, else 1m)",
	"schedule.min_interval": "spaces cleanup runs of a table",
	"schedule.windows":      "the daemon starts maintenance only inside a window (UTC); a change outside waits for the next one",
}

// Explain lists every setting of e with its value and source, in a fixed
// order.
func (e Effective) Explain() []Row {
	b, err := json.Marshal(e)
	if err != nil {
		return nil
	}
	var tree map[string]json.RawMessage
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil
	}
	var rows []Row
	for _, path := range SettingNames() {
		raw := tree
		section, name, nested := strings.Cut(path, ".")
		key := section
		if nested {
			if err := json.Unmarshal(tree[section], &raw); err != nil {
				continue
			}
			key = name
		}
		var s struct {
			Value  any    `json:"value"`
			Source Source `json:"source"`
		}
		if err := json.Unmarshal(raw[key], &s); err != nil {
			continue
		}
		rows = append(rows, Row{Setting: path, Value: s.Value, Source: s.Source, ConfigKey: ConfigKey(path),
			Display: display(path, s.Value), Note: settingNotes[path]})
	}
	return rows
}
