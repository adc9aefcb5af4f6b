// Package drift keeps, as table state, how far the vectors lanced's
// catch-ups added to each vector index are from the index's trained
// centroids: the share of added rows farther from their nearest centroid
// than a high quantile of the distances of the rows the index was built
// with (vector.DriftBound says exactly how both are measured). The record
// lives in the table's own store under "_lanced/drift.json" (Lance ignores
// it), so `lanced plan`, `lanced stats` and any daemon node read the same
// figures.
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
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Key is the record's object key, relative to the table root.
const Key = "_lanced/drift.json"

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
	// catch-up's).
	Bound float64 `json:"bound"`
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
	Index, Model string
	Rows, Far    uint64
	Bound        float64
}

// Load reads the table's record (empty when there is none; a damaged one
// reads as empty too: drift is advice, the next catch-up writes it again).
func Load(ctx context.Context, b *store.Bucket) (File, error) {
	data, err := b.Get(ctx, Key)
	if errors.Is(err, store.ErrNotFound) {
		return File{}, nil
	}
	if err != nil {
		return File{}, fmt.Errorf("read drift record: %w", err)
	}
	var f File
	if json.Unmarshal(data, &f) != nil {
		return File{}, nil
	}
	return f, nil
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
// again; indices is the committed version's index section.
func Update(ctx context.Context, b *store.Bucket, version uint64, indices []*tablepb.IndexMetadata, samples []Sample) error {
	if len(samples) == 0 {
		return nil
	}
	f, err := Load(ctx, b)
	if err != nil {
		return err
	}
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
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := b.Put(ctx, Key, data); err != nil {
		return fmt.Errorf("write drift record: %w", err)
	}
	return nil
}
