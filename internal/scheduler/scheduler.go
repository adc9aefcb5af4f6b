package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/internal/format"
)

// Plan is what a Planner returns for one table.
type Plan struct {
	// ReadVersion is the version the plan was made against.
	ReadVersion uint64
	// Tasks to run; empty when the table needs nothing.
	Tasks []Task
	// CommitBatchTasks overrides Config.CommitBatchTasks for this table
	// (policy commit_batch_tasks); 0 keeps the default.
	CommitBatchTasks int
}

// Planner turns a table into tasks. inFlight lists the keys of tasks of the
// table still queued or running, which the plan must not duplicate.
type Planner interface {
	Plan(ctx context.Context, table string, inFlight []string) (Plan, error)
}

// CommitReport is what one micro-batch commit did.
type CommitReport struct {
	// Version is the table version the commit produced (or the latest
	// version when nothing had to be committed).
	Version uint64
	// Rebased counts lost races that were rebased and retried.
	Rebased int
	// FilesRemoved counts files deleted by the commit (outputs of results
	// that could not be committed, superseded files).
	FilesRemoved int
	// Replan asks for the table to be planned again: some results were
	// dropped (a concurrent commit made them stale) and their work is
	// still to do.
	Replan bool
	// Dropped are the keys of the batch's results that were neither
	// committed nor kept (given up, dropped over a conflict, outputs
	// gone). Planned again with the same key inside the task stream's
	// duplicate window, such a task is queued again, not deduplicated
	// against the copy that ended.
	Dropped []string
	// Followups are new tasks of the table the commit asks for (the index
	// remaps of a rewrite batch, the join of a sliced task), queued like planned ones; Kept are
	// results of the batch that were not committed and wait for them
	// (their After names the followups' keys). The coordinator publishes
	// each kept result again (its payload may have changed) before it
	// removes the batch's messages, so a coordinator that dies in between
	// leaves them to the next holder.
	Followups []Task
	Kept      []Result
}

// Committer commits a batch of successful results of one table as one
// table version. On ErrStale it must have removed the batch's outputs.
type Committer interface {
	Commit(ctx context.Context, table string, results []Result) (CommitReport, error)
}

// Node is one scheduler participant: workers, coordinators and the queue.
type Node struct {
	cfg      Config
	nc       *nats.Conn
	q        *queue
	log      *slog.Logger
	lines    *lineLog // n.log's "table planned" lines, written by Run's writer
	m        *metrics
	planner  Planner
	exec     Executor
	commit   Committer
	leases   *leaser
	view     leaseView
	holdView holdView
	results  resultIndex

	// held has the lease of each range in ranges once taken (nil while
	// being taken or after it was given up), readable without mu.
	held [leaseRanges]atomic.Pointer[lease]

	mu     sync.Mutex
	tables map[string]*tableState
	byID   map[string]*tableState // TableID → state
	ranges map[int]*rangeState    // lease ranges held (or being taken) here
	ring   []string               // round-robin order of tables with pending tasks
	// withPending holds the tables with pending tasks (and some whose
	// pending tasks were taken since: nextTasks drops those).
	withPending map[string]struct{}
	next        int
	wake        chan struct{}
	planQ       *readyQueue // dirty tables whose coordinator runs here
	leaseQ      *readyQueue // dirty tables without a coordinator here
	// coords is Run's group of coordinator goroutines once it started
	// them (nil before): noteVersions starts coordinators in it.
	coords *sync.WaitGroup
	ready  atomic.Bool
	depth  atomic.Int64

	running running
	// legacyWarned holds the ids of nodes seen holding per-table leases
	// (an earlier version), each reported once.
	legacyWarned sync.Map

	// trace, when set (by tests and benchmarks in this package), is told
	// when a table passes a stage on its way from announcement to plan:
	// "recv" (a batch of announcements naming it arrived), "poke" (the
	// announcement is noted), "lease" (attempt starts), "leased" (its
	// coordinator starts), "plan" (planner called), and "stopped" when
	// its coordinator stopped; and, with a range key for table,
	// "acquire" before a lease write, "range+" once a range lease was
	// taken and "range-" before one is released or handed off.
	trace func(node, table, stage string)
}

func (n *Node) traced(table, stage string) {
	if n.trace != nil {
		n.trace(n.cfg.NodeID, table, stage)
	}
}

// New sets up the streams, buckets and consumer on nc's JetStream and
// returns a node ready to Run. Planner and Committer may be nil on a
// worker-only node; Executor may be nil on a coordinator-only node
// (Workers is then forced to 0).
func New(ctx context.Context, nc *nats.Conn, cfg Config, p Planner, e Executor, c Committer) (*Node, error) {
	cfg.setDefaults()
	if cfg.NodeID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.NodeID = "node-" + hex.EncodeToString(b[:])
	}
	if e == nil {
		cfg.Workers = 0
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open jetstream: %w", err)
	}
	q, err := setupQueue(ctx, js, &cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, nc: nc, q: q, planner: p, exec: e, commit: c,
		log:         cfg.Logger.With("node", cfg.NodeID),
		m:           newMetrics(cfg.Registerer, cfg.Holds != nil),
		tables:      map[string]*tableState{},
		byID:        map[string]*tableState{},
		ranges:      map[int]*rangeState{},
		withPending: map[string]struct{}{},
		view:        leaseView{recs: map[string]leaseRecord{}, freed: map[string]uint64{}},
		holdView:    holdView{held: map[string]bool{}},
		wake:        make(chan struct{}, 1),
		planQ:       newReadyQueue(nil),
	}
	n.lines = newLineLog(n.log)
	n.leaseQ = newReadyQueue(leaseRank(cfg.NodeID, func(table string) int {
		return n.view.rangeRank(rangeOf(table), cfg.NodeID, cfg.Now())
	}))
	n.leases = &leaser{kv: q.leases, node: cfg.NodeID, ttl: cfg.LeaseTTL, now: cfg.Now}
	n.view.node, n.view.handedTo = cfg.NodeID, n.handedTo
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newProgressCollector(&n.running)); err != nil {
			return nil, fmt.Errorf("register task progress metrics: %w", err)
		}
	}
	return n, nil
}

// ID is the node's id as used in leases and results.
func (n *Node) ID() string { return n.cfg.NodeID }

// Ready reports whether Run has subscribed and is taking work.
func (n *Node) Ready() bool { return n.ready.Load() }

type poke struct {
	Table   string `json:"table"`
	Version uint64 `json:"version"`
}

// Submit asks the cluster to evaluate a table at (at least) version. It is
// the watch sink: every node hears it, the lease decides who plans. A lost
// poke is caught by the next poll sweep.
func (n *Node) Submit(_ context.Context, table string, version uint64) error {
	b, _ := json.Marshal(poke{Table: table, Version: version})
	if err := n.nc.Publish(pokeSubjectPrefix+TableID(table), b); err != nil {
		return fmt.Errorf("submit %s: %w", table, err)
	}
	return nil
}

// pokeBatch bounds the announcements of one lanced.pokes message (a few
// hundred bytes each, well under the server's default 1 MiB payload).
const pokeBatch = 512

// SubmitBatch is Submit for many tables at once (the coalescer's batch
// sink): a table whose range this node holds is noted here without a
// message (only the holder plans it); the others go out in
// lanced.pokes messages of up to pokeBatch announcements, which every
// node hears. Nodes of earlier versions do not subscribe to
// lanced.pokes: while the lease view shows a live node that does not say
// it hears them (node record BatchPokes), every table is announced on its
// own subject, as Submit does.
func (n *Node) SubmitBatch(ctx context.Context, refs []format.VersionRef) error {
	var out []poke
	now := n.cfg.Now()
	if !n.view.batchPokes(now) {
		for _, r := range refs {
			if err := n.Submit(ctx, r.Table, r.Version); err != nil {
				return err
			}
		}
		return nil
	}
	var local []poke
	for _, r := range refs {
		p := poke{Table: r.Table, Version: r.Version}
		if ls := n.held[rangeOf(r.Table)].Load(); ls != nil && ls.valid(now, n.cfg.LeaseTTL/6) {
			local = append(local, p)
		} else {
			out = append(out, p)
		}
	}
	// The other nodes' announcements go out first: noting the local ones
	// may wait for the node's lock.
	for len(out) > 0 {
		chunk := out[:min(len(out), pokeBatch)]
		out = out[len(chunk):]
		b, _ := json.Marshal(chunk)
		if err := n.nc.Publish(pokeBatchSubject, b); err != nil {
			return fmt.Errorf("submit %d tables: %w", len(chunk), err)
		}
	}
	n.noteVersions(local)
	return nil
}

func (n *Node) kick() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run serves until ctx is cancelled, then drains: workers stop pulling,
// tasks in flight get DrainTimeout to finish and are then cancelled and
// handed back (Nak), coordinators hand their unfinished result batches back
// and release their leases. Run returns nil after a clean drain.
func (n *Node) Run(ctx context.Context) error {
	pokes, err := n.nc.Subscribe(pokeSubjectPrefix+"*", func(msg *nats.Msg) {
		var p poke
		if json.Unmarshal(msg.Data, &p) != nil || p.Table == "" {
			return
		}
		n.noteVersion(p.Table, p.Version)
	})
	if err != nil {
		return fmt.Errorf("subscribe pokes: %w", err)
	}
	defer func() { _ = pokes.Unsubscribe() }()
	batches, err := n.nc.Subscribe(pokeBatchSubject, func(msg *nats.Msg) {
		var ps []poke
		if json.Unmarshal(msg.Data, &ps) != nil {
			return
		}
		ps = slices.DeleteFunc(ps, func(p poke) bool { return p.Table == "" })
		for _, p := range ps {
			n.traced(p.Table, "recv")
		}
		n.noteVersions(ps)
	})
	if err != nil {
		return fmt.Errorf("subscribe pokes: %w", err)
	}
	defer func() { _ = batches.Unsubscribe() }()
	// Results are published on lanced.result.<table id>: the table's
	// coordinator, if it runs here, reads them at once.
	results, err := n.nc.Subscribe(resultSubjectPrefix+"*", func(msg *nats.Msg) {
		n.noteResult(strings.TrimPrefix(msg.Subject, resultSubjectPrefix))
	})
	if err != nil {
		return fmt.Errorf("subscribe results: %w", err)
	}
	defer func() { _ = results.Unsubscribe() }()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if err := n.view.watch(watchCtx, n.q.leases); err != nil {
		return err
	}
	if err := n.holdView.watch(watchCtx, n.q.holds); err != nil {
		return err
	}
	dead, err := n.subscribeDeadLetters()
	if err != nil {
		return fmt.Errorf("subscribe advisories: %w", err)
	}
	defer func() { _ = dead.Unsubscribe() }()
	if err := n.nc.Flush(); err != nil {
		return fmt.Errorf("flush subscriptions: %w", err)
	}

	linesStop := make(chan struct{})
	var linesWriter sync.WaitGroup
	linesWriter.Go(func() { n.lines.run(linesStop) })
	stopLines := sync.OnceFunc(func() { close(linesStop); linesWriter.Wait() })
	defer stopLines()

	stop := make(chan struct{})
	taskBase, cancelTasks := context.WithCancelCause(context.Background())
	defer cancelTasks(nil)
	var workers sync.WaitGroup
	for range n.cfg.Workers {
		workers.Go(func() { n.runWorker(stop, taskBase) })
	}

	coordCtx, cancelCoord := context.WithCancelCause(context.Background())
	var coords sync.WaitGroup
	coords.Go(func() { n.coordinate(coordCtx) })
	if n.planner != nil {
		n.mu.Lock()
		n.coords = &coords
		n.mu.Unlock()
		for range n.cfg.Planners {
			coords.Go(func() { n.runPlanner(coordCtx) })
		}
		for range leaseAttempts {
			coords.Go(func() { n.runLeaser(coordCtx, &coords) })
		}
		coords.Go(func() { n.renewLeases(coordCtx) })
		coords.Go(func() { n.rebalance(coordCtx, &coords) })
	}
	n.ready.Store(true)
	n.log.Info("scheduler started", "workers", n.cfg.Workers)

	<-ctx.Done()
	n.ready.Store(false)
	n.log.Info("scheduler draining", "drain_timeout", n.cfg.DrainTimeout)
	close(stop)
	cancelCoord(errShutdown)

	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(n.cfg.DrainTimeout):
		n.log.Warn("drain deadline passed, handing tasks back")
		cancelTasks(errShutdown)
		<-done
	}
	coords.Wait()
	stopLines()
	if n.planner != nil {
		n.releaseKeptRanges()
		n.deleteNodeRecord()
	}
	n.log.Info("scheduler stopped")
	return nil
}

// coordinate is the node's coordinator loop: it takes leases for tables
// that need evaluation, feeds planned tasks into the queue fairly and keeps
// the gauges fresh.
func (n *Node) coordinate(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var lastRefresh, lastPoll time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// A kick (a plan, a stopped coordinator) only dispatches:
			// looking at every table for one to queue is the tick's job.
			n.startCoordinators()
		case <-n.wake:
		}
		if n.planner != nil && time.Since(lastPoll) >= resultPoll {
			lastPoll = time.Now()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			n.pollResults(pctx)
			cancel()
		}
		if time.Since(lastRefresh) > min(5*time.Second, n.cfg.LeaseTTL) {
			lastRefresh = time.Now()
			n.refreshGauges(ctx)
		}
		n.dispatch(ctx)
	}
}

func (n *Node) refreshGauges(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if d, err := n.q.depth(rctx); err == nil {
		n.depth.Store(int64(d))
		n.m.queueDepth.Set(float64(d))
	}
	if err := n.refreshHolds(rctx); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Debug("refresh holds", "err", err)
	}
	n.sweepOrphans(rctx)
}
