// Package hold keeps a table's maintenance hold as table state.
//
// A hold stops every lanced entry point (the daemon's planner, workers and
// cleanup, and the one-shot compact, cleanup and plan commands) from changing
// the table until an operator releases it. It is stored in the table's own
// store under "_lanced/hold.json", next to lanced's pending-output journal
// and never inside Lance's directories (Lance ignores it), so the hold
// travels with the table: any process that can open the table sees it and
// can release it, without NATS or any local state.
package hold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lanced-dev/lanced/internal/store"
)

// Key is the hold's object key, relative to the table root.
const Key = "_lanced/hold.json"

// ErrHeld is wrapped by the error Check returns for a held table.
var ErrHeld = errors.New("table held")

// Record is one hold.
type Record struct {
	// Table is the table's canonical URI (no query string, no credentials).
	Table string `json:"table"`
	// Reason says why the table is held (an error or an operator's note).
	Reason string `json:"reason"`
	// By names who placed it: a daemon node id or "cli" (with the user).
	By    string    `json:"by"`
	Since time.Time `json:"since"`
}

// Get returns the table's hold, or nil when the table is not held.
func Get(ctx context.Context, b *store.Bucket) (*Record, error) {
	data, err := b.Get(ctx, Key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read hold: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		// A damaged record still holds the table: a hold is the safe side.
		return &Record{Reason: fmt.Sprintf("unreadable hold record %s (%v); release it to clear", Key, err)}, nil
	}
	return &r, nil
}

// Place holds the table, replacing any earlier hold.
func Place(ctx context.Context, b *store.Bucket, r Record) error {
	if r.Since.IsZero() {
		r.Since = time.Now().UTC()
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := b.Put(ctx, Key, data); err != nil {
		return fmt.Errorf("place hold: %w", err)
	}
	return nil
}

// Release removes the table's hold and returns it (nil when the table was
// not held).
func Release(ctx context.Context, b *store.Bucket) (*Record, error) {
	r, err := Get(ctx, b)
	if err != nil || r == nil {
		return nil, err
	}
	if err := b.Delete(ctx, Key); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("release hold: %w", err)
	}
	return r, nil
}

// HeldError is Check's error for a held table.
type HeldError struct {
	Table string
	Hold  Record
}

func (e *HeldError) Error() string {
	by := e.Hold.By
	if by == "" {
		by = "unknown"
	}
	return fmt.Sprintf("table %s is held since %s by %s: %s (release it with: lanced holds release %s)",
		e.Table, e.Hold.Since.UTC().Format(time.RFC3339), by, e.Hold.Reason, e.Table)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Check returns a *HeldError (wrapping ErrHeld) when the table is held,
// nil when it is not, or the error reading the hold.
func Check(ctx context.Context, b *store.Bucket, table string) error {
	r, err := Get(ctx, b)
	if err != nil {
		return err
	}
	if r == nil {
		return nil
	}
	return &HeldError{Table: table, Hold: *r}
}

// Tables reads and writes holds of tables named by canonical URI; Open maps
// a canonical URI to the URI to open it with (the root's connection query
// re-attached), nil for the identity.
type Tables struct {
	Open func(table string) string
}

func (t Tables) bucket(ctx context.Context, table string) (*store.Bucket, error) {
	uri := table
	if t.Open != nil {
		uri = t.Open(table)
	}
	return store.Open(ctx, uri)
}

// Held reports whether table is held.
func (t Tables) Held(ctx context.Context, table string) (bool, error) {
	r, err := t.Get(ctx, table)
	return r != nil, err
}

// Get returns table's hold (nil when not held).
func (t Tables) Get(ctx context.Context, table string) (*Record, error) {
	b, err := t.bucket(ctx, table)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return Get(ctx, b)
}

// Place holds table with reason on behalf of by.
func (t Tables) Place(ctx context.Context, table, reason, by string) error {
	b, err := t.bucket(ctx, table)
	if err != nil {
		return err
	}
	defer b.Close()
	return Place(ctx, b, Record{Table: table, Reason: reason, By: by})
}
