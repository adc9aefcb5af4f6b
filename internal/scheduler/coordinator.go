package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// tableState is this node's view of one table. All fields are guarded by
// Node.mu.
type tableState struct {
	table      string
	latest     uint64 // highest version announced
	maintained uint64 // version of the last plan or commit we made
	dirty      bool   // needs (re-)evaluation
	running    bool   // a coordinator goroutine holds the lease
	lease      *lease
	pending    []Task               // planned, not yet enqueued
	inflight   map[string]time.Time // enqueued, no final result yet
	batchSize  int
	// planFailures counts consecutive plans that failed with a transient
	// error; the next attempt waits backoff(planFailures) and needs no event.
	planFailures uint64
	replanAt     *time.Timer
	// resultsFrom is the stream sequence the coordinator reads results
	// from next; rereadAt holds reading back while results handed back
	// after a failed commit wait.
	resultsFrom uint64
	rereadAt    time.Time
	// wake tells the table's coordinator that something changed: a new
	// result on its subject, a new version.
	wake chan struct{}
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
		st = &tableState{table: table, inflight: map[string]time.Time{}, wake: make(chan struct{}, 1)}
		n.tables[table] = st
		n.byID[TableID(table)] = st
	}
	return st
}

// noteVersion records an announced version and marks the table dirty. A
// running coordinator is woken; otherwise the coordinate loop takes the
// lease.
func (n *Node) noteVersion(table string, version uint64) {
	n.mu.Lock()
	st := n.state(table)
	st.latest = max(st.latest, version)
	st.dirty = true
	running := st.running
	n.mu.Unlock()
	if running {
		wake(st.wake)
	} else {
		n.kick()
	}
}

// noteResult wakes the coordinator of the table with the given id, if it
// runs here: a result was published on its subject.
func (n *Node) noteResult(id string) {
	n.mu.Lock()
	st := n.byID[id]
	running := st != nil && st.running
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

// startCoordinators tries to take the lease of every dirty table that has
// no coordinator here; tables another node coordinates are left to it.
func (n *Node) startCoordinators(ctx context.Context, wg *sync.WaitGroup) {
	if n.planner == nil {
		return
	}
	n.mu.Lock()
	var want []string
	for t, st := range n.tables {
		if st.dirty && !st.running {
			want = append(want, t)
		}
	}
	n.mu.Unlock()
	slices.Sort(want)
	// Lease attempts are KV round trips (hold check, get, create): run them
	// side by side so a burst over many tables does not queue behind them.
	sem := make(chan struct{}, leaseAttempts)
	var attempts sync.WaitGroup
	for _, table := range want {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		attempts.Go(func() {
			defer func() { <-sem }()
			n.tryCoordinate(ctx, wg, table)
		})
	}
	attempts.Wait()
}

// leaseAttempts bounds the concurrent lease attempts of one node.
const leaseAttempts = 64

// tryCoordinate takes the table's lease if nobody holds it and starts its
// coordinator; a table another node coordinates is left to it.
func (n *Node) tryCoordinate(ctx context.Context, wg *sync.WaitGroup, table string) {
	if n.view.heldElsewhere(TableID(table), n.cfg.NodeID, n.cfg.Now()) {
		// Coordinated elsewhere; that node heard the same announcement.
		n.mu.Lock()
		n.tables[table].dirty = false
		n.mu.Unlock()
		return
	}
	if held, _ := n.isHeld(ctx, table); held {
		n.mu.Lock()
		n.tables[table].dirty = false
		n.mu.Unlock()
		n.m.plans.WithLabelValues("held").Inc()
		return
	}
	n.mu.Lock()
	n.tables[table].heldCheckedAt = n.cfg.Now()
	n.mu.Unlock()
	ls, prev, err := n.leases.acquire(ctx, table)
	if err != nil {
		n.log.Warn("acquire lease", "table", table, "err", err)
		return
	}
	n.mu.Lock()
	st := n.tables[table]
	if ls == nil {
		// Coordinated elsewhere; that node heard the same poke.
		st.dirty = false
		n.mu.Unlock()
		return
	}
	st.running, st.lease = true, ls
	n.mu.Unlock()
	n.m.leasesHeld.Inc()
	var inherited []string
	if prev != nil {
		inherited = prev.InFlight
		n.log.Info("lease taken over", "table", table, "previous_holder", prev.Holder)
	}
	wg.Go(func() { n.runTable(ctx, table, ls, inherited) })
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
		results := n.q.publishAll(ctx, tasks)
		failed := false
		n.mu.Lock()
		for i, t := range tasks {
			st := n.tables[t.Table]
			switch r := results[i]; {
			case r.err != nil:
				// Back to the front of the table's pending tasks, in order.
				delete(st.inflight, t.Key)
				st.pending = append([]Task{t}, st.pending...)
				failed = true
			case r.duplicate:
				// JetStream already had this key inside its dedup window:
				// the original is queued, running or done, and its result
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

// dispatchBatch bounds the tasks one dispatch turn publishes together.
const dispatchBatch = 256

// nextTasks takes up to limit tasks in round-robin order (one per table per
// turn, tables in name order starting after the last one served) and marks
// them in flight.
func (n *Node) nextTasks(limit int) []Task {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ring = n.ring[:0]
	var total int
	now := n.cfg.Now()
	for t, st := range n.tables {
		total += len(st.pending)
		if len(st.pending) > 0 && st.running && len(st.inflight) < n.cfg.TableInFlight &&
			st.lease.valid(now, n.cfg.LeaseTTL/6) {
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

// batchMsg is a successful result waiting for its micro-batch commit.
type batchMsg struct {
	res  Result
	seq  uint64 // its sequence in the results stream
	seen time.Time
}

// runTable coordinates one table while this node holds its lease: plan,
// collect results, commit micro-batches. Once the table is idle it keeps
// the lease for Config.LeaseLinger, so the next burst of versions is
// planned at once, and then releases it.
func (n *Node) runTable(parent context.Context, table string, ls *lease, inherited []string) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	log := n.log.With("table", table)
	var batch []batchMsg
	n.mu.Lock()
	st := n.tables[table]
	st.resultsFrom, st.rereadAt = 0, time.Time{}
	n.mu.Unlock()

	defer func() {
		// Unfinished results stay in the results stream for the next
		// holder; the lease is released and the table forgotten unless it
		// became dirty again.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = n.leases.release(rctx, ls)
		rcancel()
		n.mu.Lock()
		st.running, st.lease, st.pending = false, nil, nil
		clear(st.inflight)
		n.mu.Unlock()
		n.m.leasesHeld.Dec()
		log.Info("coordinator stopped")
		n.kick()
	}()
	log.Info("coordinator started")

	// Renewal: keep the lease or stop coordinating.
	go func() {
		t := time.NewTicker(n.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n.mu.Lock()
			keys := make([]string, 0, len(st.inflight))
			for k := range st.inflight {
				keys = append(keys, k)
			}
			n.mu.Unlock()
			err := n.leases.renew(ctx, ls, keys)
			if errors.Is(err, ErrLeaseLost) || (err != nil && !ls.valid(n.cfg.Now(), 0)) {
				n.m.leaseLost.Inc()
				log.Error("lease lost", "err", err)
				cancel(ErrLeaseLost)
				return
			}
		}
	}()

	first := true
	var idleSince time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			n.m.leaseLost.Inc()
			log.Error("lease expired before renewal")
			return
		}
		n.mu.Lock()
		replan := st.dirty
		st.dirty = false
		recheck := n.cfg.Now().Sub(st.heldCheckedAt) >= holdRecheck
		n.mu.Unlock()
		if replan {
			if recheck {
				if held, _ := n.isHeld(ctx, table); held {
					n.m.plans.WithLabelValues("held").Inc()
					return
				}
				n.mu.Lock()
				st.heldCheckedAt = n.cfg.Now()
				n.mu.Unlock()
			}
			var extra []string
			if first {
				extra = inherited
			}
			n.plan(ctx, table, extra)
			first = false
		}

		batch = n.collect(ctx, table, batch)
		n.mu.Lock()
		dirty := st.dirty
		n.mu.Unlock()
		if dirty {
			continue // plan the new version before committing
		}
		batch = n.maybeCommit(ctx, table, batch)

		now := n.cfg.Now()
		n.mu.Lock()
		busy := len(st.pending) > 0 || len(st.inflight) > 0 || len(batch) > 0
		dirty, rereadAt := st.dirty, st.rereadAt
		n.mu.Unlock()
		if dirty {
			continue
		}
		// Without a notification (one can be lost) a busy table looks for
		// results every resultPoll.
		wait := resultPoll
		if len(batch) > 0 {
			wait = min(wait, max(time.Millisecond, batch[0].seen.Add(n.cfg.CommitMaxWait).Sub(now)))
		}
		if !busy {
			// Results nobody read yet (the previous holder's, or handed
			// back after a failed commit) keep the table busy.
			m, err := n.q.nextResult(ctx, table, 0)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("read results", "err", err)
			case m != nil:
				idleSince = time.Time{}
				n.mu.Lock()
				st.resultsFrom = min(st.resultsFrom, m.Sequence)
				n.mu.Unlock()
				if !now.Before(rereadAt) {
					continue
				}
				wait = rereadAt.Sub(now)
			case idleSince.IsZero():
				idleSince = now
				wait = n.cfg.LeaseLinger
			case now.Sub(idleSince) >= n.cfg.LeaseLinger:
				return
			default:
				wait = n.cfg.LeaseLinger - now.Sub(idleSince)
			}
		} else {
			idleSince = time.Time{}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-st.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// resultPoll is how often a busy coordinator reads its results without
// being woken by a notification.
const resultPoll = 2 * time.Second

// replanLater marks the table dirty again after a backoff that grows with
// its consecutive transient plan failures (a throttled or unreachable store
// must not leave the table unplanned until the next event, which may never
// come once its writer stops). It returns the delay.
func (n *Node) replanLater(table string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.state(table)
	st.planFailures++
	delay := backoff(st.planFailures, n.cfg.RetryBase, n.cfg.RetryMax)
	if st.replanAt != nil {
		st.replanAt.Stop()
	}
	st.replanAt = time.AfterFunc(delay, func() { n.noteVersion(table, 0) })
	return delay
}

// plan asks the planner for the table's tasks and queues the new ones.
func (n *Node) plan(ctx context.Context, table string, extraInFlight []string) {
	n.mu.Lock()
	st := n.tables[table]
	inflight := slices.Clone(extraInFlight)
	for k := range st.inflight {
		inflight = append(inflight, k)
	}
	for _, t := range st.pending {
		inflight = append(inflight, t.Key)
	}
	n.mu.Unlock()
	slices.Sort(inflight)
	inflight = slices.Compact(inflight)

	start := time.Now()
	p, err := n.planner.Plan(ctx, table, inflight)
	log := n.log.With("table", table)
	if err != nil {
		n.m.plans.WithLabelValues("error").Inc()
		switch disposition(err, n.cfg.Classify) {
		case OutcomeCorrupt:
			_ = n.hold(ctx, table, err)
			log.Error("plan table", "err", err)
		case OutcomeRetried:
			delay := n.replanLater(table)
			log.Warn("plan table failed, retrying", "retry_in", delay, "err", err)
		default:
			log.Error("plan table", "err", err)
		}
		return
	}
	n.mu.Lock()
	st.planFailures = 0
	known := map[string]bool{}
	for _, k := range inflight {
		known[k] = true
	}
	added := 0
	for _, t := range p.Tasks {
		if known[t.Key] {
			continue
		}
		known[t.Key] = true
		st.pending = append(st.pending, t)
		added++
	}
	st.batchSize = p.CommitBatchTasks
	if len(p.Tasks) == 0 {
		st.maintained = max(st.maintained, p.ReadVersion)
	}
	st.latest = max(st.latest, p.ReadVersion)
	n.m.lag.WithLabelValues(table).Set(float64(st.latest - min(st.latest, st.maintained)))
	n.mu.Unlock()
	result := "tasks"
	if added == 0 {
		result = "empty"
	}
	n.m.plans.WithLabelValues(result).Inc()
	log.Info("table planned", "version", p.ReadVersion, "tasks", added, "duration", time.Since(start))
	n.kick()
}
