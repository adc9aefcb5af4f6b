package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"
)

// tableState is this node's view of one table. All fields are guarded by
// Node.mu.
type tableState struct {
	table      string
	rng        int    // its lease range
	latest     uint64 // highest version announced
	maintained uint64 // version of the last plan or commit we made
	dirty      bool   // needs (re-)evaluation
	running    bool   // a coordinator goroutine holds the lease
	lease      *lease
	// ctx and stop are the running coordinator's context and its cancel:
	// planners plan under ctx, and stop ends the coordinator (lease lost,
	// table held).
	ctx  context.Context
	stop context.CancelCauseFunc
	// stopping is set once the coordinator decided to release the lease:
	// no plan starts after it.
	stopping bool
	// leaseQueued: the table waits for, or is in, a lease attempt.
	// planQueued: it waits in the plan queue; planning: a planner works
	// on it and closes planDone when that plan ends.
	leaseQueued bool
	// leaseDeferred: the table's lease attempt waited for another
	// node's turn at its range (leaseTurn); the next attempt does not.
	leaseDeferred bool
	planQueued    bool
	planning      bool
	planDone      chan struct{}
	// inherited are the previous holder's in-flight task keys, for the
	// first plan after a takeover.
	inherited []string
	pending   []Task               // planned, not yet enqueued
	inflight  map[string]time.Time // enqueued, no final result yet
	// kept are keys of results a commit kept back for follow-up tasks
	// (CommitReport.Kept) and not yet committed: planned around like
	// tasks in flight.
	kept map[string]bool
	// ended are keys of tasks whose final result was read and was not a
	// success: results that name them in After stop waiting for them.
	ended     map[string]bool
	batchSize int
	// planFailures counts consecutive plans that failed with a transient
	// error; the next attempt waits backoff(planFailures) and needs no event.
	planFailures uint64
	replanAt     *time.Timer
	// resultsFrom is the stream sequence the coordinator reads results
	// from next; rereadAt holds reading back while results handed back
	// after a failed commit wait.
	resultsFrom uint64
	rereadAt    time.Time
	// caughtUp: the last read of the table's results reached the end of
	// its subject and none was handed back since, so the coordinator
	// knows there is nothing unread without asking the stream again.
	caughtUp bool
	// notified counts the results announced on the table's subject since
	// its coordinator last read them (counted while no coordinator runs
	// here too, so one that starts reads what was announced before).
	notified int
	// probe asks the coordinator to read its results to the end of its
	// subject on its next turn: the node's results poll found more
	// results under the subject than the coordinator holds (unsettled),
	// so an announcement was missed.
	probe     bool
	unsettled int
	// collected are the keys of the results the coordinator read and has
	// not committed or dropped yet: no longer in flight, not yet kept, and
	// still work the planner must plan around.
	collected []string
	// wake tells the table's coordinator that something changed: a new
	// result on its subject, a plan that queued tasks.
	wake chan struct{}
	// redo holds the keys of tasks whose copy ended without being
	// committed (failed, given up, dropped at commit) inside the task
	// stream's duplicate window, with that copy's task stream sequence:
	// planned again, such a task is published as a new attempt named
	// after that copy (attemptID), not deduplicated against it. It
	// outlives the coordinator and is recorded in the range's lease, so a
	// node that takes the range over publishes the same attempt.
	redo map[string]endedCopy
	// abandoned holds the keys of tasks whose copy was abandoned (the
	// executor's ErrIncompatible or ErrInvalidTask, the engine's Skip and
	// Abandon, deliveries exhausted: dead-lettered; not a task skipped
	// because its table was held, which is queued again) with
	// their read version: such a task is not queued again at that read
	// version; the table's next version is planned afresh. Recorded in the
	// range's lease like redo.
	abandoned map[string]uint64
	// heldCheckedAt is when the table was last found not held; a
	// coordinator that keeps its lease checks again after holdRecheck.
	heldCheckedAt time.Time
}

// holdRecheck is how long a "not held" answer stands for a running
// coordinator: a hold placed elsewhere stops its planning within this.
const holdRecheck = 5 * time.Second

func (n *Node) state(table string) *tableState {
	st := n.tables[table]
	if st == nil {
		st = &tableState{table: table, rng: rangeOf(table), inflight: map[string]time.Time{}, wake: make(chan struct{}, 1)}
		n.tables[table] = st
		n.byID[TableID(table)] = st
	}
	return st
}

// noteVersion records an announced version and marks the table dirty: it
// goes to the plan queue when its coordinator runs here, to the lease
// queue otherwise; a table of a range another node holds (the lease view
// says so) is left to that node, which heard the same announcement, as a
// lease attempt would decide, without one.
func (n *Node) noteVersion(table string, version uint64) {
	n.noteVersions([]poke{{Table: table, Version: version}})
}

// noteVersions is noteVersion for many announcements under one hold of
// n.mu (a batch of pokes would otherwise take the node's lock once per
// table, queueing behind planners and coordinators each time).
func (n *Node) noteVersions(ps []poke) {
	for _, p := range ps {
		n.traced(p.Table, "poke")
	}
	now := n.cfg.Now()
	var starts []coordStart
	n.mu.Lock()
	for _, p := range ps {
		st := n.state(p.Table)
		st.latest = max(st.latest, p.Version)
		if !st.running && !st.leaseQueued && n.ranges[st.rng] == nil && n.view.heldElsewhere(rangeKey(st.rng), n.cfg.NodeID, now) {
			continue
		}
		if start, ok := n.startHeldLocked(st, now); ok {
			starts = append(starts, start)
			continue
		}
		n.markDirtyLocked(st)
	}
	n.mu.Unlock()
	n.launch(starts)
}

// startHeldLocked starts the coordinator of a table without one whose
// range this node holds (a range kept idle, see homeranges.go, or one
// whose other tables are coordinated here) at once, without a turn in
// the lease queue: nothing is to be decided there. Its first plan checks
// whether the table is held (heldCheckedAt is left zero), as a lease
// attempt would have before starting it. It returns startLocked's
// start, false when it started none. n.mu is held.
func (n *Node) startHeldLocked(st *tableState, now time.Time) (coordStart, bool) {
	if st.running || st.leaseQueued || n.coords == nil || n.planner == nil || !n.ready.Load() {
		return coordStart{}, false
	}
	rs := n.ranges[st.rng]
	if rs == nil || rs.busy || rs.lease == nil || rs.ctx.Err() != nil || !rs.lease.valid(now, n.cfg.LeaseTTL/6) {
		return coordStart{}, false
	}
	n.traced(st.table, "lease")
	start := n.startLocked(n.coords, st, rs)
	st.heldCheckedAt = time.Time{}
	return start, true
}

// markDirtyLocked marks the table for (re-)evaluation and queues it.
// n.mu is held.
func (n *Node) markDirtyLocked(st *tableState) {
	st.dirty = true
	n.scheduleLocked(st)
}

// scheduleLocked queues a dirty table once: for a planner when its
// coordinator runs here (and is not stopping), for a lease attempt when
// none does. n.mu is held.
func (n *Node) scheduleLocked(st *tableState) {
	switch {
	case !st.dirty || n.planner == nil:
	case st.running:
		if !st.planQueued && !st.planning && !st.stopping {
			st.planQueued = true
			n.planQ.push(st.table)
		}
	case !st.leaseQueued:
		st.leaseQueued, st.leaseDeferred = true, false
		n.leaseQ.push(st.table)
	}
}

// noteResult counts a result published on the subject of the table with
// the given id and wakes the table's coordinator, if it runs here.
func (n *Node) noteResult(id string) {
	n.mu.Lock()
	st := n.byID[id]
	running := st != nil && st.running
	if st != nil {
		st.notified++
	}
	n.mu.Unlock()
	if running {
		wake(st.wake)
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// startCoordinators queues a lease attempt for every dirty table without
// a coordinator here that is not queued yet (an attempt that failed, a
// coordinator that stopped with the table dirty).
func (n *Node) startCoordinators() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, st := range n.tables {
		if st.dirty && !st.running {
			n.scheduleLocked(st)
		}
	}
}

// leaseAttempts is how many lease attempts of one node run side by side:
// each is a KV round trip, so a burst over many tables must not queue
// behind them one by one.
const leaseAttempts = 64

// leaseTurn is how long a node waits at least per turn before it takes
// a free range whose turn is another node's (leaseView.rangeRank; see
// leaser.turn): long enough for that node to reach the range in its
// lease queue (nodes working through one burst were 300 ms apart on a
// loaded machine) and for its lease write to reach this node's lease
// view. It delays a table only when the node whose turn it is does not
// take the range (it died, its record not yet expired).
const leaseTurn = time.Second

var dbgAcquire func(node string, d time.Duration, ok bool, err error)

// runLeaser serves the lease queue until ctx ends.
func (n *Node) runLeaser(ctx context.Context, wg *sync.WaitGroup) {
	for {
		table, ok := n.leaseQ.pop(ctx)
		if !ok {
			return
		}
		n.tryCoordinate(ctx, wg, table)
	}
}

// rangeState is this node's hold of one lease range: the range's lease
// and the tables coordinated under it. All fields are guarded by Node.mu.
type rangeState struct {
	// lease is nil while the range is being acquired.
	lease *lease
	// ctx is the parent of the range's coordinators' contexts; stop ends
	// them all (the lease was lost).
	ctx  context.Context
	stop context.CancelCauseFunc
	// tables are the coordinators running under the lease; the lease is
	// released when the last one stops.
	tables map[string]*tableState
	// busy is set while the lease is being acquired or released; tables
	// that want a coordinator meanwhile wait in waiting (still lease
	// queued) and are started, dropped or queued again when it ends.
	busy    bool
	waiting []*tableState
	// inherited holds the previous holder's in-flight task keys per table
	// after a takeover, handed to each table's first plan.
	inherited map[string][]string
	// handed is set while the range is being handed to another node: each
	// coordinator that stops records its table's tasks in flight here.
	handed map[string][]string
}

// tryCoordinate starts the table's coordinator when this node holds the
// table's lease range, or takes the range's lease if nobody holds it; a
// table of a range another node holds is left to it. The table leaves
// the lease queue when the attempt ends.
func (n *Node) tryCoordinate(ctx context.Context, wg *sync.WaitGroup, table string) {
	n.mu.Lock()
	st := n.tables[table]
	if st.running || !st.dirty {
		st.leaseQueued = false // started or settled since it was queued
		n.mu.Unlock()
		return
	}
	key := rangeKey(st.rng)
	elsewhere := n.ranges[st.rng] == nil && n.view.heldElsewhere(key, n.cfg.NodeID, n.cfg.Now())
	n.mu.Unlock()
	n.traced(table, "lease")
	// notOurs settles an attempt that found the range coordinated
	// elsewhere (that node heard the same announcement) or the table held.
	notOurs := func() {
		n.mu.Lock()
		st.dirty, st.leaseQueued = false, false
		n.mu.Unlock()
	}
	if elsewhere || n.legacyHeld(table) {
		notOurs()
		return
	}
	if held, _ := n.isHeld(ctx, table); held {
		notOurs()
		n.m.plans.WithLabelValues("held").Inc()
		return
	}
	n.mu.Lock()
	rs := n.ranges[st.rng]
	switch {
	case rs != nil && rs.busy:
		rs.waiting = append(rs.waiting, st)
		n.mu.Unlock()
		return
	case rs != nil:
		var starts []coordStart
		if rs.lease.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			starts = append(starts, n.startLocked(wg, st, rs))
		} else {
			st.leaseQueued = false // lapsing: taken again once its coordinators stopped
		}
		n.mu.Unlock()
		n.launch(starts)
		return
	case n.view.heldElsewhere(key, n.cfg.NodeID, n.cfg.Now()):
		n.mu.Unlock()
		notOurs()
		return
	}
	if !st.leaseDeferred {
		// Not this node's turn for the range: the node whose turn it is
		// heard the same announcement and takes it meanwhile, which the
		// lease view shows when the table comes back; a node whose turn
		// came takes the range itself.
		if rank := n.view.rangeRank(st.rng, n.cfg.NodeID, n.cfg.Now()); rank > 0 {
			st.leaseDeferred = true
			n.mu.Unlock()
			time.AfterFunc(time.Duration(rank)*n.leases.turn(), func() { n.leaseQ.push(table) })
			return
		}
	}
	st.leaseDeferred = false
	rs = &rangeState{busy: true, tables: map[string]*tableState{}, waiting: []*tableState{st}}
	n.ranges[st.rng] = rs
	n.mu.Unlock()
	n.acquireRange(ctx, wg, st.rng, rs, table)
}

// acquireRange takes the lease of range rng for rs, which the caller put
// in n.ranges marked busy, and starts the coordinators of the tables that
// waited for it; table names the table that asked for it in logs ("" for
// a home range, see homeranges.go). On failure, rs is forgotten and the
// waiting tables are left to the next attempt or to the holder.
func (n *Node) acquireRange(ctx context.Context, wg *sync.WaitGroup, rng int, rs *rangeState, table string) {
	key := rangeKey(rng)
	n.traced(key, "acquire")
	ls, prev, err := n.leases.acquire(ctx, rng, n.view.freeRevision(key))
	var starts []coordStart
	defer func() { n.launch(starts) }() // after the unlock below
	n.mu.Lock()
	defer n.mu.Unlock()
	rs.busy = false
	waiting := rs.waiting
	rs.waiting = nil
	if err != nil || ls == nil {
		delete(n.ranges, rng)
		for _, w := range waiting {
			w.leaseQueued = false // on an error, the next sweep tries again
			if err == nil {
				w.dirty = false // held elsewhere
			}
		}
		if err != nil {
			n.log.Warn("acquire lease", "range", key, "table", table, "err", err)
		}
		return
	}
	rs.lease = ls
	n.held[rng].Store(ls)
	rs.ctx, rs.stop = context.WithCancelCause(ctx)
	n.m.leasesHeld.Inc()
	n.traced(key, "range+")
	if prev != nil {
		// Every table the previous holder coordinated, and every table
		// of the range this node heard of, is looked at again: its
		// holder may have died with work planned.
		rs.inherited = prev.Tables
		for t := range prev.Tables {
			n.markDirtyLocked(n.state(t))
		}
		n.inheritEndedLocked(prev.endedTasks)
		for _, o := range n.tables {
			if o.rng == rng && !o.leaseQueued {
				n.markDirtyLocked(o)
			}
		}
		if prev.Holder == "" && prev.HandOffFrom != "" {
			n.log.Info("handed range taken", "range", key, "table", table, "from", prev.HandOffFrom, "tables", len(prev.Tables))
		} else {
			n.log.Info("lease taken over", "range", key, "table", table, "previous_holder", prev.Holder, "tables", len(prev.Tables))
		}
	}
	for _, w := range waiting {
		if w.dirty && !w.running {
			starts = append(starts, n.startLocked(wg, w, rs))
		} else {
			w.leaseQueued = false
		}
	}
}

// coordStart is a coordinator startLocked made, launched by launch once
// the caller released n.mu.
type coordStart struct {
	wg   *sync.WaitGroup
	st   *tableState
	push bool // the table's first plan is to be put in the plan queue
	run  func()
}

// startLocked makes the table's coordinator under the range's lease and
// marks its first plan queued. n.mu is held. The caller must launch the
// returned start once it released n.mu (with n.mu held, the plan
// queue's lock and the log would keep the planners, woken by the push,
// waiting for n.mu; logging in the new goroutine grew its stack; a burst
// starts thousands).
func (n *Node) startLocked(wg *sync.WaitGroup, st *tableState, rs *rangeState) coordStart {
	cctx, stop := context.WithCancelCause(rs.ctx)
	st.leaseQueued = false
	st.running, st.lease, st.ctx, st.stop, st.stopping = true, rs.lease, cctx, stop, false
	st.heldCheckedAt = n.cfg.Now()
	st.inherited = rs.inherited[st.table]
	delete(rs.inherited, st.table)
	st.dirty = true // the first plan
	// The coordinator reads its subject to the end at start only when
	// the node's last results poll saw results under it (or none was
	// made yet); results stored since were announced and are counted in
	// st.notified.
	st.resultsFrom, st.rereadAt, st.unsettled = 0, time.Time{}, 0
	st.caughtUp = !n.results.mayHave(st.table)
	st.probe = !st.caughtUp
	rs.tables[st.table] = st
	// As scheduleLocked would for a running coordinator, the push left
	// to launch (a table marked queued is not pushed again meanwhile).
	push := !st.planQueued
	st.planQueued = true
	n.traced(st.table, "leased")
	ls := rs.lease
	quiet := st.caughtUp && st.notified == 0
	return coordStart{wg: wg, st: st, push: push, run: func() { n.runTable(cctx, st, ls, quiet) }}
}

// launch puts the first plans of the started coordinators in the plan
// queue, all under one hold of its lock, then runs the coordinators and
// logs their starts. Queueing every table first lets the planners start
// on a burst's first plans while the goroutines are made and the start
// lines written (a cold burst starts a coordinator for each of thousands
// of tables, and each line waits for the log's writer).
func (n *Node) launch(starts []coordStart) {
	var push []string
	for _, s := range starts {
		if s.push {
			push = append(push, s.st.table)
		}
	}
	n.planQ.push(push...)
	for _, s := range starts {
		s.wg.Go(s.run)
	}
	for _, s := range starts {
		n.log.Info("coordinator started", "table", s.st.table)
	}
}

// dispatch publishes pending tasks round-robin across tables, one task per
// table per turn, within the per-table cap and the global queue depth. Up
// to dispatchBatch tasks are taken at a time and published without
// waiting for each acknowledgement in turn.
func (n *Node) dispatch(ctx context.Context) {
	for ctx.Err() == nil {
		room := int64(n.cfg.MaxQueueDepth) - n.depth.Load()
		if room <= 0 {
			// Backpressure: refresh the real depth before giving up.
			if d, err := n.q.depth(ctx); err == nil {
				n.depth.Store(int64(d))
				n.m.queueDepth.Set(float64(d))
			}
			if room = int64(n.cfg.MaxQueueDepth) - n.depth.Load(); room <= 0 {
				return
			}
		}
		tasks := n.nextTasks(int(min(room, dispatchBatch)))
		if len(tasks) == 0 {
			return
		}
		results := n.q.publishAll(ctx, tasks, n.attemptsOf(tasks))
		failed := false
		n.mu.Lock()
		for i, t := range tasks {
			st := n.tables[t.Table]
			switch r := results[i]; {
			case r.err != nil:
				// Back to the front of the table's pending tasks, in order.
				delete(st.inflight, t.Key)
				st.pending = append([]Task{t}, st.pending...)
				n.withPending[t.Table] = struct{}{}
				failed = true
				continue
			case r.duplicate:
				// JetStream already had this attempt inside its dedup
				// window: it is queued, running or done, and its result
				// (if any) reaches us through the results stream. Nothing
				// new is in flight.
				delete(st.inflight, t.Key)
			}
		}
		n.mu.Unlock()
		for i, t := range tasks {
			r := results[i]
			if r.err != nil {
				n.log.Warn("enqueue task", "table", t.Table, "task_id", t.Key, "err", r.err)
				continue
			}
			res := "queued"
			if r.duplicate {
				res = "duplicate"
			}
			n.m.enqueued.WithLabelValues(t.Kind, res).Inc()
			n.depth.Add(1)
			n.log.Debug("task enqueued", "table", t.Table, "task_id", t.Key, "kind", t.Kind, "duplicate", r.duplicate)
		}
		if failed {
			return
		}
	}
}

// endedCopy is a copy of a task that ended without being committed: when
// its result was read, and its task stream sequence (0 if not known).
type endedCopy struct {
	at  time.Time
	seq uint64
}

// attemptsOf returns, for each task, the task stream sequence of its copy
// that ended without being committed inside the duplicate window
// (tableState.redo), 0 for none: the attempt to publish (attemptID).
func (n *Node) attemptsOf(tasks []Task) []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	after := make([]uint64, len(tasks))
	for i, t := range tasks {
		if e, ok := n.tables[t.Table].redo[t.Key]; ok && n.cfg.Now().Sub(e.at) < n.cfg.DedupWindow {
			after[i] = e.seq
		}
	}
	return after
}

// noteRedoLocked records that the copy of the task with key at task
// stream sequence seq ended without being committed. A copy whose
// sequence is not known (0: a result of an earlier lanced version, which
// does not say) cannot be named, and the task is left to the duplicate
// window. n.mu is held.
func (n *Node) noteRedoLocked(st *tableState, key string, seq uint64) {
	if seq == 0 {
		return
	}
	if st.redo == nil {
		st.redo = map[string]endedCopy{}
	}
	now := n.cfg.Now()
	for k, e := range st.redo {
		if now.Sub(e.at) >= n.cfg.DedupWindow {
			delete(st.redo, k)
		}
	}
	if e, ok := st.redo[key]; ok && e.seq >= seq {
		return // a later copy's end is known already
	}
	st.redo[key] = endedCopy{at: now, seq: seq}
}

// noteAbandonedLocked records that the task with key at read version
// version was abandoned (tableState.abandoned). n.mu is held.
func (n *Node) noteAbandonedLocked(st *tableState, key string, version uint64) {
	if st.abandoned == nil {
		st.abandoned = map[string]uint64{}
	}
	st.abandoned[key] = version
}

// inheritEndedLocked takes the ended tasks a range's previous holder
// recorded in its lease. n.mu is held.
func (n *Node) inheritEndedLocked(e endedTasks) {
	for t, keys := range e.Redo {
		for k, seq := range keys {
			n.noteRedoLocked(n.state(t), k, seq)
		}
	}
	for t, keys := range e.Abandoned {
		for k, v := range keys {
			n.noteAbandonedLocked(n.state(t), k, v)
		}
	}
}

// dispatchBatch bounds the tasks one dispatch turn publishes together.
const dispatchBatch = 256

// addPendingLocked appends a planned task to the table's pending tasks.
// n.mu is held.
func (n *Node) addPendingLocked(st *tableState, t Task) {
	st.pending = append(st.pending, t)
	n.withPending[st.table] = struct{}{}
}

// nextTasks takes up to limit tasks in round-robin order (one per table per
// turn, tables in name order starting after the last one served) and marks
// them in flight. It looks only at the tables with pending tasks, not at
// every table this node knows.
func (n *Node) nextTasks(limit int) []Task {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ring = n.ring[:0]
	var total int
	now := n.cfg.Now()
	for t := range n.withPending {
		st := n.tables[t]
		if len(st.pending) == 0 {
			delete(n.withPending, t)
			continue
		}
		total += len(st.pending)
		if st.running && len(st.inflight) < n.cfg.TableInFlight && st.lease.valid(now, n.cfg.LeaseTTL/6) {
			n.ring = append(n.ring, t)
		}
	}
	if len(n.ring) == 0 {
		n.m.pending.Set(float64(total))
		return nil
	}
	slices.Sort(n.ring)
	var out []Task
	start := n.next % len(n.ring)
	for len(out) < limit {
		progressed := false
		for i := range n.ring {
			if len(out) == limit {
				break
			}
			st := n.tables[n.ring[(start+i)%len(n.ring)]]
			if len(st.pending) == 0 || len(st.inflight) >= n.cfg.TableInFlight {
				continue
			}
			t := st.pending[0]
			st.pending = st.pending[1:]
			st.inflight[t.Key] = now
			out = append(out, t)
			progressed = true
		}
		if !progressed {
			break
		}
	}
	n.next = start + 1
	n.m.pending.Set(float64(total - len(out)))
	return out
}
