// Package drift keeps, as table state, how far the vectors lanced's
// catch-ups added to each vector index are from the index's trained
// centroids: the share of added rows farther from their nearest centroid
// than a high quantile of the distances of the rows the index was built
// with (vector.DriftBound says exactly how both are measured). The record
// lives in the table's own store under "_lanced/drift/" (Lance ignores
// it), so `lanced plan`, `lanced stats` and any daemon node read the same
// figures.
//
// Every update writes the whole record as a new object,
// "_lanced/drift/<sequence>.json", one past the sequence it read, with the
// store's create-if-absent: of two nodes that read the same sequence, one
// creates the next and the other finds it taken, reads it and adds its
// counts on top, so neither loses the other's. The largest sequence is the
// record. A sequence must never be created twice: an update whose read is
// older than maxReadAge reads again before it writes, and only versions
// both keepVersions behind the latest and older than keepAge are deleted
// (a version deleted while a stalled writer still meant to create it would
// let that writer's stale record in). A record an older lanced
// wrote under "_lanced/drift.json" is read while no sequence exists.
//
// The record also keeps the reference bound (and how many rows it was
// measured on) per model, so a catch-up against the same model reuses it
// instead of reading the indexed rows back again.
//
// Counts accumulate per index while the trained model stays the same (its
// fingerprint: centroids and quantizer); a catch-up against another model
// (the index was retrained, e.g. by Lance's createIndex with replace)
// starts them again. A record is shown while one of the index segments it
// was last updated with is still in the table.
package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Dir holds the record's versions, relative to the table root.
const Dir = "_lanced/drift/"

// LegacyKey is where lanced before versioned records kept the record.
const LegacyKey = "_lanced/drift.json"

// maxConflicts bounds how often Update rereads the record after another
// writer took the sequence it meant to write.
const maxConflicts = 64

// Versions are deleted once keepVersions newer ones exist and they are
// older than keepAge; an update writes only within maxReadAge of its read.
const (
	keepVersions = 64
	keepAge      = 10 * time.Minute
	maxReadAge   = time.Minute
)

// versionKey is the key of the record's version seq.
func versionKey(seq uint64) string { return fmt.Sprintf("%s%020d.json", Dir, seq) }

// Record is one index's drift since its model was trained.
type Record struct {
	// Model fingerprints the trained model the counts were measured
	// against.
	Model string `json:"model"`
	// Rows is how many rows lanced's catch-ups added with this model, Far
	// how many of them were far from every centroid.
	Rows uint64 `json:"rows"`
	Far  uint64 `json:"far"`
	// Bound is the distance above which an added row was far (the last
	// catch-up's); Reference is how many of the model's indexed rows it
	// was measured on (0: not recorded; a catch-up measures it again).
	Bound     float64 `json:"bound"`
	Reference uint64  `json:"reference_rows,omitempty"`
	// Segments are the index's segment uuids after the last update.
	Segments []string `json:"segments"`
	// Version is the table version the last update committed.
	Version uint64    `json:"version"`
	Updated time.Time `json:"updated"`
}

// Ratio is the share of added rows that were far (0 with none added).
func (r Record) Ratio() float64 {
	if r.Rows == 0 {
		return 0
	}
	return float64(r.Far) / float64(r.Rows)
}

// File is the table's record: per index name.
type File struct {
	Indices map[string]Record `json:"indices"`
}

// Sample is what one committed catch-up measured.
type Sample struct {
	Index, Model         string
	Rows, Far, Reference uint64
	Bound                float64
}

// Load reads the table's record (empty when there is none; a damaged one
// reads as empty too: drift is advice, the next catch-up writes it again).
func Load(ctx context.Context, b *store.Bucket) (File, error) {
	f, _, err := load(ctx, b)
	return f, err
}

// load reads the latest version of the record and its sequence (0: none
// yet, the legacy record if any). A version deleted between the listing
// and the read (a newer update pruned it) is looked up again.
func load(ctx context.Context, b *store.Bucket) (File, uint64, error) {
	for attempt := 0; ; attempt++ {
		seqs, err := sequences(ctx, b)
		if err != nil {
			return File{}, 0, fmt.Errorf("list drift records: %w", err)
		}
		key, seq := LegacyKey, uint64(0)
		if len(seqs) > 0 {
			seq = seqs[len(seqs)-1]
			key = versionKey(seq)
		}
		data, err := b.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) && seq > 0 && attempt < maxConflicts {
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			return File{}, seq, nil
		}
		if err != nil {
			return File{}, 0, fmt.Errorf("read drift record: %w", err)
		}
		var f File
		if json.Unmarshal(data, &f) != nil {
			return File{}, seq, nil
		}
		return f, seq, nil
	}
}

// sequences lists the record's version sequences, ascending.
func sequences(ctx context.Context, b *store.Bucket) ([]uint64, error) {
	var seqs []uint64
	err := b.ListDir(ctx, Dir, func(o store.Object) error {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, Dir), ".json")
		if n, err := strconv.ParseUint(name, 10, 64); err == nil && !o.IsDir && strings.HasSuffix(o.Key, ".json") {
			seqs = append(seqs, n)
		}
		return nil
	})
	slices.Sort(seqs)
	return seqs, err
}

// Current returns the records of f that apply to the index entries
// (a manifest's index section): one of the record's segments is there
// under its index name.
func Current(f File, indices []*tablepb.IndexMetadata) map[string]Record {
	out := map[string]Record{}
	for _, ix := range indices {
		r, ok := f.Indices[ix.GetName()]
		if !ok {
			continue
		}
		if u, err := uuid.FromBytes(ix.GetUuid().GetUuid()); err == nil && slices.Contains(r.Segments, u.String()) {
			out[ix.GetName()] = r
		}
	}
	return out
}

// Update adds committed catch-ups' samples to the table's record: for
// each index, counts of the same model accumulate, another model's start
// again; indices is the committed version's index section. Concurrent
// updates (other nodes) each land once: an update that finds the next
// sequence taken reads the record again and adds its samples to it.
func Update(ctx context.Context, b *store.Bucket, version uint64, indices []*tablepb.IndexMetadata, samples []Sample) error {
	if len(samples) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		read := time.Now()
		f, seq, err := load(ctx, b)
		if err != nil {
			return err
		}
		apply(&f, version, indices, samples)
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		if time.Since(read) > maxReadAge && attempt < maxConflicts {
			continue // too old to write: seq+1 may have come and gone
		}
		err = b.PutIfAbsent(ctx, versionKey(seq+1), data)
		if errors.Is(err, store.ErrPreconditionFailed) && attempt < maxConflicts {
			continue // another writer took seq+1: add ours to theirs
		}
		if err != nil {
			return fmt.Errorf("write drift record: %w", err)
		}
		prune(ctx, b, seq+1)
		return nil
	}
}

// apply adds samples to f.
func apply(f *File, version uint64, indices []*tablepb.IndexMetadata, samples []Sample) {
	if f.Indices == nil {
		f.Indices = map[string]Record{}
	}
	now := time.Now().UTC()
	for _, s := range samples {
		r := f.Indices[s.Index]
		if r.Model != s.Model {
			r = Record{Model: s.Model}
		}
		r.Rows += s.Rows
		r.Far += s.Far
		r.Bound, r.Version, r.Updated = s.Bound, version, now
		if s.Reference > 0 {
			r.Reference = s.Reference
		}
		r.Segments = r.Segments[:0:0]
		for _, ix := range indices {
			if ix.GetName() != s.Index {
				continue
			}
			if u, err := uuid.FromBytes(ix.GetUuid().GetUuid()); err == nil {
				r.Segments = append(r.Segments, u.String())
			}
		}
		f.Indices[s.Index] = r
	}
}

// prune deletes, after version seq was written, the versions at least
// keepVersions before it that are older than keepAge, and, after the
// first, the legacy record (best effort: a leftover is deleted by a later
// update, and is never the latest).
func prune(ctx context.Context, b *store.Bucket, seq uint64) {
	var keys []string
	if seq == 1 {
		keys = append(keys, LegacyKey)
	}
	if seq > keepVersions {
		_ = b.ListDir(ctx, Dir, func(o store.Object) error {
			name := strings.TrimSuffix(strings.TrimPrefix(o.Key, Dir), ".json")
			if n, err := strconv.ParseUint(name, 10, 64); err == nil && n+keepVersions <= seq && time.Since(o.ModTime) > keepAge {
				keys = append(keys, versionKey(n))
			}
			return nil
		})
	}
	_ = b.DeleteMany(ctx, keys)
}
