package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

// tablesInOneRange returns n table names that hash into the same lease
// range.
func tablesInOneRange(n int) ([]string, int) {
	byRange := map[int][]string{}
	for i := 0; ; i++ {
		t := fmt.Sprintf("file:///tables/r%d.lance", i)
		r := rangeOf(t)
		byRange[r] = append(byRange[r], t)
		if len(byRange[r]) == n {
			return byRange[r], r
		}
	}
}

// nodePlanner records which node planned each table.
type nodePlanner struct {
	node string
	p    Planner
	mu   *sync.Mutex
	by   map[string]map[string]bool // table → nodes that planned it
}

func (p nodePlanner) Plan(ctx context.Context, table string, inFlight []string) (Plan, error) {
	p.mu.Lock()
	if p.by[table] == nil {
		p.by[table] = map[string]bool{}
	}
	p.by[table][p.node] = true
	p.mu.Unlock()
	return p.p.Plan(ctx, table, inFlight)
}

// Every table of a range is coordinated by the node holding the range's
// lease, though both nodes hear every announcement.
func TestTablesOfOneRangeAreCoordinatedByItsHolder(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	inner := newListPlanner(2)
	committer := newLogCommitter(logs)
	var mu sync.Mutex
	by := map[string]map[string]bool{}
	var nodes []*Node
	for _, id := range []string{"a", "b"} {
		// A lease that neither lapses nor is let go between a table's
		// tasks on a loaded machine (fastConfig's 1.5s lease lingers
		// 750ms): a handover would rightly let the other node plan.
		cfg := fastConfig(t, id)
		cfg.LeaseTTL = 30 * time.Second
		n, _, _ := startNode(t, natstest.Connect(t, s), cfg,
			nodePlanner{node: id, p: inner, mu: &mu, by: by}, newFileExecutor(out, id), committer)
		nodes = append(nodes, n)
	}
	tables, _ := tablesInOneRange(4)
	for _, tb := range tables {
		for _, n := range nodes {
			if err := n.Submit(context.Background(), tb, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 30*time.Second, "every task committed", func() bool {
		for _, tb := range tables {
			if len(committer.committed(tb)) != 2 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	holders := map[string]bool{}
	for _, tb := range tables {
		if len(by[tb]) != 1 {
			t.Errorf("%s planned by %v, want one node", tb, by[tb])
		}
		for n := range by[tb] {
			holders[n] = true
		}
	}
	if len(holders) != 1 {
		t.Errorf("the tables of one range were planned by %v, want the one holder of its lease", holders)
	}
}

// A node taking over an expired range lease plans every table the dead
// holder's last renewal listed, though nobody announces them again and
// none has a result waiting.
func TestExpiredRangeIsTakenOverWithItsTables(t *testing.T) {
	s := natstest.Server(t)
	planner := newListPlanner(0) // nothing to do: no task, no result
	tables, rng := tablesInOneRange(2)

	ncA := natstest.Connect(t, s)
	cfgA := fastConfig(t, "a")
	cfgA.Workers = 0
	cfgA.LeaseLinger = time.Minute // a keeps the range while its tables idle
	a, cancelA, _ := startNode(t, ncA, cfgA, planner, nil, nil)
	for _, tb := range tables {
		if err := a.Submit(context.Background(), tb, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "a's renewal lists both tables", func() bool {
		e, err := a.q.leases.Get(context.Background(), rangeKey(rng))
		if err != nil {
			return false
		}
		var rec leaseRecord
		return json.Unmarshal(e.Value(), &rec) == nil && rec.Holder == "a" && len(rec.Tables) == 2
	})
	for _, tb := range tables {
		if c := planner.callCount(tb); c != 1 {
			t.Fatalf("%s planned %d times by a, want 1", tb, c)
		}
	}
	// a dies without releasing its lease.
	ncA.Close()
	cancelA()

	// b never heard of the tables: it finds the expired range in its
	// lease view, takes it over and plans both.
	b, _, _ := startNode(t, natstest.Connect(t, s), fastConfig(t, "b"), planner, nil, nil)
	waitFor(t, 20*time.Second, "b plans a's tables", func() bool {
		return planner.callCount(tables[0]) == 2 && planner.callCount(tables[1]) == 2
	})
	e, err := b.q.leases.Get(context.Background(), rangeKey(rng))
	if err != nil {
		t.Fatal(err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Holder != "b" {
		t.Fatalf("range lease after the takeover: %s (%v)", e.Value(), err)
	}
}
