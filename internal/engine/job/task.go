package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TaskFormatVersion is the version of the JSON encoding of Task. A worker
// refuses a task whose format_version differs from its own: an older worker
// must never guess at a newer task's meaning (a worker that does not know a
// task kind could otherwise, for example, rewrite a fragment it was asked to
// repack).
const TaskFormatVersion = 1

// ErrTaskFormat is returned when a serialized task cannot be read by this
// release: another format version, an unknown kind, or unknown fields.
var ErrTaskFormat = errors.New("unsupported task format")

// ErrInvalidTask is returned for a task that decodes but makes no sense
// (no table, no fragments, a repack without files).
var ErrInvalidTask = errors.New("invalid task")

// Kind names a kind of task. It is a single NATS subject token.
type Kind string

// The task kinds.
const (
	KindRewrite Kind = "rewrite"
	KindRepack  Kind = "repack"
)

// RewriteTask rewrites adjacent fragments of one table into new fragments
// (Lance's compaction task), dropping deleted rows.
type RewriteTask struct {
	// Table is the table URI.
	Table string `json:"table"`
	// ReadVersion is the version the task was planned against.
	ReadVersion uint64 `json:"read_version"`
	// Fragments are the ids of the fragments to rewrite, in manifest order.
	// They are adjacent in the manifest at ReadVersion.
	Fragments []uint64 `json:"fragments"`
	// TargetRowsPerFragment is the row count of each new fragment.
	TargetRowsPerFragment uint64 `json:"target_rows_per_fragment"`
	// MaxRowsPerFile splits a new fragment's data files at this many rows
	// (Lance uses TargetRowsPerFragment; 0 means the same).
	MaxRowsPerFile uint64 `json:"max_rows_per_file,omitempty"`
	// MaxBytesPerFile is a soft byte limit per written file; 0 is none.
	MaxBytesPerFile uint64 `json:"max_bytes_per_file,omitempty"`
	// MaxRowsPerGroup is the writer's rows per page group.
	MaxRowsPerGroup uint64 `json:"max_rows_per_group,omitempty"`
	// MaterializeDeletions drops deleted rows (always true in Lance's own
	// rewrites; kept for the record).
	MaterializeDeletions bool `json:"materialize_deletions"`
	// IndexCoverage is the policy's index_coverage: "keep", "unindex",
	// "remap" or "defer". Under "keep" a rewrite never holds indexed
	// fragments; under "defer" (DeferIndexRemap) the rewrite is recorded
	// in the fragment reuse index.
	IndexCoverage string `json:"index_coverage,omitempty"`
	// RemapPartBytes is the policy's index.remap_part_bytes: the remap of
	// an index segment (of a kind that remaps in parts) whose files hold
	// more is split into part tasks of about this size; 0 never splits.
	RemapPartBytes uint64 `json:"remap_part_bytes,omitempty"`
	// FMMaxBytes is the policy's index.fm_max_bytes: an FM index covering
	// the task's fragments is rebuilt with partitions of at most this much
	// text; 0: the engine's default.
	FMMaxBytes uint64 `json:"fm_max_bytes,omitempty"`
	// Rows is the number of live rows the task reads (informational).
	Rows uint64 `json:"rows,omitempty"`
	// Bytes is the recorded size of the files the task reads (informational).
	Bytes uint64 `json:"bytes,omitempty"`
	// Slices, when set (two or more), split the task's one fragment into
	// row slices run as separate tasks and joined by page copy (SliceTask,
	// JoinTask).
	Slices []RowRange `json:"slices,omitempty"`
	// EstBytesRead and EstBytesWritten are the planner's estimates of the
	// bytes the task reads and writes (from the manifest alone), to compare
	// with the result's bytes_read and bytes_written.
	EstBytesRead    uint64 `json:"est_bytes_read,omitempty"`
	EstBytesWritten uint64 `json:"est_bytes_written,omitempty"`
}

// GetFMMaxBytes is t's FMMaxBytes, 0 for a nil task.
func (t *RewriteTask) GetFMMaxBytes() uint64 {
	if t == nil {
		return 0
	}
	return t.FMMaxBytes
}

// DeferIndexRemap is the IndexCoverage of a rewrite whose index remap is
// deferred to the fragment reuse index.
const DeferIndexRemap = "defer"

// RepackFile is one new data file a repack writes: which top-level columns
// it holds, every field id it takes, and the existing files it reads them
// from.
type RepackFile struct {
	// Columns are the top-level field ids the new file holds, ascending.
	Columns []int32 `json:"columns"`
	// Fields are every schema field id the new file holds (the columns and
	// their nested fields), ascending.
	Fields []int32 `json:"fields"`
	// Sources are the paths (as in the manifest) of the fragment's data
	// files that hold the moved fields.
	Sources []string `json:"sources"`
}

// RepackTask moves some columns of one fragment into fewer data files
// without moving rows. Fragment id, row addresses, deletions and
// index coverage are unchanged.
type RepackTask struct {
	// Table is the table URI.
	Table string `json:"table"`
	// ReadVersion is the version the task was planned against.
	ReadVersion uint64 `json:"read_version"`
	// Fragment is the fragment id.
	Fragment uint64 `json:"fragment"`
	// Files are the new files to write, in order.
	Files []RepackFile `json:"files"`
	// Removes are the data files the repack empties; the commit drops them
	// from the fragment. Files that keep a field stay with the moved fields
	// tombstoned.
	Removes []string `json:"removes"`
	// Bytes is the recorded size of the files the task reads.
	Bytes uint64 `json:"bytes,omitempty"`
	// Slices, when set (two or more), split the fragment into row slices
	// run as separate tasks and joined by page copy (SliceTask, JoinTask).
	Slices []RowRange `json:"slices,omitempty"`
}

// Task is the unit the scheduler queues: exactly one of Rewrite, Repack or
// Remap is set. Its JSON form carries format_version and kind.
type Task struct {
	Rewrite *RewriteTask
	Repack  *RepackTask
	Remap   *RemapTask
	CatchUp *CatchUpTask
	Slice   *SliceTask
	Join    *JoinTask
}

// Kind returns the task's kind, or "" for an empty task.
func (t Task) Kind() Kind {
	switch {
	case t.Rewrite != nil:
		return KindRewrite
	case t.Repack != nil:
		return KindRepack
	case t.Remap != nil:
		return KindRemap
	case t.CatchUp != nil:
		return KindCatchUp
	case t.Slice != nil:
		return KindSlice
	case t.Join != nil:
		return KindJoin
	}
	return ""
}

// Table returns the table URI of the task.
func (t Task) Table() string {
	switch {
	case t.Rewrite != nil:
		return t.Rewrite.Table
	case t.Repack != nil:
		return t.Repack.Table
	case t.Remap != nil:
		return t.Remap.Table
	case t.CatchUp != nil:
		return t.CatchUp.Table
	case t.Slice != nil:
		return t.Slice.Parent().Table()
	case t.Join != nil:
		return t.Join.Parent().Table()
	}
	return ""
}

// ReadVersion returns the version the task was planned against.
func (t Task) ReadVersion() uint64 {
	switch {
	case t.Rewrite != nil:
		return t.Rewrite.ReadVersion
	case t.Repack != nil:
		return t.Repack.ReadVersion
	case t.Remap != nil:
		return t.Remap.ReadVersion
	case t.CatchUp != nil:
		return t.CatchUp.ReadVersion
	case t.Slice != nil:
		return t.Slice.Parent().ReadVersion()
	case t.Join != nil:
		return t.Join.Parent().ReadVersion()
	}
	return 0
}

// Fragments returns the ids of the fragments the task touches.
func (t Task) Fragments() []uint64 {
	switch {
	case t.Rewrite != nil:
		return t.Rewrite.Fragments
	case t.Repack != nil:
		return []uint64{t.Repack.Fragment}
	case t.Remap != nil:
		return t.Remap.fragments()
	case t.CatchUp != nil:
		return t.CatchUp.Fragments
	case t.Slice != nil:
		return t.Slice.Parent().Fragments()
	case t.Join != nil:
		return t.Join.Parent().Fragments()
	}
	return nil
}

// Key is the deduplication key: kind, table, read version and fragments.
// Two tasks with equal keys do the same work. ParseTaskKey reads it back.
// A remap's kind part is "remap/<segment uuid>", since one batch remaps
// several indices over the same fragments.
func (t Task) Key() string {
	k := t.Kind()
	if t.Remap != nil {
		k = Kind(string(k) + "/" + t.Remap.SegmentUUID())
	}
	if t.CatchUp != nil {
		k = t.CatchUp.keyKind()
	}
	if t.Slice != nil {
		k = t.Slice.keyKind()
	}
	if t.Join != nil {
		k = t.Join.keyKind()
	}
	return TaskKey{Kind: k, Table: t.Table(), ReadVersion: t.ReadVersion(), Fragments: t.Fragments()}.String()
}

// TaskKey is the parsed form of a task key.
type TaskKey struct {
	Kind        Kind
	Table       string
	ReadVersion uint64
	Fragments   []uint64
}

// String renders the key as "<kind>:<read_version>:<fragment ranges>:<table>",
// fragment ranges like "0-4,7". The table comes last so it may hold colons.
func (k TaskKey) String() string {
	var b strings.Builder
	b.WriteString(string(k.Kind))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(k.ReadVersion, 10))
	b.WriteByte(':')
	frags := slices.Clone(k.Fragments)
	slices.Sort(frags)
	for i := 0; i < len(frags); {
		j := i
		for j+1 < len(frags) && frags[j+1] == frags[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(frags[i], 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(frags[j], 10))
		}
		i = j + 1
	}
	b.WriteByte(':')
	b.WriteString(k.Table)
	return b.String()
}

// ParseTaskKey parses a key made by Task.Key.
func ParseTaskKey(s string) (TaskKey, error) {
	parts := strings.SplitN(s, ":", 4)
	if len(parts) != 4 {
		return TaskKey{}, fmt.Errorf("parse task key %q: want kind:version:fragments:table", s)
	}
	k := TaskKey{Kind: Kind(parts[0]), Table: parts[3]}
	v, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return TaskKey{}, fmt.Errorf("parse task key %q: read version: %w", s, err)
	}
	k.ReadVersion = v
	if parts[2] != "" {
		for _, r := range strings.Split(parts[2], ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.ParseUint(lo, 10, 64)
			if err != nil {
				return TaskKey{}, fmt.Errorf("parse task key %q: fragment %q: %w", s, r, err)
			}
			b := a
			if isRange {
				if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
					return TaskKey{}, fmt.Errorf("parse task key %q: bad fragment range %q", s, r)
				}
			}
			if b-a > 1<<24 {
				return TaskKey{}, fmt.Errorf("parse task key %q: fragment range %q too large", s, r)
			}
			for f := a; ; f++ {
				k.Fragments = append(k.Fragments, f)
				if f == b {
					break
				}
			}
		}
	}
	return k, nil
}

// taskJSON is the wire form of Task.
type taskJSON struct {
	FormatVersion int          `json:"format_version"`
	Kind          Kind         `json:"kind"`
	Rewrite       *RewriteTask `json:"rewrite,omitempty"`
	Repack        *RepackTask  `json:"repack,omitempty"`
	Remap         *RemapTask   `json:"remap,omitempty"`
	CatchUp       *CatchUpTask `json:"catchup,omitempty"`
	Slice         *SliceTask   `json:"slice,omitempty"`
	Join          *JoinTask    `json:"join,omitempty"`
}

// MarshalJSON encodes the task with its format version and kind.
func (t Task) MarshalJSON() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(taskJSON{FormatVersion: TaskFormatVersion, Kind: t.Kind(), Rewrite: t.Rewrite, Repack: t.Repack, Remap: t.Remap, CatchUp: t.CatchUp, Slice: t.Slice, Join: t.Join})
}

// UnmarshalJSON decodes a task, refusing (ErrTaskFormat) any other format
// version, unknown kinds and unknown fields, so a worker of another release
// never half-understands a task.
func (t *Task) UnmarshalJSON(data []byte) error {
	var probe struct {
		FormatVersion *int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return fmt.Errorf("decode task: %w", err)
	}
	if probe.FormatVersion == nil {
		return fmt.Errorf("decode task: %w: no format_version", ErrTaskFormat)
	}
	if *probe.FormatVersion != TaskFormatVersion {
		return fmt.Errorf("decode task: %w: format_version %d, this release reads %d", ErrTaskFormat, *probe.FormatVersion, TaskFormatVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w taskJSON
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("decode task: %w: %w", ErrTaskFormat, err)
	}
	out := Task{Rewrite: w.Rewrite, Repack: w.Repack, Remap: w.Remap, CatchUp: w.CatchUp, Slice: w.Slice, Join: w.Join}
	if out.Kind() != w.Kind {
		if !slices.Contains([]Kind{KindRewrite, KindRepack, KindRemap, KindCatchUp, KindSlice, KindJoin}, w.Kind) {
			return fmt.Errorf("decode task: %w: unknown kind %q", ErrTaskFormat, w.Kind)
		}
		return fmt.Errorf("decode task: %w: %s task carries another kind", ErrInvalidTask, w.Kind)
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("decode task: %w", err)
	}
	*t = out
	return nil
}

// Validate checks the task's shape.
func (t Task) Validate() error {
	set := 0
	for _, b := range []bool{t.Rewrite != nil, t.Repack != nil, t.Remap != nil, t.CatchUp != nil, t.Slice != nil, t.Join != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("%w: exactly one of rewrite, repack, remap, catchup, slice or join must be set", ErrInvalidTask)
	}
	if t.Slice != nil {
		return t.Slice.validate()
	}
	if t.Join != nil {
		return t.Join.validate()
	}
	if t.Remap != nil {
		return t.Remap.validate()
	}
	if t.Table() == "" {
		return fmt.Errorf("%w: no table", ErrInvalidTask)
	}
	if r := t.Rewrite; r != nil {
		if len(r.Fragments) == 0 {
			return fmt.Errorf("%w: rewrite of %s at version %d names no fragments", ErrInvalidTask, r.Table, r.ReadVersion)
		}
		if r.TargetRowsPerFragment == 0 {
			return fmt.Errorf("%w: rewrite of %s has target_rows_per_fragment 0", ErrInvalidTask, r.Table)
		}
	}
	if c := t.CatchUp; c != nil {
		if err := validateCatchUp(c); err != nil {
			return err
		}
	}
	if r := t.Repack; r != nil {
		if len(r.Files) == 0 {
			return fmt.Errorf("%w: repack of %s fragment %d writes no file", ErrInvalidTask, r.Table, r.Fragment)
		}
		for i, f := range r.Files {
			if len(f.Columns) == 0 || len(f.Sources) == 0 {
				return fmt.Errorf("%w: repack of %s fragment %d: file %d has no columns or sources", ErrInvalidTask, r.Table, r.Fragment, i)
			}
		}
	}
	return nil
}

// ErrMixedTasks is returned when one fragment is in a rewrite and a repack
// of the same run: the second commit would conflict with the first.
var ErrMixedTasks = errors.New("engine: a fragment is in both a rewrite and a repack")

// CheckDisjoint rejects a set of tasks in which a fragment appears twice.
func CheckDisjoint(tasks []Task) error {
	seen := map[uint64]Kind{}
	parents := map[string]bool{}
	for _, t := range tasks {
		if t.CatchUp != nil {
			// Catch-ups read fragments without changing them; one that
			// loses its fragments to a rewrite committed first is refused
			// at its own commit.
			continue
		}
		if t.Slice != nil && t.Slice.CatchUp != nil {
			continue // a catch-up's delta reads, as a catch-up does
		}
		if t.Slice != nil {
			// The slices of one task share its fragment.
			pk := t.Slice.Parent().Key()
			if parents[pk] {
				continue
			}
			parents[pk] = true
			t = t.Slice.Parent()
		}
		for _, id := range t.Fragments() {
			if k, dup := seen[id]; dup {
				if k != t.Kind() {
					return fmt.Errorf("%w: fragment %d", ErrMixedTasks, id)
				}
				return fmt.Errorf("%w: fragment %d is in two %s tasks", ErrInvalidTask, id, k)
			}
			seen[id] = t.Kind()
		}
	}
	return nil
}
