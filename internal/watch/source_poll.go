package watch

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
)

// PollConfig configures a PollSource.
type PollConfig struct {
	// URIs are the roots to sweep, opened with Open: a table root or a
	// directory of tables (s3://bucket/prefix?endpoint=…, gs://…,
	// file:///…). Connection parameters in the query are used to open the
	// bucket and are not part of the table URIs emitted.
	URIs []string
	// Interval between sweeps (default 10m). The first sweep runs at once
	// (catch-up after downtime).
	Interval time.Duration
	// MaxDepth is how many levels of plain directories (not tables) a
	// sweep descends below a root to find tables (default 2). A directory
	// ending in ".lance" or holding _versions/ is a table and is not
	// descended into.
	MaxDepth int
	// Open opens a root (default store.Open).
	Open func(ctx context.Context, uri string) (*store.Bucket, error)
	// OnSweep, when set, is called after each sweep of a root with the
	// root's canonical URI, the tables found and the sweep's error.
	OnSweep func(root string, tables int, err error)
}

// PollSource lists _versions/ of every table under its roots on an
// interval and emits each table's latest version when it differs from the
// last sweep (every table on the first sweep). It is the safety net for
// lost or delayed notifications.
type PollSource struct {
	cfg   PollConfig
	opts  Options
	roots []pollRoot

	mu    sync.Mutex
	seen  map[string]uint64
	swept map[string]bool // roots swept successfully at least once
}

type pollRoot struct {
	uri  string // as configured, with its query
	root Root   // canonical location
}

// NewPollSource validates the roots. When opts.Roots is empty the poll
// roots themselves are the allow-list.
func NewPollSource(cfg PollConfig, opts Options) (*PollSource, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Minute
	}
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = 2
	}
	if cfg.Open == nil {
		cfg.Open = store.Open
	}
	s := &PollSource{cfg: cfg, seen: map[string]uint64{}, swept: map[string]bool{}}
	var allow []Root
	for _, u := range cfg.URIs {
		r, err := ParseRoot(u)
		if err != nil {
			return nil, fmt.Errorf("poll source: %w", err)
		}
		s.roots = append(s.roots, pollRoot{uri: u, root: r})
		allow = append(allow, r)
	}
	if opts.Roots.Len() == 0 {
		opts.Roots = NewRoots(allow...)
	}
	s.opts = opts.withDefaults()
	return s, nil
}

// Run sweeps at once and then every Interval until ctx is done. A root
// that fails is logged and counted and tried again next sweep; an error
// from the sink ends the sweep of that root (it is retried next sweep).
func (s *PollSource) Run(ctx context.Context, sink Sink) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Sweep(ctx, sink)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep runs one sweep over every root and returns how many roots failed.
func (s *PollSource) Sweep(ctx context.Context, sink Sink) (failed int) {
	for _, pr := range s.roots {
		if ctx.Err() != nil {
			return failed
		}
		start := time.Now()
		n, err := s.sweepRoot(ctx, pr, sink)
		if err != nil {
			if ctx.Err() != nil {
				return failed
			}
			failed++
			s.opts.Metrics.sweeps.WithLabelValues("error").Inc()
			s.opts.Logger.Error("poll sweep failed: root cannot be listed", "root", pr.root.URI(), "err", err)
			if s.cfg.OnSweep != nil {
				s.cfg.OnSweep(pr.root.URI(), 0, err)
			}
			continue
		}
		s.opts.Metrics.sweeps.WithLabelValues("ok").Inc()
		s.opts.Logger.Debug("poll sweep done", "root", pr.root.URI(), "tables", n, "duration_ms", time.Since(start).Milliseconds())
		s.mu.Lock()
		first := !s.swept[pr.root.URI()]
		s.swept[pr.root.URI()] = true
		s.mu.Unlock()
		if first {
			s.opts.Logger.Info(fmt.Sprintf("root %s: %d tables", pr.root.URI(), n), "root", pr.root.URI(), "tables", n)
		}
		if s.cfg.OnSweep != nil {
			s.cfg.OnSweep(pr.root.URI(), n, nil)
		}
	}
	return failed
}

func (s *PollSource) sweepRoot(ctx context.Context, pr pollRoot, sink Sink) (int, error) {
	b, err := s.cfg.Open(ctx, pr.uri)
	if err != nil {
		return 0, err // the store's error names the root
	}
	defer func() { _ = b.Close() }()
	w := &walker{s: s, b: b, root: pr.root, sink: sink}
	err = w.dir(ctx, "", s.cfg.MaxDepth)
	return w.tables, err
}

type walker struct {
	s      *PollSource
	b      *store.Bucket
	root   Root
	sink   Sink
	tables int
}

// dir handles the directory rel ("" or "a/b/") below the root.
func (w *walker) dir(ctx context.Context, rel string, depth int) error {
	var children []string
	isTable := false
	err := w.b.ListDir(ctx, rel, func(o store.Object) error {
		if !o.IsDir {
			return nil
		}
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, rel), "/")
		if name == format.VersionsDir {
			isTable = true
		}
		children = append(children, o.Key)
		return nil
	})
	if err != nil {
		return err // the store's error names the bucket and key
	}
	if isTable {
		return w.table(ctx, rel)
	}
	for _, c := range children {
		name := strings.TrimSuffix(strings.TrimPrefix(c, rel), "/")
		switch {
		case name == "__manifest" || strings.HasPrefix(name, "."):
		case strings.HasSuffix(name, ".lance"):
			if err := w.table(ctx, c); err != nil {
				return err
			}
		case depth > 0:
			if err := w.dir(ctx, c, depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// table finds rel's latest version (engine/table) and emits it if it
// changed.
func (w *walker) table(ctx context.Context, rel string) error {
	vi, err := table.At(w.b.Sub(rel)).LatestInfo(ctx)
	if errors.Is(err, table.ErrNoTable) {
		return nil // an empty or half-created table: nothing committed yet
	}
	if err != nil {
		return err // the store's error names the table and key
	}
	latestName := path.Base(vi.Key)
	w.tables++
	key := strings.Trim(w.root.Prefix+"/"+rel, "/") + "/" + format.VersionsDir + "/" + latestName
	if w.root.Prefix == "" && rel == "" {
		key = format.VersionsDir + "/" + latestName
	}
	ref, err := w.s.opts.Roots.RefForKey(w.root.Scheme, w.root.Bucket, key)
	if err != nil {
		w.s.opts.Metrics.dropped.WithLabelValues(DropReason(err)).Inc()
		if errors.Is(err, ErrUnsafeKey) || errors.Is(err, ErrOutsideRoots) {
			w.s.opts.Logger.Warn("polled table rejected", "source", "poll", "reason", DropReason(err), "err", err)
		}
		return nil
	}
	w.s.mu.Lock()
	same := w.s.seen[ref.Table] == ref.Version
	w.s.mu.Unlock()
	if same {
		return nil
	}
	if err := w.sink(ctx, ref); err != nil {
		return fmt.Errorf("hand on %s: %w", ref, err)
	}
	w.s.opts.Metrics.refs.WithLabelValues("poll").Inc()
	w.s.mu.Lock()
	w.s.seen[ref.Table] = ref.Version
	w.s.mu.Unlock()
	return nil
}
