package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/store"
)

// cleanupRunner runs Lance's cleanup_old_versions (cleanup.Cleaner) on the
// tables this node coordinates: triggered after a maintenance commit and
// after a plan that found nothing to do, at most once per the table's
// schedule.min_interval (a trigger inside the interval is deferred to its
// end), never on a held table, and never at the same time as a commit of
// the same table on this node (lockTable), so the commit's output check
// and its manifest put see the same files.
//
// Settings: the table's effective policy (cleanup block, else the table's
// lance.auto_cleanup.* config), else Lance's defaults through
// cleanup.TableCleanupOptions. Metrics: the engine's lanced_cleanup_*
// series on the daemon's registry.
type cleanupRunner struct {
	cleaner  *cleanup.Cleaner
	log      *slog.Logger
	policies func() *policy.Set
	open     func(table string) string
	held     func(ctx context.Context, table string) (bool, error)
	journal  *journal.Keeper

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	tables map[string]*cleanState
}

type cleanState struct {
	lock    sync.Mutex // held by a cleanup run or a commit of the table
	running bool
	last    time.Time
	timer   *time.Timer
}

func newCleanupRunner(cleaner *cleanup.Cleaner, log *slog.Logger, policies func() *policy.Set, open func(string) string,
	held func(context.Context, string) (bool, error), journal *journal.Keeper) *cleanupRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &cleanupRunner{cleaner: cleaner, log: log, policies: policies, open: open, held: held, journal: journal,
		ctx: ctx, cancel: cancel, tables: map[string]*cleanState{}}
}

func (c *cleanupRunner) state(table string) *cleanState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.tables[table]
	if st == nil {
		st = &cleanState{}
		c.tables[table] = st
	}
	return st
}

// lockTable keeps cleanup off the table until the returned func is called.
func (c *cleanupRunner) lockTable(table string) func() {
	if c == nil {
		return func() {}
	}
	st := c.state(table)
	st.lock.Lock()
	return st.lock.Unlock
}

// Trigger asks for a cleanup of table; it returns at once.
func (c *cleanupRunner) Trigger(table string) {
	if c == nil || c.ctx.Err() != nil {
		return
	}
	st := c.state(table)
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.running || st.timer != nil {
		return
	}
	st.running = true
	c.wg.Go(func() {
		again := c.runDue(table, st)
		c.mu.Lock()
		st.running = false
		if again > 0 && c.ctx.Err() == nil && st.timer == nil {
			st.timer = time.AfterFunc(again, func() {
				c.mu.Lock()
				st.timer = nil
				c.mu.Unlock()
				c.Trigger(table)
			})
		}
		c.mu.Unlock()
	})
}

// Close stops pending triggers and waits for running cleanups (cancelled:
// a stopped cleanup leaves the table readable; the next run finishes).
func (c *cleanupRunner) Close() {
	if c == nil {
		return
	}
	c.cancel()
	c.mu.Lock()
	for _, st := range c.tables {
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// runDue runs a cleanup if the table's interval has passed; otherwise it
// returns how long to wait.
func (c *cleanupRunner) runDue(table string, st *cleanState) time.Duration {
	ctx := c.ctx
	uri := c.open(table)
	tbl, b, err := openEngineTable(ctx, uri)
	if err != nil {
		c.log.Error("cleanup: open table", "table", table, "err", err)
		return 0
	}
	defer b.Close()
	m, err := tbl.Latest(ctx)
	if err != nil {
		c.log.Error("cleanup: read latest manifest", "table", table, "err", err)
		return 0
	}
	eff := c.policies().Resolve(table, m.PB.GetConfig())
	if !eff.Enabled.Value {
		return 0
	}
	interval := time.Duration(eff.Schedule.MinInterval.Value)
	if wait := time.Until(st.last.Add(interval)); !st.last.IsZero() && wait > 0 {
		return wait
	}
	if c.held != nil {
		if held, err := c.held(ctx, table); err != nil || held {
			if err != nil {
				c.log.Warn("cleanup: read hold", "table", table, "err", err)
			} else {
				c.log.Info("cleanup skipped: table held", "table", table)
			}
			return 0
		}
	}
	opts, err := cleanupOptionsFor(ctx, b, eff.Cleanup)
	if err != nil {
		c.log.Error("cleanup: settings", "table", table, "err", err)
		return 0
	}
	unlock := c.lockTable(table)
	defer unlock()
	st.last = time.Now()
	c.journal.Recover(ctx, table, b)
	// Outputs of lanced processes on this host that died since.
	if _, err := journal.AbandonDeadLocalOwners(ctx, b); err != nil {
		c.log.Warn("cleanup: journal", "table", table, "err", err)
	}
	c.log.Info("cleanup started", "table", table, "version", m.Version(), "older_than", opts.OlderThan,
		"keep_versions", opts.KeepVersions, "unverified_after", opts.UnverifiedAfter)
	plan, res, err := c.cleaner.Run(ctx, b, opts, false)
	switch {
	case errors.Is(err, cleanup.ErrCleanupBranches), errors.Is(err, cleanup.ErrCleanupTaggedOld), errors.Is(err, cleanup.ErrCleanupBasePaths):
		c.log.Warn("cleanup refused", "table", table, "version", m.Version(), "err", err)
	case err != nil:
		c.log.Error("cleanup failed", "table", table, "version", m.Version(), "err", err)
	default:
		removed := 0
		for _, v := range plan.Versions {
			if !v.Keep {
				removed++
			}
		}
		c.log.Info("table cleaned", "table", table, "version", plan.Latest, "versions_removed", removed,
			"files_removed", res.FilesDeleted, "bytes", res.BytesRemoved)
	}
	return 0
}

// cleanupOptionsFor takes every setting the policy (or the table config,
// through the policy's resolution) set, and cleanup.TableCleanupOptions
// (Lance's defaults, table config) for the rest.
func cleanupOptionsFor(ctx context.Context, b *store.Bucket, p policy.Cleanup) (cleanup.CleanupOptions, error) {
	o, err := cleanup.TableCleanupOptions(ctx, b)
	if err != nil {
		return o, err
	}
	set := func(s policy.Source) bool {
		return s.Kind != policy.FromLanceDefault && s.Kind != policy.FromLancedDefault
	}
	if set(p.OlderThan.Source) {
		o.OlderThan = time.Duration(p.OlderThan.Value)
	}
	if set(p.KeepVersions.Source) {
		o.KeepVersions = int(min(p.KeepVersions.Value, 1<<31-1))
	}
	if set(p.KeepTagged.Source) {
		o.KeepTagged = p.KeepTagged.Value
	}
	if set(p.UnverifiedAfter.Source) {
		o.UnverifiedAfter = time.Duration(p.UnverifiedAfter.Value)
	}
	if set(p.DeleteRate.Source) {
		o.DeleteRate = p.DeleteRate.Value
	}
	return o, nil
}

// cleanupParts builds the maintain workload's journal keeper and cleanup
// runner.
func (d *daemon) cleanupParts(nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger, open func(string) string) (*journal.Keeper, *cleanupRunner, error) {
	jk := journal.NewKeeper("lanced", d.flags.nodeID, log)
	cleaner, err := cleanup.NewCleaner(reg, log)
	if err != nil {
		return nil, nil, err
	}
	// A held table (table state, see internal/engine/hold) is not cleaned.
	held := hold.Tables{Open: open}.Held
	return jk, newCleanupRunner(cleaner, log, d.currentPolicies, open, held, jk), nil
}
