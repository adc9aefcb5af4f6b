package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

// coordTracker follows, from the nodes' trace hooks, which node runs each
// table's coordinator and holds each range's lease, and counts every time
// a node starts one while another node still has it.
type coordTracker struct {
	mu         sync.Mutex
	table      map[string]string // table → node running its coordinator
	rng        map[string]string // range key → node holding it
	violations []string
}

func (c *coordTracker) hook(node, table, stage string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch stage {
	case "leased":
		c.take(c.table, table, node, "coordinator started")
	case "stopped":
		c.drop(c.table, table, node)
	case "range+":
		c.take(c.rng, table, node, "lease taken")
	case "range-":
		c.drop(c.rng, table, node)
	}
}

// take records that node took key in m, and a violation if another node
// had it. c.mu is held.
func (c *coordTracker) take(m map[string]string, key, node, what string) {
	if o, ok := m[key]; ok && o != node {
		c.violations = append(c.violations, fmt.Sprintf("%s: %s on %s while %s had it", key, what, node, o))
	}
	m[key] = node
}

func (c *coordTracker) drop(m map[string]string, key, node string) {
	if m[key] == node {
		delete(m, key)
	}
}

func (c *coordTracker) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// roundPlanner plans one task per table and announcement round (the key
// names the round), unless that task is in flight.
type roundPlanner struct{ round atomic.Int64 }

func (p *roundPlanner) Plan(_ context.Context, table string, inFlight []string) (Plan, error) {
	r := p.round.Load()
	key := fmt.Sprintf("%s@%d", table, r)
	if slices.Contains(inFlight, key) {
		return Plan{ReadVersion: uint64(r)}, nil
	}
	return Plan{ReadVersion: uint64(r), Tasks: []Task{{Kind: "rewrite", Key: key, Table: table, ReadVersion: uint64(r), Payload: []byte(key)}}}, nil
}

// rangesHeld counts the range leases a node holds.
func rangesHeld(n *Node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	held := 0
	for _, rs := range n.ranges {
		if rs.lease != nil && !rs.busy {
			held++
		}
	}
	return held
}

// rangeNode is one node of TestRangesMoveToANodeThatJoins.
type rangeNode struct {
	n      *Node
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

// startRangeNode starts a node with range-lease settings for the test on
// server s, traced by tracker, and waits until it is ready.
func startRangeNode(t *testing.T, id string, s *server.Server, p Planner, out string, c Committer, tracker *coordTracker, home bool) rangeNode {
	nc := natstest.Connect(t, s)
	cfg := fastConfig(t, id)
	cfg.Replicas = 3
	cfg.LeaseTTL = 6 * time.Second
	cfg.LeaseLinger = 5 * time.Minute // ranges stay held while their tables idle
	cfg.KeepHomeRanges = home
	cfg.AckWait = 5 * time.Second
	n, err := New(context.Background(), nc, cfg, p, newFileExecutor(out, id), c)
	if err != nil {
		t.Fatal(err)
	}
	n.trace = tracker.hook
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("node %s did not stop", id)
		}
	})
	waitFor(t, 30*time.Second, id+" ready", n.Ready)
	return rangeNode{n, nc, cancel, done}
}

// twoTablesPerRange names two tables in every lease range.
func twoTablesPerRange() []string {
	perRange := map[int]int{}
	var tables []string
	for i := 0; len(tables) < 2*leaseRanges; i++ {
		tb := fmt.Sprintf("s3://lake/t%05d.lance", i)
		if r := rangeOf(tb); perRange[r] < 2 {
			perRange[r]++
			tables = append(tables, tb)
		}
	}
	return tables
}

// announceRounds is the writer: every table announced again every 2 s (a
// new round, a new task per table) through node, as a shared
// notification queue would. The returned stop ends it and waits for it.
func announceRounds(node *Node, planner *roundPlanner, tables []string) (stop func()) {
	quit := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			r := planner.round.Add(1)
			for _, tb := range tables {
				_ = node.Submit(context.Background(), tb, uint64(r))
			}
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Second):
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(quit); writer.Wait() }) }
}

// resultsCommitted commits through a logCommitter as the engine's
// committer does: a result committed before (the same copy of its task:
// key and task message sequence) is not committed again (the engine finds
// its own transaction, alreadyCommitted). The scheduler removes a result
// only after its commit, so a node that commits a result and loses its
// connection before removing it leaves it to the range's next holder,
// which delivers it to the committer again. Each such delivery is recorded
// with the node that committed the result first.
type resultsCommitted struct {
	log *logCommitter
	mu  sync.Mutex
	by  map[string]string // key#task sequence → node that committed it
	// again lists "key#seq: committed by X, delivered again to Y"
	again []string
	// againFrom counts, per node, the results it committed that were
	// delivered again
	againFrom map[string]int
}

func newResultsCommitted(log *logCommitter) *resultsCommitted {
	return &resultsCommitted{log: log, by: map[string]string{}, againFrom: map[string]int{}}
}

// node returns node's Committer.
func (c *resultsCommitted) node(node string) Committer { return nodeCommitter{c, node} }

type nodeCommitter struct {
	c    *resultsCommitted
	node string
}

func (nc nodeCommitter) Commit(ctx context.Context, table string, results []Result) (CommitReport, error) {
	c := nc.c
	var fresh []Result
	c.mu.Lock()
	for _, r := range results {
		id := fmt.Sprintf("%s#%d", r.Task.Key, r.taskSeq)
		if first, ok := c.by[id]; ok {
			c.again = append(c.again, fmt.Sprintf("%s: committed by %s, delivered again to %s", id, first, nc.node))
			c.againFrom[first]++
			continue
		}
		c.by[id] = nc.node
		fresh = append(fresh, r)
	}
	c.mu.Unlock()
	if len(fresh) == 0 {
		return CommitReport{}, nil
	}
	rep, err := c.log.Commit(ctx, table, fresh)
	if err != nil {
		c.mu.Lock()
		for _, r := range fresh {
			delete(c.by, fmt.Sprintf("%s#%d", r.Task.Key, r.taskSeq))
		}
		c.mu.Unlock()
	}
	return rep, err
}

// checkEveryRoundCommittedOnce waits until every table's last round was
// committed and checks that no task was committed twice, no two commits
// of one table overlapped, and no table or range was coordinated by two
// nodes at once.
func checkEveryRoundCommittedOnce(t *testing.T, tables []string, last int64, committer *logCommitter, tracker *coordTracker) {
	waitFor(t, 90*time.Second, "every table's last round committed", func() bool {
		for _, tb := range tables {
			if !slices.Contains(committer.committed(tb), fmt.Sprintf("%s@%d", tb, last)) {
				return false
			}
		}
		return true
	})
	for _, tb := range tables {
		keys := committer.committed(tb)
		if len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Errorf("%s: a task committed twice: %v", tb, keys)
		}
	}
	committer.mu.Lock()
	overlap := committer.overlap
	committer.mu.Unlock()
	if overlap {
		t.Error("two commits of one table ran at once")
	}
	for _, v := range tracker.failures() {
		t.Error(v)
	}
}

// On a three-server JetStream cluster (R3), two nodes coordinate every
// range while tables keep being announced; a third node joins and gets a
// fair share of the ranges, handed over by their holders while the tables
// are busy, within bounded time and with bounded hand-offs; no table or
// range is coordinated by two nodes at once, no task is committed twice or
// lost. Then the third node dies without releasing anything, and the other
// two take its ranges over once its leases expired. The same with home
// ranges (Config.KeepHomeRanges, as the daemon runs).
func TestRangesMoveToANodeThatJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster")
	}
	t.Run("on demand", func(t *testing.T) { testRangesMoveToANodeThatJoins(t, false) })
	t.Run("home ranges", func(t *testing.T) { testRangesMoveToANodeThatJoins(t, true) })
}

func testRangesMoveToANodeThatJoins(t *testing.T, home bool) {
	servers := runCluster(t, 3)
	out, logs := t.TempDir(), t.TempDir()
	planner := &roundPlanner{}
	committer := newLogCommitter(logs)
	results := newResultsCommitted(committer)
	tracker := &coordTracker{table: map[string]string{}, rng: map[string]string{}}
	tables := twoTablesPerRange()
	start := func(id string, s int) rangeNode {
		return startRangeNode(t, id, servers[s], planner, out, results.node(id), tracker, home)
	}

	a, b := start("a", 0), start("b", 1)
	stopWriter := announceRounds(a.n, planner, tables)
	defer stopWriter()
	// Whichever node hears of a free range first takes it; the ranges are
	// then spread over a and b (32/32).
	waitFor(t, 2*time.Minute, "a and b hold every range, 32 each", func() bool {
		return rangesHeld(a.n) == leaseRanges/2 && rangesHeld(b.n) == leaseRanges/2
	})
	handOffs := func(nodes ...rangeNode) float64 {
		var sum float64
		for _, n := range nodes {
			sum += metricValue(t, n.n.m.handOffs)
		}
		return sum
	}
	before := handOffs(a, b)
	t.Logf("before the join: a holds %d ranges, b %d, after %.0f hand-offs", rangesHeld(a.n), rangesHeld(b.n), before)

	joined := time.Now()
	c := start("c", 2)
	// Fair share: 64 ranges over three nodes, none more than one range
	// above another (22/21/21).
	waitFor(t, 2*time.Minute, "c gets a fair share of the ranges", func() bool {
		la, lb, lc := rangesHeld(a.n), rangesHeld(b.n), rangesHeld(c.n)
		return la+lb+lc == leaseRanges && max(la, lb, lc)-min(la, lb, lc) <= 1
	})
	took := time.Since(joined)
	moved := handOffs(a, b, c) - before
	t.Logf("after the join: a %d, b %d, c %d ranges, %s after c started, %.0f hand-offs",
		rangesHeld(a.n), rangesHeld(b.n), rangesHeld(c.n), took.Round(time.Millisecond), moved)
	if moved > 24 {
		t.Errorf("%.0f hand-offs to move 21 ranges to c; want at most 24", moved)
	}
	if lost := metricValue(t, a.n.m.leaseLost) + metricValue(t, b.n.m.leaseLost) + metricValue(t, c.n.m.leaseLost); lost > 0 {
		t.Errorf("%.0f leases lost", lost)
	}
	// Balanced ranges stay put while the writer goes on.
	time.Sleep(3 * time.Second)
	if again := handOffs(a, b, c) - before; again != moved {
		t.Errorf("%.0f more hand-offs once the ranges were balanced", again-moved)
	}

	// c dies: its connection closes, nothing is released. a and b take
	// its ranges once their leases expired.
	c.nc.Close()
	c.cancel()
	<-c.done
	died := time.Now()
	waitFor(t, 90*time.Second, "a and b hold every range again", func() bool {
		return rangesHeld(a.n)+rangesHeld(b.n) == leaseRanges
	})
	t.Logf("after c died: a %d, b %d ranges, %s later", rangesHeld(a.n), rangesHeld(b.n), time.Since(died).Round(time.Millisecond))
	waitFor(t, time.Minute, "a and b hold 32 ranges each again", func() bool {
		return rangesHeld(a.n) == leaseRanges/2 && rangesHeld(b.n) == leaseRanges/2
	})

	stopWriter()
	checkEveryRoundCommittedOnce(t, tables, planner.round.Load(), committer, tracker)
	// Only c, whose connection closed under it, may have left a committed
	// result in the stream (committed, not removed) to be delivered again.
	results.mu.Lock()
	defer results.mu.Unlock()
	if len(results.again) > 0 {
		t.Logf("results delivered again after their commit: %v", results.again)
	}
	for node, k := range results.againFrom {
		if node != "c" {
			t.Errorf("%d results committed by %s delivered again: %v", k, node, results.again)
		}
	}
}

// Free ranges are taken in turns: with three live nodes, every range is
// first one node's, the ranges are split 22/21/21, a node whose record
// expired gets no turn, a range handed to a node is its at once, and a
// node without a record (an earlier version) does not wait.
func TestRangeTurnsSpreadRangesEvenly(t *testing.T) {
	now := time.Now()
	v := leaseView{recs: map[string]leaseRecord{}, freed: map[string]uint64{}}
	live := func(id string, until time.Time) {
		v.recs[nodeKey(id)] = leaseRecord{Holder: id, Expires: until.UnixNano()}
	}
	live("a", now.Add(time.Minute))
	live("b", now.Add(time.Minute))
	live("c", now.Add(time.Minute))
	live("dead", now.Add(-time.Second))
	first := map[string]int{}
	for r := range leaseRanges {
		var ranks []int
		for _, id := range []string{"a", "b", "c"} {
			rank := v.rangeRank(r, id, now)
			ranks = append(ranks, rank)
			if rank == 0 {
				first[id]++
			}
		}
		slices.Sort(ranks)
		if !slices.Equal(ranks, []int{0, 1, 2}) {
			t.Fatalf("range %d: turns %v, want 0, 1 and 2", r, ranks)
		}
	}
	if first["a"]+first["b"]+first["c"] != leaseRanges || min(first["a"], first["b"], first["c"]) < leaseRanges/3 ||
		max(first["a"], first["b"], first["c"]) > leaseRanges/3+1 {
		t.Errorf("first turns %v, want 21 or 22 each", first)
	}
	if rank := v.rangeRank(5, "dead", now); rank != 0 {
		t.Errorf("node without a live record waits %d turns", rank)
	}
	// Range 7 handed to the node whose turn there is last.
	last := ""
	for _, id := range []string{"a", "b", "c"} {
		if v.rangeRank(7, id, now) == 2 {
			last = id
		}
	}
	v.recs[rangeKey(7)] = leaseRecord{Range: 7, HandOffTo: last, HandOffUntil: now.Add(time.Minute).UnixNano()}
	if rank := v.rangeRank(7, last, now); rank != 0 {
		t.Errorf("range handed to %s: it waits %d turns", last, rank)
	}
}

// inflightPlanner plans a fast and a slow task for every table, each
// unless it is in flight, and records the in-flight keys of every plan
// per node.
type inflightPlanner struct {
	mu   sync.Mutex
	seen map[string][][]string // node → inFlight of each plan, in order
}

type inflightPlannerOf struct {
	p    *inflightPlanner
	node string
}

func (p inflightPlannerOf) Plan(_ context.Context, table string, inFlight []string) (Plan, error) {
	p.p.mu.Lock()
	p.p.seen[p.node] = append(p.p.seen[p.node], slices.Clone(inFlight))
	p.p.mu.Unlock()
	var tasks []Task
	for _, k := range []string{table + "/fast", table + "/slow"} {
		if !slices.Contains(inFlight, k) {
			tasks = append(tasks, Task{Kind: "rewrite", Key: k, Table: table, ReadVersion: 1, Payload: []byte(k)})
		}
	}
	return Plan{ReadVersion: 1, Tasks: tasks}, nil
}

func (p *inflightPlanner) plans(node string) [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen[node])
}

// A range handed off while its coordinator holds a result it read and
// has not committed (waiting for the table's other task) names that
// result's task among the tasks in flight: the receiver's first plan
// plans around it, and each task is committed once, by the receiver.
func TestHandOffCarriesCollectedResults(t *testing.T) {
	s := runServer(t)
	out := t.TempDir()
	planner := &inflightPlanner{seen: map[string][][]string{}}
	committer := &countingCommitter{}
	release := make(chan struct{})
	start := func(id string) *Node {
		cfg := fastConfig(t, id)
		cfg.LeaseTTL = 3 * time.Second
		cfg.CommitMaxWait = time.Minute // the fast result waits for the slow one
		ex := newFileExecutor(out, id)
		ex.fail = func(tk Task) error {
			if strings.HasSuffix(tk.Key, "/slow") {
				<-release
			}
			return nil
		}
		n, _, _ := startNode(t, connect(t, s), cfg, inflightPlannerOf{planner, id}, ex, committer)
		return n
	}
	const tb = "file:///tables/handed.lance"
	a := start("a")
	if err := a.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a holding the fast task's result", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		st := a.tables[tb]
		return st != nil && slices.Contains(st.collected, tb+"/fast")
	})
	start("b")
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the nodes stop
	waitFor(t, 10*time.Second, "a sees b", func() bool { return a.view.live("b", time.Now()) })

	a.handOff(context.Background(), rangeOf(tb), "b")
	waitFor(t, 10*time.Second, "b plans the handed table", func() bool { return len(planner.plans("b")) > 0 })
	if first := planner.plans("b")[0]; !slices.Contains(first, tb+"/fast") || !slices.Contains(first, tb+"/slow") {
		t.Errorf("b's first plan had in flight %v, want both tasks", first)
	}
	once.Do(func() { close(release) })
	waitFor(t, 20*time.Second, "both tasks committed", func() bool { return committer.n.Load() >= 2 })
	time.Sleep(time.Second)
	if n := committer.n.Load(); n != 2 {
		t.Errorf("%d results committed, want 2", n)
	}
}
