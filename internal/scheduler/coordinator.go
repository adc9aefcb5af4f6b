package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
}

func (n *Node) state(table string) *tableState {
	st := n.tables[table]
	if st == nil {
		st = &tableState{table: table, inflight: map[string]time.Time{}}
		n.tables[table] = st
	}
	return st
}

// noteVersion records an announced version and marks the table dirty.
func (n *Node) noteVersion(table string, version uint64) {
	n.mu.Lock()
	st := n.state(table)
	st.latest = max(st.latest, version)
	st.dirty = true
	n.mu.Unlock()
	n.kick()
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
	if held, _ := n.isHeld(ctx, table); held {
		n.mu.Lock()
		n.tables[table].dirty = false
		n.mu.Unlock()
		n.m.plans.WithLabelValues("held").Inc()
		return
	}
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
// table per turn, within the per-table cap and the global queue depth.
func (n *Node) dispatch(ctx context.Context) {
	for ctx.Err() == nil {
		if n.depth.Load() >= int64(n.cfg.MaxQueueDepth) {
			// Backpressure: refresh the real depth before giving up.
			if d, err := n.q.depth(ctx); err == nil {
				n.depth.Store(int64(d))
				n.m.queueDepth.Set(float64(d))
			}
			if n.depth.Load() >= int64(n.cfg.MaxQueueDepth) {
				return
			}
		}
		t, ok := n.nextTask()
		if !ok {
			return
		}
		dup, err := n.q.publish(ctx, t)
		n.mu.Lock()
		st := n.tables[t.Table]
		if err != nil {
			delete(st.inflight, t.Key)
			st.pending = append([]Task{t}, st.pending...)
			n.mu.Unlock()
			n.log.Warn("enqueue task", "table", t.Table, "task_id", t.Key, "err", err)
			return
		}
		if dup {
			// JetStream already had this key inside its dedup window: the
			// original is queued, running or done, and its result (if any)
			// reaches us through the results stream. Nothing new is in flight.
			delete(st.inflight, t.Key)
		}
		n.mu.Unlock()
		res := "queued"
		if dup {
			res = "duplicate"
		}
		n.m.enqueued.WithLabelValues(t.Kind, res).Inc()
		n.depth.Add(1)
		n.log.Debug("task enqueued", "table", t.Table, "task_id", t.Key, "kind", t.Kind, "duplicate", dup)
	}
}

// nextTask pops the next task in round-robin order and marks it in flight.
func (n *Node) nextTask() (Task, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ring = n.ring[:0]
	var total int
	for t, st := range n.tables {
		total += len(st.pending)
		if len(st.pending) > 0 && st.running && len(st.inflight) < n.cfg.TableInFlight &&
			st.lease.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			n.ring = append(n.ring, t)
		}
	}
	n.m.pending.Set(float64(total))
	if len(n.ring) == 0 {
		return Task{}, false
	}
	slices.Sort(n.ring)
	n.next = (n.next + 1) % len(n.ring)
	st := n.tables[n.ring[n.next]]
	t := st.pending[0]
	st.pending = st.pending[1:]
	st.inflight[t.Key] = n.cfg.Now()
	return t, true
}

// batchMsg is a successful result waiting for its micro-batch commit.
type batchMsg struct {
	res  Result
	msg  jetstream.Msg
	seen time.Time
}

// runTable coordinates one table while this node holds its lease: plan,
// collect results, commit micro-batches, release when idle.
func (n *Node) runTable(parent context.Context, table string, ls *lease, inherited []string) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	log := n.log.With("table", table)
	var batch []batchMsg

	defer func() {
		// Unfinished results go back to the results stream for the next
		// holder; then the lease is released and the table forgotten unless
		// it became dirty again.
		for _, b := range batch {
			_ = b.msg.Nak()
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = n.leases.release(rctx, ls)
		rcancel()
		n.mu.Lock()
		st := n.tables[table]
		st.running, st.lease, st.pending = false, nil, nil
		clear(st.inflight)
		n.mu.Unlock()
		n.m.leasesHeld.Dec()
		log.Info("coordinator stopped")
		n.kick()
	}()

	cons, err := n.q.resultConsumer(ctx, table, max(3*n.cfg.CommitMaxWait, 30*time.Second))
	if err != nil {
		log.Error("open results", "err", err)
		return
	}
	if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
		// Opening the results took most of the lease (a slow cluster):
		// another node may take it over; do not start acting on it.
		n.m.leaseLost.Inc()
		log.Warn("lease expired before the coordinator started")
		return
	}
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
			keys := make([]string, 0, len(n.tables[table].inflight))
			for k := range n.tables[table].inflight {
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
	for ctx.Err() == nil {
		if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
			n.m.leaseLost.Inc()
			log.Error("lease expired before renewal")
			return
		}
		n.mu.Lock()
		st := n.tables[table]
		replan := st.dirty
		st.dirty = false
		n.mu.Unlock()
		if replan {
			if held, _ := n.isHeld(ctx, table); held {
				n.m.plans.WithLabelValues("held").Inc()
				return
			}
			var extra []string
			if first {
				extra = inherited
			}
			n.plan(ctx, table, extra)
			first = false
		}

		batch = n.collect(ctx, cons, table, batch)
		batch = n.maybeCommit(ctx, table, batch)

		n.mu.Lock()
		idle := len(st.pending) == 0 && len(st.inflight) == 0 && len(batch) == 0 && !st.dirty
		n.mu.Unlock()
		if idle {
			// Results the previous holder never collected are ours to commit.
			if info, err := cons.Info(ctx); err == nil && info.NumPending+uint64(info.NumAckPending) > 0 {
				continue
			}
			return
		}
	}
}

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
	st.replanAt = time.AfterFunc(delay, func() {
		n.mu.Lock()
		n.state(table).dirty = true
		n.mu.Unlock()
		n.kick()
	})
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
