// Package quarantine records fragments lanced found corrupt, in the table's
// own store under _lanced/quarantine/<fragment id>.json, so that every entry
// point (the planner in `lanced plan`, `lanced compact` and the daemon, and
// `lanced stats`) leaves them out and reports them, while the rest of the
// table keeps being maintained. A record holds the fragment's data files as
// they were when it was found corrupt; once the fragment changes (rewritten
// or repaired by another writer, or removed) the record no longer applies.
//
// Index segments whose files could not be remapped (corrupt, or a layout
// the remapper refuses) are recorded the same way, under
// _lanced/quarantine/index-<segment uuid>.json: the planner keeps the
// fragments such a segment covers, and only those. The record applies while
// the segment (by uuid) is in the table; rebuilding, optimizing or dropping
// the index replaces the segment and so clears it.
package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Dir holds the records, relative to the table root.
const Dir = "_lanced/quarantine/"

// Mark is one quarantined fragment.
type Mark struct {
	Fragment uint64 `json:"fragment"`
	// Files are the fragment's data file paths when it was marked.
	Files []string `json:"files"`
	// File is the file found corrupt ("" when the reader could not tell).
	File   string    `json:"file,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// String is the mark's reason with its file, for plans and logs.
func (m Mark) String() string {
	if m.File != "" {
		return m.File + ": " + m.Reason
	}
	return m.Reason
}

func filesOf(f *tablepb.DataFragment) []string {
	out := make([]string, len(f.GetFiles()))
	for i, df := range f.GetFiles() {
		out[i] = df.GetPath()
	}
	return out
}

// New returns the mark of fragment f found corrupt in file for reason.
func New(f *tablepb.DataFragment, file, reason string) Mark {
	return Mark{Fragment: f.GetId(), Files: filesOf(f), File: file, Reason: reason, At: time.Now().UTC()}
}

func key(id uint64) string { return Dir + strconv.FormatUint(id, 10) + ".json" }

// Record writes (or replaces) a mark.
func Record(ctx context.Context, b *store.Bucket, m Mark) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := b.Put(ctx, key(m.Fragment), data); err != nil {
		return fmt.Errorf("quarantine fragment %d: %w", m.Fragment, err)
	}
	return nil
}

// Load returns the marks that still apply to manifest m (the fragment
// exists with the same data files), by fragment id. Unreadable records
// are ignored: a quarantine only ever holds work back.
func Load(ctx context.Context, b *store.Bucket, m *tablepb.Manifest) (map[uint64]Mark, error) {
	frags := map[uint64]*tablepb.DataFragment{}
	for _, f := range m.GetFragments() {
		frags[f.GetId()] = f
	}
	out := map[uint64]Mark{}
	err := eachRecord(ctx, b, func(base string) bool {
		id, err := strconv.ParseUint(strings.TrimSuffix(base, ".json"), 10, 64)
		return err == nil && frags[id] != nil
	}, func(base string, data []byte) {
		// index-<uuid>.json records are LoadIndices'; they do not parse.
		id, _ := strconv.ParseUint(strings.TrimSuffix(base, ".json"), 10, 64)
		var mk Mark
		if json.Unmarshal(data, &mk) != nil || mk.Fragment != id || !slices.Equal(mk.Files, filesOf(frags[id])) {
			return
		}
		out[id] = mk
	})
	if err != nil {
		return nil, fmt.Errorf("read quarantine of %s: %w", b.URI(), err)
	}
	return out, nil
}

// eachRecord calls fn with the contents of every record under Dir whose
// base name (ending in .json) want accepts; records deleted meanwhile are
// skipped.
func eachRecord(ctx context.Context, b *store.Bucket, want func(base string) bool, fn func(base string, data []byte)) error {
	return b.List(ctx, Dir, func(o store.Object) error {
		base := path.Base(o.Key)
		if !strings.HasSuffix(base, ".json") || !want(base) {
			return nil
		}
		data, err := b.Get(ctx, o.Key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(base, data)
		return nil
	})
}

// Reasons maps Load's marks to the planner's input (fragment id → reason).
func Reasons(marks map[uint64]Mark) map[uint64]string { return reasons(marks) }

// reasons maps each mark to its String, nil when there are none.
func reasons[K comparable, M fmt.Stringer](marks map[K]M) map[K]string {
	if len(marks) == 0 {
		return nil
	}
	out := make(map[K]string, len(marks))
	for k, m := range marks {
		out[k] = m.String()
	}
	return out
}

// IndexMark is one index segment whose files could not be remapped.
type IndexMark struct {
	// Index is the index name, Segment the segment uuid (text form).
	Index   string `json:"index"`
	Segment string `json:"segment"`
	// File is the segment's file the remapper failed on ("" when the
	// error did not say), relative to the table root.
	File   string    `json:"file,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// String says what is kept and what to do about it, for plans and logs.
func (m IndexMark) String() string {
	where := "segment " + m.Segment
	if m.File != "" {
		where += " (" + m.File + ")"
	}
	return fmt.Sprintf("index %q %s could not be remapped: %s; the fragments it covers are kept until it is rebuilt: run Lance's createIndex (replace) or optimize() on it, or drop it", m.Index, where, m.Reason)
}

const indexPrefix = "index-"

func indexKey(segment string) string { return Dir + indexPrefix + segment + ".json" }

// RecordIndex writes (or replaces) an index segment's mark.
func RecordIndex(ctx context.Context, b *store.Bucket, m IndexMark) error {
	if m.Segment == "" || path.Base(m.Segment) != m.Segment {
		return fmt.Errorf("quarantine index %q: bad segment uuid %q", m.Index, m.Segment)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := b.Put(ctx, indexKey(m.Segment), data); err != nil {
		return fmt.Errorf("quarantine index %q segment %s: %w", m.Index, m.Segment, err)
	}
	return nil
}

// LoadIndices returns the index marks whose segment is still in indices
// (the table's index section), keyed by segment uuid. Unreadable records
// are ignored, as Load does.
func LoadIndices(ctx context.Context, b *store.Bucket, indices []*tablepb.IndexMetadata) (map[string]IndexMark, error) {
	out := map[string]IndexMark{}
	segments := make([]string, len(indices))
	for i, ix := range indices {
		segments[i] = (&index.Segment{Meta: ix}).UUID()
	}
	if len(segments) == 0 {
		return out, nil
	}
	segOf := func(base string) string { return strings.TrimSuffix(strings.TrimPrefix(base, indexPrefix), ".json") }
	err := eachRecord(ctx, b, func(base string) bool {
		return strings.HasPrefix(base, indexPrefix) && slices.Contains(segments, segOf(base))
	}, func(base string, data []byte) {
		var mk IndexMark
		if json.Unmarshal(data, &mk) == nil && mk.Segment == segOf(base) {
			out[mk.Segment] = mk
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read index quarantine of %s: %w", b.URI(), err)
	}
	return out, nil
}

// IndexReasons maps LoadIndices' marks to the planner's input (segment
// uuid → reason).
func IndexReasons(marks map[string]IndexMark) map[string]string { return reasons(marks) }
