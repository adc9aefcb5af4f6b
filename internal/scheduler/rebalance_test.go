package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
		if o, ok := c.table[table]; ok && o != node {
			c.violations = append(c.violations, fmt.Sprintf("%s: coordinator started on %s while %s ran one", table, node, o))
		}
		c.table[table] = node
	case "stopped":
		if c.table[table] == node {
			delete(c.table, table)
		}
	case "range+":
		if o, ok := c.rng[table]; ok && o != node {
			c.violations = append(c.violations, fmt.Sprintf("%s taken by %s while %s held it", table, node, o))
		}
		c.rng[table] = node
	case "range-":
		if c.rng[table] == node {
			delete(c.rng, table)
		}
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

// On a three-server JetStream cluster (R3), two nodes coordinate every
// range while tables keep being announced; a third node joins and gets a
// fair share of the ranges, handed over by their holders while the tables
// are busy, within bounded time and with bounded hand-offs; no table or
// range is coordinated by two nodes at once, no task is committed twice or
// lost. Then the third node dies without releasing anything, and the other
// two take its ranges over once its leases expired.
func TestRangesMoveToANodeThatJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster")
	}
	servers := runCluster(t, 3)
	out, logs := t.TempDir(), t.TempDir()
	planner := &roundPlanner{}
	committer := newLogCommitter(logs)
	tracker := &coordTracker{table: map[string]string{}, rng: map[string]string{}}

	// Two tables in every range.
	perRange := map[int]int{}
	var tables []string
	for i := 0; len(tables) < 2*leaseRanges; i++ {
		tb := fmt.Sprintf("s3://lake/t%05d.lance", i)
		if r := rangeOf(tb); perRange[r] < 2 {
			perRange[r]++
			tables = append(tables, tb)
		}
	}

	type node struct {
		n      *Node
		nc     *nats.Conn
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(id string, s int) node {
		nc := natstest.Connect(t, servers[s])
		cfg := fastConfig(t, id)
		cfg.Replicas = 3
		cfg.LeaseTTL = 6 * time.Second
		cfg.LeaseLinger = 5 * time.Minute // ranges stay held while their tables idle
		cfg.AckWait = 5 * time.Second
		n, err := New(context.Background(), nc, cfg, planner, newFileExecutor(out, id), committer)
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
		return node{n, nc, cancel, done}
	}

	a, b := start("a", 0), start("b", 1)
	// The writer: every table announced again every 2 s (a new round,
	// a new task per table), to every node, as a shared notification
	// queue would.
	stopWriter := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			r := planner.round.Add(1)
			for _, tb := range tables {
				_ = a.n.Submit(context.Background(), tb, uint64(r))
			}
			select {
			case <-stopWriter:
				return
			case <-time.After(2 * time.Second):
			}
		}
	})
	defer func() {
		select {
		case <-stopWriter:
		default:
			close(stopWriter)
		}
		writer.Wait()
	}()
	// Whichever node hears of a free range first takes it; the ranges are
	// then spread over a and b (32/32).
	waitFor(t, 2*time.Minute, "a and b hold every range, 32 each", func() bool {
		return rangesHeld(a.n) == leaseRanges/2 && rangesHeld(b.n) == leaseRanges/2
	})
	handOffs := func(nodes ...node) float64 {
		var sum float64
		for _, n := range nodes {
			sum += counterValue(t, n.n.m.handOffs)
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
	if lost := counterValue(t, a.n.m.leaseLost) + counterValue(t, b.n.m.leaseLost) + counterValue(t, c.n.m.leaseLost); lost > 0 {
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

	close(stopWriter)
	writer.Wait()
	last := planner.round.Load()
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

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A table leased by a node of an earlier version (a per-table lease under
// the table's id) is left to that node while its lease lasts; once it is
// gone, this node plans the table.
func TestTableLeasedByAnEarlierVersionIsLeftToIt(t *testing.T) {
	s := natstest.Server(t)
	planner := newListPlanner(0)
	n, _, _ := startNode(t, natstest.Connect(t, s), fastConfig(t, "new"), planner, nil, nil)
	old, free := "file:///tables/old.lance", "file:///tables/free.lance"
	rec := fmt.Sprintf(`{"holder":"old-node","table":%q,"expires_unix_nano":%d,"in_flight":["k"]}`, old, time.Now().Add(time.Hour).UnixNano())
	if _, err := n.q.leases.Put(context.Background(), TableID(old), []byte(rec)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the view sees the old lease", func() bool {
		_, ok := n.view.legacyHolder(old, n.ID(), time.Now())
		return ok
	})
	for _, tb := range []string{old, free} {
		if err := n.Submit(context.Background(), tb, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the free table planned", func() bool { return planner.callCount(free) == 1 })
	time.Sleep(time.Second)
	if c := planner.callCount(old); c != 0 {
		t.Fatalf("a table leased by an earlier version was planned %d times", c)
	}
	if err := n.q.leases.Delete(context.Background(), TableID(old)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the view sees the old lease gone", func() bool {
		_, ok := n.view.legacyHolder(old, n.ID(), time.Now())
		return !ok
	})
	if err := n.Submit(context.Background(), old, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the table planned once its old lease is gone", func() bool { return planner.callCount(old) == 1 })
}
