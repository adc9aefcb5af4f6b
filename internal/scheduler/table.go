package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// batchMsg is a successful result waiting for its micro-batch commit.
type batchMsg struct {
	res  Result
	seq  uint64 // its sequence in the results stream
	seen time.Time
}

// resultPoll is how often a busy coordinator reads its results without
// being woken by a notification.
const resultPoll = 2 * time.Second

// runTable coordinates one table while this node holds its lease: it
// collects results and commits micro-batches (planning is the planners'
// job, see planTable). Once the table is idle it keeps the lease for
// Config.LeaseLinger, so the next burst of versions is planned at once,
// and then releases it. ctx is cancelled (by st.stop) when the lease is
// lost or the table found held.
func (n *Node) runTable(ctx context.Context, st *tableState, ls *lease) {
	log := n.log.With("table", st.table)
	defer n.stopCoordinator(ctx, st, ls, log)
	log.Info("coordinator started")

	var batch []batchMsg
	var idleSince time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			n.m.leaseLost.Inc()
			log.Error("lease expired before renewal")
			return
		}
		batch = n.collect(ctx, st.table, batch)
		batch = n.maybeCommit(ctx, st.table, batch)
		wait, done := n.nextWait(ctx, st, batch, &idleSince, log)
		if done {
			return
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-st.wake:
		case <-timer.C:
		}
		timer.Stop() // since Go 1.23 Stop leaves no stale tick behind
	}
}

// renewLeases renews the leases of this node's coordinators, each once a
// third of the TTL passed since its last renewal, recording the table's
// in-flight task keys in it; a lost lease stops its coordinator. One loop
// per node checks every LeaseTTL/12 and starts every due renewal at once
// (not a bounded few: renewals must keep up with leases/(TTL/3) however
// slow the round trips are), so a slow renewal delays no other and no
// table needs a timer of its own.
func (n *Node) renewLeases(ctx context.Context) {
	t := time.NewTicker(n.cfg.LeaseTTL / 12)
	defer t.Stop()
	var renewals sync.WaitGroup
	defer renewals.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		type due struct {
			st   *tableState
			ls   *lease
			ctx  context.Context
			stop context.CancelCauseFunc
			keys []string
		}
		var todo []due
		now := n.cfg.Now()
		n.mu.Lock()
		for _, st := range n.tables {
			ls := st.lease
			if !st.running || ls == nil || !ls.renewDue(now, n.cfg.LeaseTTL) || !ls.renewing.CompareAndSwap(false, true) {
				continue
			}
			keys := make([]string, 0, len(st.inflight))
			for k := range st.inflight {
				keys = append(keys, k)
			}
			todo = append(todo, due{st: st, ls: ls, ctx: st.ctx, stop: st.stop, keys: keys})
		}
		n.mu.Unlock()
		for _, d := range todo {
			renewals.Go(func() {
				defer d.ls.renewing.Store(false)
				err := n.leases.renew(d.ctx, d.ls, d.keys)
				if errors.Is(err, ErrLeaseLost) || (err != nil && !d.ls.valid(n.cfg.Now(), 0)) {
					n.m.leaseLost.Inc()
					n.log.Error("lease lost", "table", d.st.table, "err", err)
					d.stop(ErrLeaseLost)
				}
			})
		}
	}
}

// nextWait returns how long the coordinator sleeps unless woken: until
// its batch's commit is due, resultPoll while work is outstanding, the
// rest of LeaseLinger while the table is idle. done reports that the
// table stayed idle for LeaseLinger; the coordinator is then marked
// stopping in the same step, so no plan starts after the decision.
func (n *Node) nextWait(ctx context.Context, st *tableState, batch []batchMsg, idleSince *time.Time, log *slog.Logger) (wait time.Duration, done bool) {
	now := n.cfg.Now()
	wait = resultPoll
	if len(batch) > 0 {
		wait = min(wait, max(time.Millisecond, batch[0].seen.Add(n.cfg.CommitMaxWait).Sub(now)))
	}
	n.mu.Lock()
	busy := len(st.pending) > 0 || len(st.inflight) > 0 || len(batch) > 0 ||
		st.dirty || st.planQueued || st.planning
	rereadAt := st.rereadAt
	n.mu.Unlock()
	if busy {
		*idleSince = time.Time{}
		return wait, false
	}
	// Results nobody read yet (the previous holder's, or handed back after
	// a failed commit) keep the table busy.
	m, err := n.q.nextResult(ctx, st.table, 0)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("read results", "err", err)
		return wait, false
	case m != nil:
		*idleSince = time.Time{}
		n.mu.Lock()
		st.resultsFrom = min(st.resultsFrom, m.Sequence)
		n.mu.Unlock()
		return max(0, rereadAt.Sub(now)), false
	case idleSince.IsZero():
		*idleSince = now
		return n.cfg.LeaseLinger, false
	case now.Sub(*idleSince) < n.cfg.LeaseLinger:
		return n.cfg.LeaseLinger - now.Sub(*idleSince), false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if st.dirty || st.planQueued || st.planning || len(st.pending) > 0 {
		*idleSince = time.Time{} // a version arrived while reading
		return 0, false
	}
	st.stopping = true
	return 0, true
}

// stopCoordinator ends a coordinator: it waits for a plan under way,
// releases the lease and forgets the table's queue state. Unfinished
// results stay in the results stream for the next holder; a table that
// became dirty meanwhile is queued for a lease again.
func (n *Node) stopCoordinator(ctx context.Context, st *tableState, ls *lease, log *slog.Logger) {
	n.mu.Lock()
	st.stopping = true
	planDone := st.planDone
	n.mu.Unlock()
	st.stop(nil) // a plan under way is moot
	if planDone != nil {
		<-planDone
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = n.leases.release(rctx, ls)
	rcancel()
	n.mu.Lock()
	st.running, st.lease, st.ctx, st.stop, st.stopping = false, nil, nil, nil, false
	st.pending, st.inherited = nil, nil
	clear(st.inflight)
	clear(st.kept)
	n.scheduleLocked(st)
	n.mu.Unlock()
	n.m.leasesHeld.Dec()
	log.Info("coordinator stopped", "cause", context.Cause(ctx))
	n.kick()
}
