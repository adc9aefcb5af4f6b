package scheduler

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/lanced-dev/lanced/internal/minheap"
)

// readyQueue is a queue of table names served by a pool of goroutines.
// Tables are pushed when they become due (an announcement, a backoff that
// ran out) and served in that order: first in, first out, or, with rank
// set, in rank order among the tables that became due within the same
// rankWindow (earlier windows first). A slow table occupies one goroutine
// of the pool, not the queue.
type readyQueue struct {
	rank   func(table string) uint64
	mu     sync.Mutex
	items  minheap.Heap[readyItem]
	seq    uint64
	signal chan struct{}
}

// rankWindow groups tables that became due together for rank order.
const rankWindow = time.Second

type readyItem struct {
	window int64
	key    uint64 // rank, or push order
	table  string
}

func readyBefore(a, b readyItem) bool {
	if a.window != b.window {
		return a.window < b.window
	}
	return a.key < b.key
}

func newReadyQueue(rank func(string) uint64) *readyQueue {
	return &readyQueue{rank: rank, items: minheap.New(readyBefore), signal: make(chan struct{}, 1)}
}

// push queues the tables in order under one hold of the queue's lock.
func (q *readyQueue) push(tables ...string) {
	if len(tables) == 0 {
		return
	}
	q.mu.Lock()
	for _, table := range tables {
		q.seq++
		it := readyItem{key: q.seq, table: table}
		if q.rank != nil {
			it.window, it.key = time.Now().UnixNano()/int64(rankWindow), q.rank(table)
		}
		q.items.Push(it)
	}
	q.mu.Unlock()
	wake(q.signal)
}

// pop waits for the next table; false once ctx ended.
func (q *readyQueue) pop(ctx context.Context) (string, bool) {
	for {
		q.mu.Lock()
		if q.items.Len() > 0 {
			t := q.items.Pop().table
			more := q.items.Len() > 0
			q.mu.Unlock()
			if more {
				wake(q.signal) // the next free goroutine takes the next table
			}
			return t, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-q.signal:
		}
	}
}

// leaseRank orders one node's lease attempts: first the tables of ranges
// whose turn (leaseView.rangeRank) is this node's, then those it waits a
// turn for, and so on, so a node takes its own turns' ranges before the
// other nodes' turns run out even when it is slow to work through a burst;
// within a turn, every node ranks the tables by a hash of its own id and
// the table, so the nodes, which all hear the same announcements in the
// same order, start on different tables.
func leaseRank(node string, turn func(table string) int) func(string) uint64 {
	return func(table string) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(node))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(table))
		return uint64(min(turn(table), 15))<<60 | h.Sum64()>>4
	}
}

// legacyHeld reports whether a node of an earlier lanced version (one
// that leases single tables, not ranges) holds the table's lease; such a
// table is left to it. The first time a node is seen doing so, an error
// says that the fleet runs mixed versions.
func (n *Node) legacyHeld(table string) bool {
	holder, ok := n.view.legacyHolder(table, n.cfg.NodeID, n.cfg.Now())
	if ok {
		if _, seen := n.legacyWarned.LoadOrStore(holder, true); !seen {
			n.log.Error("a node of an earlier lanced version leases single tables; its tables are left to it, but it does not see range leases and may coordinate a table of a range this node holds: upgrade every node",
				"other_node", holder, "table", table)
		}
	}
	return ok
}

// errTableHeld stops a coordinator whose table was found held.
var errTableHeld = errors.New("table held")

// runPlanner serves the plan queue until ctx ends. Planning runs apart
// from the table's coordinator, so a new version is planned while the
// coordinator waits on a result read or a commit.
func (n *Node) runPlanner(ctx context.Context) {
	for {
		table, ok := n.planQ.pop(ctx)
		if !ok {
			return
		}
		n.planTable(table)
	}
}

// planTable plans a dirty table whose coordinator runs here, once its
// hold was checked within holdRecheck. A version announced during the
// plan queues the table again.
func (n *Node) planTable(table string) {
	n.mu.Lock()
	st := n.tables[table]
	st.planQueued = false
	if !st.running || st.stopping || !st.dirty {
		n.mu.Unlock()
		return
	}
	ctx, stop, ls := st.ctx, st.stop, st.lease
	st.dirty, st.planning, st.planDone = false, true, make(chan struct{})
	extra := st.inherited
	st.inherited = nil
	recheck := n.cfg.Now().Sub(st.heldCheckedAt) >= holdRecheck
	n.mu.Unlock()
	// The coordinator is woken when no plan was made (it may have to
	// stop); after a plan it need not be: what the plan queued keeps it
	// busy when it next looks (its timer, a result), and waking every
	// coordinator of a burst at once queues them all for the node's lock
	// while the other tables of the burst are being planned.
	planned := false
	defer func() {
		n.mu.Lock()
		st.planning = false
		close(st.planDone)
		st.planDone = nil
		n.scheduleLocked(st)
		n.mu.Unlock()
		if !planned {
			wake(st.wake)
		}
	}()
	if !ls.valid(n.cfg.Now(), n.cfg.LeaseTTL/6) {
		// The coordinator stops on its next turn (woken below) and no
		// plan starts meanwhile; the table stays dirty, so the next
		// lease attempt (here or on the node that takes the range)
		// plans it.
		n.mu.Lock()
		st.dirty, st.stopping = true, true
		n.mu.Unlock()
		return
	}
	if n.legacyHeld(table) {
		return // left to the older node that leased the table itself
	}
	if recheck {
		if held, _ := n.isHeld(ctx, table); held {
			n.m.plans.WithLabelValues("held").Inc()
			stop(errTableHeld)
			return
		}
		n.mu.Lock()
		st.heldCheckedAt = n.cfg.Now()
		n.mu.Unlock()
	}
	n.plan(ctx, table, extra)
	planned = true
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
	for k := range st.kept {
		inflight = append(inflight, k)
	}
	inflight = append(inflight, st.collected...)
	n.mu.Unlock()
	slices.Sort(inflight)
	inflight = slices.Compact(inflight)

	n.traced(table, "plan")
	start := time.Now()
	p, err := n.planner.Plan(ctx, table, inflight)
	log := n.log
	if err != nil {
		log = log.With("table", table)
		n.m.plans.WithLabelValues("error").Inc()
		switch disposition(err, n.cfg.Classify) {
		case OutcomeCorrupt:
			_ = n.hold(ctx, table, err)
			log.Error("plan table", "err", err)
		case OutcomeRetried, OutcomeStale:
			// A stale plan read something a concurrent commit or
			// cleanup replaced: planned again like a transient failure,
			// since no new version may follow to plan it.
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
	for k, v := range st.abandoned {
		if v < p.ReadVersion {
			delete(st.abandoned, k) // the table changed: its keys are new
		}
	}
	added, abandoned := 0, 0
	for _, t := range p.Tasks {
		if _, ok := st.abandoned[t.Key]; ok {
			abandoned++ // not queued again at this read version
			continue
		}
		if known[t.Key] {
			continue
		}
		known[t.Key] = true
		n.addPendingLocked(st, t)
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
	n.lines.info("table planned", "table", table, "version", p.ReadVersion, "tasks", added, "abandoned", abandoned, "duration", time.Since(start))
	n.kick()
}
