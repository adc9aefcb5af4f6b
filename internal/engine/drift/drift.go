// Package drift keeps, as table state, how far the vectors lanced's
// catch-ups added to each vector index are from the index's trained
// centroids: the share of added rows farther from their nearest centroid
// than a high quantile of the distances of the rows the index was built
// with (vector.DriftBound says exactly how both are measured). The record
// is one object, "_lanced/drift.json" in the table's own store (Lance
// ignores it), so `lanced plan`, `lanced stats` and any daemon node read
// the same figures.
//
// Every update reads the record with its generation, adds its counts and
// replaces it with the store's compare-and-swap (store.PutIfMatch; the
// first one creates it with PutIfAbsent): of two nodes that read the same
// generation, one replaces it and the other finds it replaced, reads it
// again and adds its counts on top, so neither loses the other's.
//
// lanced versions before this one wrote the record as immutable versions
// "_lanced/drift/<sequence>.json" (the largest sequence the record). They
// are read too: the latest one's indices are taken where they are newer
// than the record's (a table written only by such a version has no
// record yet, and a node of such a version may still write one while a
// cluster is upgraded), and an update that carried them over deletes the
// versions it read. Those versions read "_lanced/drift.json" while no
// version exists, so after the migration they see this record.
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
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Key is the record, relative to the table root.
const Key = "_lanced/drift.json"

// Dir holds the versions earlier lanced versions wrote, relative to the
// table root.
const Dir = "_lanced/drift/"

// maxConflicts bounds how often Update reads the record again after
// another writer replaced it.
const maxConflicts = 64

// versionKey is the key of an earlier version's record seq.
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
	// Write is a random id of the update that wrote the record: every
	// write's bytes are its own, as store.PutIfMatch needs to settle an
	// ambiguous answer by reading the record back.
	Write string `json:"write,omitempty"`
}

// Sample is what one committed catch-up measured.
type Sample struct {
	Index, Model         string
	Rows, Far, Reference uint64
	Bound                float64
}

// Load reads the table's record (empty when there is none; a damaged one
// reads as empty too: drift is advice, the next catch-up writes it again).
// It is read on planning and status paths, so once the record exists it
// is one read: versions earlier lanced versions wrote are carried over by
// Update, and listed here only while there is no record yet.
func Load(ctx context.Context, b *store.Bucket) (File, error) {
	f, gen, err := read(ctx, b)
	if err != nil || gen != "" {
		return f, err
	}
	_, err = carryVersions(ctx, b, &f)
	return f, err
}

// read reads the record with its generation ("" when there is none).
func read(ctx context.Context, b *store.Bucket) (File, store.Generation, error) {
	var f File
	data, gen, err := b.GetWithGeneration(ctx, Key)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return File{}, "", fmt.Errorf("read drift record: %w", err)
	default:
		if json.Unmarshal(data, &f) != nil {
			f = File{}
		}
	}
	return f, gen, nil
}

// load reads the record with its generation ("" when there is none) and
// the versions earlier lanced versions wrote (their keys, ascending),
// the latest of which is carried into f (carryOver).
func load(ctx context.Context, b *store.Bucket) (File, store.Generation, []string, error) {
	f, gen, err := read(ctx, b)
	if err != nil {
		return File{}, "", nil, err
	}
	old, err := carryVersions(ctx, b, &f)
	if err != nil {
		return File{}, "", nil, err
	}
	return f, gen, old, nil
}

// carryVersions lists the versions earlier lanced versions wrote (their
// keys, ascending) and carries the latest into f.
func carryVersions(ctx context.Context, b *store.Bucket, f *File) ([]string, error) {
	old, err := versions(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("list earlier drift records: %w", err)
	}
	// The latest version; one deleted since the listing (another update
	// carried it over) is in the record already.
	for i := len(old) - 1; i >= 0; i-- {
		data, err := b.Get(ctx, old[i])
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read earlier drift record: %w", err)
		}
		var v File
		if json.Unmarshal(data, &v) == nil {
			carryOver(f, v)
		}
		break
	}
	return old, nil
}

// versions lists the keys of the versions earlier lanced versions wrote,
// ascending by sequence.
func versions(ctx context.Context, b *store.Bucket) ([]string, error) {
	type version struct {
		seq uint64
		key string
	}
	var vs []version
	err := b.ListDir(ctx, Dir, func(o store.Object) error {
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, Dir), ".json")
		if n, err := strconv.ParseUint(name, 10, 64); ok && err == nil && !o.IsDir {
			vs = append(vs, version{n, o.Key})
		}
		return nil
	})
	slices.SortFunc(vs, func(a, b version) int { return cmp.Compare(a.seq, b.seq) })
	keys := make([]string, len(vs))
	for i, v := range vs {
		keys[i] = v.key
	}
	return keys, err
}

// carryOver takes into f each index of an earlier version's record v that
// f lacks or that v updated later.
func carryOver(f *File, v File) {
	for name, r := range v.Indices {
		if cur, ok := f.Indices[name]; ok && !r.Updated.After(cur.Updated) {
			continue
		}
		if f.Indices == nil {
			f.Indices = map[string]Record{}
		}
		f.Indices[name] = r
	}
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
// updates (other nodes) each land once: an update that finds the record
// replaced since its read reads it again and adds its samples to it.
func Update(ctx context.Context, b *store.Bucket, version uint64, indices []*tablepb.IndexMetadata, samples []Sample) error {
	if len(samples) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		f, gen, old, err := load(ctx, b)
		if err != nil {
			return err
		}
		apply(&f, version, indices, samples)
		var id [8]byte
		_, _ = rand.Read(id[:])
		f.Write = hex.EncodeToString(id[:])
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		if gen == "" {
			err = b.PutIfAbsent(ctx, Key, data)
		} else {
			err = b.PutIfMatch(ctx, Key, data, gen)
		}
		if errors.Is(err, store.ErrPreconditionFailed) && attempt < maxConflicts {
			continue // another writer replaced it: add ours to theirs
		}
		if err != nil {
			return fmt.Errorf("write drift record: %w", err)
		}
		// The earlier versions read are in the record now (best effort: a
		// leftover is carried over again, never over a newer index entry).
		_ = b.DeleteMany(ctx, old)
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
