package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// homeHeld reports whether node n holds exactly its home ranges (first
// turn its own in its lease view) and how many it holds.
func homeHeld(n *Node) (bool, int) {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	held, ok := 0, true
	for rng := range leaseRanges {
		rs := n.ranges[rng]
		has := rs != nil && rs.lease != nil && !rs.busy
		if has {
			held++
		}
		if has != (n.view.rangeRank(rng, n.cfg.NodeID, now) == 0) {
			ok = false
		}
	}
	return ok, held
}

// With KeepHomeRanges a node takes its home ranges without any table
// announced, keeps them while their tables idle, plans a table of them
// without a lease write, gives the ranges that became another node's
// home to that node when it joins, and releases what it kept when it
// stops, so the other node takes those ranges at once, not after the
// leases' deadline.
func TestHomeRangesAreTakenKeptAndPassedOn(t *testing.T) {
	s := runServer(t)
	planner := nodePlannersShared()
	var acquires sync.Map // node → *atomic.Int64
	start := func(id string) (*Node, context.CancelFunc, chan struct{}) {
		cfg := fastConfig(t, id)
		cfg.LeaseTTL = 3 * time.Second
		cfg.LeaseLinger = 300 * time.Millisecond
		cfg.KeepHomeRanges = true
		c, _ := acquires.LoadOrStore(id, &atomic.Int64{})
		trace := func(_, table, stage string) {
			if stage == "acquire" {
				c.(*atomic.Int64).Add(1)
			}
		}
		return startTracedNode(t, connect(t, s), cfg, trace, planner.forNode(id), nil, &countingCommitter{})
	}
	acquired := func(id string) int64 {
		c, _ := acquires.Load(id)
		return c.(*atomic.Int64).Load()
	}

	a, _, _ := start("a")
	waitFor(t, 10*time.Second, "a holds every range", func() bool { ok, held := homeHeld(a); return ok && held == leaseRanges })

	// A table announced after its coordinator stopped (LeaseLinger) is
	// planned again under the kept range: no lease write.
	tb := "file:///tables/home.lance"
	before := acquired("a")
	if err := a.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the table planned", func() bool { return planner.count(tb, "a") == 1 })
	waitFor(t, 5*time.Second, "its coordinator stopped", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.tables[tb].running
	})
	if ok, held := homeHeld(a); !ok || held != leaseRanges {
		t.Fatalf("after the coordinator stopped a holds %d ranges (home only: %v)", held, ok)
	}
	if err := a.Submit(context.Background(), tb, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the table planned again", func() bool { return planner.count(tb, "a") == 2 })
	if n := acquired("a") - before; n != 0 {
		t.Errorf("%d lease writes to plan a table of a kept range", n)
	}

	// b joins: the ranges whose first turn is now b's move to b, and
	// each node holds its home ranges only.
	b, cancelB, doneB := start("b")
	waitFor(t, 20*time.Second, "a and b hold their home ranges", func() bool {
		okA, la := homeHeld(a)
		okB, lb := homeHeld(b)
		return okA && okB && la+lb == leaseRanges
	})
	_, lb := homeHeld(b)
	if lb != leaseRanges/2 {
		t.Errorf("b holds %d ranges, want %d", lb, leaseRanges/2)
	}
	// Tables of every range announced through a: each is planned by the
	// holder of its range alone, without a lease write.
	beforeA, beforeB := acquired("a"), acquired("b")
	tables := twoTablesPerRange()
	for _, t2 := range tables {
		if err := a.Submit(context.Background(), t2, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "every table planned", func() bool {
		for _, t2 := range tables {
			if planner.count(t2, "a")+planner.count(t2, "b") == 0 {
				return false
			}
		}
		return true
	})
	for _, t2 := range tables {
		home := "a"
		if b.view.rangeRank(rangeOf(t2), "b", time.Now()) == 0 {
			home = "b"
		}
		other := map[string]string{"a": "b", "b": "a"}[home]
		if planner.count(t2, home) == 0 || planner.count(t2, other) != 0 {
			t.Errorf("%s (range %d, home %s): planned by a %d times, by b %d times", t2, rangeOf(t2), home, planner.count(t2, "a"), planner.count(t2, "b"))
		}
	}
	if na, nb := acquired("a")-beforeA, acquired("b")-beforeB; na+nb != 0 {
		t.Errorf("lease writes for a burst over held ranges: a %d, b %d", na, nb)
	}

	// b stops: it releases every range it kept (the records are gone as
	// soon as Run returned), and a takes them.
	cancelB()
	<-doneB
	kv := a.q.leases
	for rng := range leaseRanges {
		e, err := kv.Get(context.Background(), rangeKey(rng))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var rec leaseRecord
		_ = json.Unmarshal(e.Value(), &rec)
		if rec.Holder == "b" {
			t.Errorf("%s still held by b after it stopped", rangeKey(rng))
		}
	}
	waitFor(t, 10*time.Second, "a holds every range again", func() bool { ok, held := homeHeld(a); return ok && held == leaseRanges })
	if lost := metricValue(t, a.m.leaseLost) + metricValue(t, b.m.leaseLost); lost > 0 {
		t.Errorf("%.0f leases lost", lost)
	}
}

// sharedNodePlanner counts plans per table and node; plans queue nothing.
type sharedNodePlanner struct {
	mu    sync.Mutex
	plans map[string]map[string]int
}

func nodePlannersShared() *sharedNodePlanner {
	return &sharedNodePlanner{plans: map[string]map[string]int{}}
}

type plannerOf struct {
	p    *sharedNodePlanner
	node string
}

func (p *sharedNodePlanner) forNode(node string) Planner { return plannerOf{p, node} }

func (p plannerOf) Plan(_ context.Context, table string, _ []string) (Plan, error) {
	p.p.mu.Lock()
	defer p.p.mu.Unlock()
	if p.p.plans[table] == nil {
		p.p.plans[table] = map[string]int{}
	}
	p.p.plans[table][p.node]++
	return Plan{ReadVersion: 1}, nil
}

func (p *sharedNodePlanner) count(table, node string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.plans[table][node]
}

// countingCommitter accepts every batch.
type countingCommitter struct{ n atomic.Int64 }

func (c *countingCommitter) Commit(_ context.Context, _ string, rs []Result) (CommitReport, error) {
	c.n.Add(int64(len(rs)))
	return CommitReport{Version: 1}, nil
}

// With KeepHomeRanges, a node that held every range alone keeps the busy
// range that is still its home when another node joins: its coordinator
// runs on without a stop (a joining node used to get it by a hand-off,
// the load of the idle ranges being released counted against the
// holder); the busy range that became the new node's home is handed to
// it. HomeNode names the node that ends up coordinating each table.
func TestBusyHomeRangeStaysWhenANodeJoins(t *testing.T) {
	s := runServer(t)
	planner := nodePlannersShared()
	var mu sync.Mutex
	stops := map[string]int{} // node/table → coordinator stops
	start := func(id string) *Node {
		cfg := fastConfig(t, id)
		cfg.LeaseTTL = 3 * time.Second
		cfg.LeaseLinger = 5 * time.Minute // coordinators stay while their tables idle
		cfg.KeepHomeRanges = true
		trace := func(_, table, stage string) {
			if stage == "stopped" {
				mu.Lock()
				stops[id+"/"+table]++
				mu.Unlock()
			}
		}
		n, _, _ := startTracedNode(t, connect(t, s), cfg, trace, planner.forNode(id), nil, &countingCommitter{})
		return n
	}
	// One table whose range stays a's home once b is live, one whose
	// range becomes b's.
	var stay, move string
	for i := 0; stay == "" || move == ""; i++ {
		tb := fmt.Sprintf("file:///tables/t%d.lance", i)
		switch HomeNode(tb, []string{"b", "a"}) {
		case "a":
			stay = cmp.Or(stay, tb)
		case "b":
			move = cmp.Or(move, tb)
		}
	}
	if HomeNode(stay, []string{"a"}) != "a" || HomeNode(stay, nil) != "" {
		t.Fatal("HomeNode: a lone node is not the home of every range")
	}
	running := func(n *Node, tb string) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		st := n.tables[tb]
		return st != nil && st.running
	}

	a := start("a")
	waitFor(t, 10*time.Second, "a holds every range", func() bool { ok, held := homeHeld(a); return ok && held == leaseRanges })
	for _, tb := range []string{stay, move} {
		if err := a.Submit(context.Background(), tb, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "both tables coordinated on a", func() bool { return running(a, stay) && running(a, move) })

	b := start("b")
	waitFor(t, 30*time.Second, "a and b hold their home ranges", func() bool {
		okA, la := homeHeld(a)
		okB, lb := homeHeld(b)
		return okA && okB && la+lb == leaseRanges && running(b, move)
	})
	time.Sleep(time.Second) // a few more rebalance ticks
	mu.Lock()
	defer mu.Unlock()
	if stops["a/"+stay] != 0 || !running(a, stay) || running(b, stay) {
		t.Errorf("%s, whose range stayed a's home: stopped on a %d times, running on a %v, on b %v", stay, stops["a/"+stay], running(a, stay), running(b, stay))
	}
	if planner.count(stay, "b") != 0 {
		t.Errorf("%s planned on b", stay)
	}
	if running(a, move) || planner.count(move, "b") == 0 {
		t.Errorf("%s, whose range became b's home: running on a %v, planned on b %d times", move, running(a, move), planner.count(move, "b"))
	}
	if h := metricValue(t, a.m.handOffs); h != 1 {
		t.Errorf("a handed %.0f ranges off, want 1 (the busy one that became b's home)", h)
	}
	if lost := metricValue(t, a.m.leaseLost) + metricValue(t, b.m.leaseLost); lost > 0 {
		t.Errorf("%.0f leases lost", lost)
	}
}
