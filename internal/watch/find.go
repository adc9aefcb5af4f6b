package watch

import (
	"context"

	"github.com/lanced-dev/lanced/internal/format"
)

// Found is a table a FindTables sweep found.
type Found struct {
	// Table is the canonical table URI (no connection query).
	Table string `json:"table"`
	// Version is its latest committed version.
	Version uint64 `json:"version"`
	// OpenURI is Table with the root's connection query, for store.Open.
	OpenURI string `json:"-"`
}

// FindTables lists the tables under root (a directory of tables, or one
// table) with their latest versions, exactly as a poll sweep finds them.
func FindTables(ctx context.Context, root string) ([]Found, error) {
	s, err := NewPollSource(PollConfig{URIs: []string{root}}, Options{})
	if err != nil {
		return nil, err
	}
	var out []Found
	_, err = s.sweepRoot(ctx, s.roots[0], func(_ context.Context, ref format.VersionRef) error {
		out = append(out, Found{Table: ref.Table, Version: ref.Version, OpenURI: s.opts.Roots.OpenURI(ref.Table)})
		return nil
	})
	return out, err
}
