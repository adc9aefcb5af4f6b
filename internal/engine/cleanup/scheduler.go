package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
)

// Settings is what a table asks of cleanup, decided from its latest
// manifest by the caller's policy: whether to clean it, how often at most,
// and with which options.
type Settings struct {
	Enabled     bool
	MinInterval time.Duration
	Options     CleanupOptions
}

// SchedulerConfig wires a Scheduler.
type SchedulerConfig struct {
	Cleaner *Cleaner
	Log     *slog.Logger
	// Open returns the URI of a table name.
	Open func(table string) string
	// Settings decides a table's cleanup from its latest manifest.
	Settings func(table string, m *format.Manifest) (Settings, error)
	// Held reports whether the table is held (nil: never).
	Held func(ctx context.Context, table string) (bool, error)
	// Journal recovers the outputs of dead tasks before a run.
	Journal *journal.Keeper
}

// Scheduler decides when cleanup runs on the tables a node coordinates:
// when triggered (after a maintenance commit, after a plan that found
// nothing to do), at most once per the table's minimum interval (a trigger
// inside the interval is deferred to its end), never on a held table, and
// never at the same time as a commit of the same table on this node
// (LockTable), so a commit's output check and its manifest put see the
// same files. A nil *Scheduler does nothing.
type Scheduler struct {
	cfg    SchedulerConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	tables map[string]*schedState
}

type schedState struct {
	lock    sync.Mutex // held by a cleanup run or a commit of the table
	running bool
	last    time.Time
	timer   *time.Timer
}

// NewScheduler returns a scheduler; Close stops it.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{cfg: cfg, ctx: ctx, cancel: cancel, tables: map[string]*schedState{}}
}

func (s *Scheduler) state(table string) *schedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tables[table]
	if st == nil {
		st = &schedState{}
		s.tables[table] = st
	}
	return st
}

// LockTable keeps cleanup off the table until the returned func is called.
func (s *Scheduler) LockTable(table string) func() {
	if s == nil {
		return func() {}
	}
	st := s.state(table)
	st.lock.Lock()
	return st.lock.Unlock
}

// Trigger asks for a cleanup of table; it returns at once.
func (s *Scheduler) Trigger(table string) {
	if s == nil || s.ctx.Err() != nil {
		return
	}
	st := s.state(table)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.running || st.timer != nil {
		return
	}
	st.running = true
	s.wg.Go(func() {
		again := s.runDue(table, st)
		s.mu.Lock()
		st.running = false
		if again > 0 && s.ctx.Err() == nil && st.timer == nil {
			st.timer = time.AfterFunc(again, func() {
				s.mu.Lock()
				st.timer = nil
				s.mu.Unlock()
				s.Trigger(table)
			})
		}
		s.mu.Unlock()
	})
}

// RunDue runs a cleanup of table now if its interval has passed, else
// returns how long to wait.
func (s *Scheduler) RunDue(table string) time.Duration { return s.runDue(table, s.state(table)) }

// Close stops pending triggers and waits for running cleanups (cancelled:
// a stopped cleanup leaves the table readable; the next run finishes).
func (s *Scheduler) Close() {
	if s == nil {
		return
	}
	s.cancel()
	s.mu.Lock()
	for _, st := range s.tables {
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Scheduler) runDue(name string, st *schedState) time.Duration {
	ctx, log := s.ctx, s.cfg.Log
	uri := s.cfg.Open(name)
	b, err := store.Open(ctx, uri)
	if err != nil {
		log.Error("cleanup: open table", "table", name, "err", fmt.Errorf("open table %s: %w", uri, err))
		return 0
	}
	defer b.Close()
	m, err := table.At(b).Latest(ctx)
	if err != nil {
		log.Error("cleanup: read latest manifest", "table", name, "err", err)
		return 0
	}
	set, err := s.cfg.Settings(name, m)
	if err != nil {
		log.Error("cleanup: settings", "table", name, "err", err)
		return 0
	}
	if !set.Enabled {
		return 0
	}
	if wait := time.Until(st.last.Add(set.MinInterval)); !st.last.IsZero() && wait > 0 {
		return wait
	}
	if s.cfg.Held != nil {
		if held, err := s.cfg.Held(ctx, name); err != nil || held {
			if err != nil {
				log.Warn("cleanup: read hold", "table", name, "err", err)
			} else {
				log.Info("cleanup skipped: table held", "table", name)
			}
			return 0
		}
	}
	unlock := s.LockTable(name)
	defer unlock()
	st.last = time.Now()
	s.run(ctx, name, b, m, set.Options)
	return 0
}

// run recovers dead tasks' outputs, then cleans the table and logs what
// became of it.
func (s *Scheduler) run(ctx context.Context, name string, b *store.Bucket, m *format.Manifest, opts CleanupOptions) {
	log := s.cfg.Log
	s.cfg.Journal.Recover(ctx, name, b)
	// Outputs of lanced processes on this host that died since.
	if _, err := journal.AbandonDeadLocalOwners(ctx, b); err != nil {
		log.Warn("cleanup: journal", "table", name, "err", err)
	}
	log.Info("cleanup started", "table", name, "version", m.Version(), "older_than", opts.OlderThan,
		"keep_versions", opts.KeepVersions, "unverified_after", opts.UnverifiedAfter)
	plan, res, err := s.cfg.Cleaner.Run(ctx, b, opts, false)
	switch {
	case errors.Is(err, ErrCleanupBranches), errors.Is(err, ErrCleanupTaggedOld), errors.Is(err, ErrCleanupBasePaths):
		log.Warn("cleanup refused", "table", name, "version", m.Version(), "err", err)
	case err != nil:
		log.Error("cleanup failed", "table", name, "version", m.Version(), "err", err)
	default:
		removed := 0
		for _, v := range plan.Versions {
			if !v.Keep {
				removed++
			}
		}
		log.Info("table cleaned", "table", name, "version", plan.Latest, "versions_removed", removed,
			"files_removed", res.FilesDeleted, "bytes", res.BytesRemoved)
	}
}
