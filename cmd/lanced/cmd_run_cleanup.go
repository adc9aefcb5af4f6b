package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
)

// newCleanupRunner wires the daemon's cleanup scheduler (cleanup.Scheduler
// decides when): a table is cleaned when its effective policy is enabled,
// at most once per schedule.min_interval, with the policy's cleanup block
// over the table's lance.auto_cleanup.* config over Lance's defaults.
// Metrics: the engine's lanced_cleanup_* series on the daemon's registry.
func newCleanupRunner(cleaner *cleanup.Cleaner, log *slog.Logger, policies func() *policy.Set, open func(string) string,
	held func(context.Context, string) (bool, error), jk *journal.Keeper) *cleanup.Scheduler {
	return cleanup.NewScheduler(cleanup.SchedulerConfig{
		Cleaner: cleaner, Log: log, Open: open, Held: held, Journal: jk,
		Settings: func(table string, m *format.Manifest) (cleanup.Settings, error) {
			eff := policies().Resolve(table, m.PB.GetConfig())
			o, err := cleanupOptionsFor(m, eff.Cleanup)
			return cleanup.Settings{Enabled: eff.Enabled.Value, MinInterval: time.Duration(eff.Schedule.MinInterval.Value), Options: o}, err
		},
	})
}

// cleanupOptionsFor takes every setting the policy (or the table config,
// through the policy's resolution) set, and the table's latest manifest
// config over Lance's defaults for the rest.
func cleanupOptionsFor(m *format.Manifest, p policy.Cleanup) (cleanup.CleanupOptions, error) {
	o, err := cleanup.CleanupOptionsFromConfig(m.PB.GetConfig())
	if err != nil {
		return o, err
	}
	set := func(s policy.Source) bool {
		return s.Kind != policy.FromLanceDefault && s.Kind != policy.FromLancedDefault
	}
	if set(p.OlderThan.Source) {
		o.OlderThan = time.Duration(p.OlderThan.Value)
	}
	if set(p.KeepVersions.Source) || o.KeepVersions == 0 {
		// Unset: Lance's default count, as policy explain shows it (the
		// latest version is kept either way).
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
// scheduler.
func (d *daemon) cleanupParts(nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger, open func(string) string) (*journal.Keeper, *cleanup.Scheduler, error) {
	jk := journal.NewKeeper("lanced", d.flags.nodeID, log)
	cleaner, err := cleanup.NewCleaner(reg, log)
	if err != nil {
		return nil, nil, err
	}
	// A held table (table state, see internal/engine/hold) is not cleaned.
	held := hold.Tables{Open: open}.Held
	return jk, newCleanupRunner(cleaner, log, d.currentPolicies, open, held, jk), nil
}
