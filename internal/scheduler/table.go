package scheduler

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// batchMsg is a successful result waiting for its micro-batch commit.
type batchMsg struct {
	res  Result
	seq  uint64 // its sequence in the results stream
	seen time.Time
}

// resultPoll is how often the node looks for results its coordinators
// were not told about (see pollResults), and how often a busy coordinator
// wakes to check its commit and lease.
const resultPoll = 2 * time.Second

// runTable coordinates one table while this node holds its lease: it
// collects results and commits micro-batches (planning is the planners'
// job, see planTable). Once the table is idle it keeps the lease for
// Config.LeaseLinger, so the next burst of versions is planned at once,
// and then releases it. ctx is cancelled (by st.stop) when the lease is
// lost or the table found held. quiet says that no result waits for the
// table (nothing announced, none seen by the last results poll): the
// coordinator then has nothing to do before the table's first plan, which
// wakes it, and does not take the node's lock meanwhile (when a burst
// starts many coordinators at once, the planners would queue for it
// behind all of them).
func (n *Node) runTable(ctx context.Context, st *tableState, ls *lease, quiet bool) {
	defer n.stopCoordinator(ctx, st, ls) // started: logged by launch

	var batch []batchMsg
	var idleSince time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	if quiet {
		timer.Reset(resultPoll)
		select {
		case <-ctx.Done():
		case <-st.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
	// probe: read the results to the end of the subject (at start when
	// results may be waiting, after a bounded read that left more, when
	// the last read failed or results were handed back, and when the
	// node's results poll found results nobody announced); otherwise read
	// only the results announced.
	probe := false
	for ctx.Err() == nil {
		if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			n.m.leaseLost.Inc()
			n.log.Error("lease expired before renewal", "table", st.table)
			return
		}
		n.mu.Lock()
		if st.stopping {
			n.mu.Unlock()
			return // the range is being handed off
		}
		probe = probe || st.probe || !st.caughtUp
		st.probe = false
		n.mu.Unlock()
		var more bool
		batch, more = n.collect(ctx, st.table, batch, probe)
		batch = n.maybeCommit(ctx, st.table, batch)
		n.mu.Lock()
		st.unsettled = len(batch)
		st.collected = st.collected[:0]
		for _, b := range batch {
			st.collected = append(st.collected, b.res.Task.Key)
		}
		n.mu.Unlock()
		probe = false
		if more {
			idleSince = time.Time{}
			probe = true
			continue // more results to read
		}
		wait, done := n.nextWait(st, batch, &idleSince)
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

// renewLeases renews the range leases of this node, each once a third of
// the TTL passed since its last renewal, recording the range's tables and
// their in-flight task keys in it; a lost lease stops the range's
// coordinators. One loop per node checks every LeaseTTL/12 and starts
// every due renewal at once (not a bounded few: renewals must keep up
// however slow the round trips are), so a slow renewal delays no other.
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
			ls     *lease
			ctx    context.Context
			stop   context.CancelCauseFunc
			tables map[string][]string
			ended  endedTasks
		}
		var todo []due
		now := n.cfg.Now()
		n.mu.Lock()
		for _, rs := range n.ranges {
			ls := rs.lease
			if ls == nil || rs.busy || !ls.renewDue(now, n.cfg.LeaseTTL) || !ls.renewing.CompareAndSwap(false, true) {
				continue
			}
			tables := make(map[string][]string, len(rs.tables))
			for name, st := range rs.tables {
				keys := make([]string, 0, len(st.inflight))
				for k := range st.inflight {
					keys = append(keys, k)
				}
				tables[name] = keys
			}
			todo = append(todo, due{ls: ls, ctx: rs.ctx, stop: rs.stop, tables: tables, ended: n.endedRecordLocked(tables)})
		}
		n.mu.Unlock()
		for _, d := range todo {
			renewals.Go(func() {
				defer d.ls.renewing.Store(false)
				err := n.leases.renew(d.ctx, d.ls, d.tables, d.ended)
				if errors.Is(err, ErrLeaseLost) || (err != nil && !d.ls.valid(n.cfg.Now(), 0)) {
					n.m.leaseLost.Inc()
					n.log.Error("lease lost", "range", d.ls.key, "tables", len(d.tables), "err", err)
					d.stop(ErrLeaseLost)
				}
			})
		}
	}
}

// endedRecordLocked lists the tables' ended tasks for a lease record: the
// keys to queue again (tableState.redo) still inside the duplicate window
// and the abandoned keys (tableState.abandoned). n.mu is held.
func (n *Node) endedRecordLocked(tables map[string][]string) endedTasks {
	var out endedTasks
	now := n.cfg.Now()
	for name := range tables {
		st := n.tables[name]
		if st == nil {
			continue
		}
		for k, e := range st.redo {
			if now.Sub(e.at) < n.cfg.DedupWindow {
				out.Redo = addEnded(out.Redo, name, k, e.seq)
			}
		}
		for k, v := range st.abandoned {
			out.Abandoned = addEnded(out.Abandoned, name, k, v)
		}
	}
	return out
}

// addEnded sets m[table][key] = v, making the maps as needed.
func addEnded(m map[string]map[string]uint64, table, key string, v uint64) map[string]map[string]uint64 {
	if m == nil {
		m = map[string]map[string]uint64{}
	}
	if m[table] == nil {
		m[table] = map[string]uint64{}
	}
	m[table][key] = v
	return m
}

// nextWait returns how long the coordinator sleeps unless woken: until
// its batch's commit is due, resultPoll while work is outstanding, the
// rest of LeaseLinger while the table is idle. Results not read yet (the
// last read failed, or results were handed back after a failed commit:
// read again at st.rereadAt) keep the table busy; that is known from the
// last read, without asking the stream. done reports that the table
// stayed idle for LeaseLinger; the coordinator is then marked stopping in
// the same step, so no plan starts after the decision.
func (n *Node) nextWait(st *tableState, batch []batchMsg, idleSince *time.Time) (wait time.Duration, done bool) {
	now := n.cfg.Now()
	wait = resultPoll
	n.mu.Lock()
	defer n.mu.Unlock()
	// A result waiting for tasks still outstanding is not due at
	// CommitMaxWait: it becomes ready when their results are read, which
	// wakes the coordinator (a coordinator that slept 1 ms at a time
	// while a rewrite waited for its remaps took the node's lock a
	// thousand times a second).
	ready := readyResults(batch, func(b batchMsg, key string) bool { return st.outstanding(key) || n.awaiting(st, batch, b, key) })
	if i := slices.Index(ready, true); i >= 0 {
		wait = min(wait, max(time.Millisecond, batch[i].seen.Add(n.cfg.CommitMaxWait).Sub(now)))
	}
	if st.probe {
		wait = min(wait, announceRecheck) // an announced result not readable yet
	}
	busy := len(st.pending) > 0 || len(st.inflight) > 0 || len(batch) > 0 ||
		st.dirty || st.planQueued || st.planning || !st.caughtUp || st.probe
	switch {
	case !st.caughtUp && st.rereadAt.After(now):
		*idleSince = time.Time{}
		return min(wait, st.rereadAt.Sub(now)), false
	case busy:
		*idleSince = time.Time{}
		return wait, false
	case idleSince.IsZero():
		*idleSince = now
		return n.cfg.LeaseLinger, false
	case now.Sub(*idleSince) < n.cfg.LeaseLinger:
		return n.cfg.LeaseLinger - now.Sub(*idleSince), false
	}
	st.stopping = true
	return 0, true
}

// stopCoordinator ends a coordinator: it waits for a plan under way,
// releases the lease and forgets the table's queue state. Unfinished
// results stay in the results stream for the next holder; a table that
// became dirty meanwhile is queued for a lease again.
func (n *Node) stopCoordinator(ctx context.Context, st *tableState, ls *lease) {
	n.mu.Lock()
	st.stopping = true
	planDone := st.planDone
	n.mu.Unlock()
	st.stop(nil) // a plan under way is moot
	if planDone != nil {
		<-planDone
	}
	n.mu.Lock()
	st.running, st.lease, st.ctx, st.stop, st.stopping = false, nil, nil, nil, false
	n.traced(st.table, "stopped")
	rs := n.ranges[st.rng]
	last := rs != nil && rs.lease == ls && rs.tables[st.table] == st
	if last && rs.handed != nil {
		// Handed off: the receiver plans around the tasks in flight, the
		// kept results and the results read and not committed yet (the
		// receiver reads them again from the results stream), as a node
		// taking over an expired range does.
		keys := slices.Collect(maps.Keys(st.inflight))
		keys = append(keys, slices.Collect(maps.Keys(st.kept))...)
		keys = append(keys, st.collected...)
		keys = append(keys, st.inherited...)
		rs.handed[st.table] = keys
	}
	st.pending, st.inherited, st.collected = nil, nil, nil
	clear(st.inflight)
	clear(st.kept)
	clear(st.ended)
	if last {
		delete(rs.tables, st.table)
		last = len(rs.tables) == 0 && !rs.busy && !n.keepRangeLocked(st.rng)
		rs.busy = rs.busy || last
	}
	n.scheduleLocked(st)
	n.mu.Unlock()
	n.log.Info("coordinator stopped", "table", st.table, "cause", context.Cause(ctx))
	if last {
		n.releaseRange(ctx, st.rng, rs)
	}
	n.kick()
}

// releaseRange gives back the lease of a range whose last coordinator
// here stopped (marked busy by the caller), then queues the tables that
// asked for a coordinator meanwhile for a new lease attempt.
func (n *Node) releaseRange(ctx context.Context, rng int, rs *rangeState) {
	rs.stop(nil)
	n.traced(rangeKey(rng), "range-")
	n.releaseLease(ctx, rs.lease)
	n.dropRange(rng, rs, false)
}

// releaseLease deletes a range lease if it is still ours. Nothing is
// retried on failure: the record expires at its deadline and another node
// may take the range then.
func (n *Node) releaseLease(ctx context.Context, ls *lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := n.leases.release(rctx, ls); err != nil {
		n.log.Warn("range lease not released; it expires at its deadline", "range", ls.key, "err", err)
	}
}

// dropRange forgets a range this node gave up (released or handed off):
// the tables that asked for a coordinator meanwhile are queued for a new
// lease attempt or, when the range was handed to another node, left to
// it.
func (n *Node) dropRange(rng int, rs *rangeState, handed bool) {
	n.m.leasesHeld.Dec()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ranges[rng] == rs {
		delete(n.ranges, rng)
		n.held[rng].CompareAndSwap(rs.lease, nil)
	}
	for _, w := range rs.waiting {
		w.leaseQueued = false
		if handed {
			w.dirty = false // the receiver plans it
		} else {
			n.scheduleLocked(w)
		}
	}
	rs.waiting = nil
}
