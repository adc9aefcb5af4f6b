package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

func TestSubmittedTablesArePlannedExecutedAndCommittedInBatches(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	planner := newListPlanner(10)
	planner.batch = 4
	planner.hold = 50 * time.Millisecond
	committer := newLogCommitter(logs)

	var nodes []*Node
	execs := map[string]*fileExecutor{}
	for _, id := range []string{"a", "b"} {
		ex := newFileExecutor(out, id)
		ex.delay = 30 * time.Millisecond
		execs[id] = ex
		cfg := fastConfig(t, id)
		cfg.TableInFlight = 3
		n, _, _ := startNode(t, natstest.Connect(t, s), cfg, planner, ex, committer)
		nodes = append(nodes, n)
	}
	tables := []string{"file:///tables/a.lance", "file:///tables/b.lance", "file:///tables/c.lance"}
	ctx := context.Background()
	for _, tb := range tables {
		// Both nodes hear every announcement; the lease decides.
		if err := nodes[0].Submit(ctx, tb, 1); err != nil {
			t.Fatal(err)
		}
		if err := nodes[1].Submit(ctx, tb, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every task committed", func() bool {
		for _, tb := range tables {
			if len(committer.committed(tb)) != 10 {
				return false
			}
		}
		return true
	})
	for _, tb := range tables {
		got := committer.committed(tb)
		var want []string
		for i := range 10 {
			want = append(want, fmt.Sprintf("%s@1/rewrite/%d", tb, i))
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s committed %v", tb, got)
		}
		committer.mu.Lock()
		for _, b := range committer.batches[tb] {
			if len(b) > 4 {
				t.Errorf("%s: batch of %d results, commit_batch_tasks is 4", tb, len(b))
			}
		}
		committer.mu.Unlock()
	}
	planner.mu.Lock()
	if planner.both {
		t.Error("two nodes planned one table at the same time")
	}
	planner.mu.Unlock()
	committer.mu.Lock()
	if committer.overlap {
		t.Error("two commits of one table overlapped")
	}
	committer.mu.Unlock()
	// Work spread over both nodes' workers.
	for id, ex := range execs {
		ex.mu.Lock()
		if len(ex.runs) == 0 {
			t.Errorf("node %s executed nothing", id)
		}
		ex.mu.Unlock()
	}
	// Idle tables give their leases back.
	waitFor(t, 10*time.Second, "leases released", func() bool {
		lister, err := nodes[0].q.leases.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for k := range lister.Keys() {
			if !strings.HasPrefix(k, nodeKeyPrefix) { // node records stay while the nodes run
				n++
			}
		}
		return n == 0
	})
}

func TestFairnessInterleavesTables(t *testing.T) {
	s := natstest.Server(t)
	planner := newListPlanner(6)
	cfg := fastConfig(t, "a")
	cfg.Workers = 0 // coordinator only: watch what it enqueues
	cfg.TableInFlight = 2
	n, _, _ := startNode(t, natstest.Connect(t, s), cfg, planner, nil, nil)
	tables := []string{"file:///f/1.lance", "file:///f/2.lance", "file:///f/3.lance"}
	for _, tb := range tables {
		if err := n.Submit(context.Background(), tb, 1); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	waitFor(t, 10*time.Second, "6 tasks queued", func() bool {
		d, err := n.q.depth(ctx)
		return err == nil && d == 6
	})
	time.Sleep(500 * time.Millisecond) // the cap must hold: nothing more arrives
	if d, _ := n.q.depth(ctx); d != 6 {
		t.Fatalf("queue depth %d: the per-table in-flight cap (2 × 3 tables) was not respected", d)
	}
	per := map[string]int{}
	for seq := uint64(1); seq <= 6; seq++ {
		m, err := n.q.tasks.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		per[m.Header.Get(hdrTable)]++
	}
	for _, tb := range tables {
		if per[tb] != 2 {
			t.Fatalf("queued per table %v: want 2 of each", per)
		}
	}
}

func TestCoordinatorTakesOverResultsOfADeadCoordinator(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	planner := newListPlanner(4)
	committer := newLogCommitter(logs)
	const table = "file:///tables/orphan.lance"

	// Node a coordinates and plans, but its workers are blocked; it dies
	// (connection gone) with all four tasks queued.
	ncA := natstest.Connect(t, s)
	cfgA := fastConfig(t, "a")
	cfgA.Workers = 0
	a, cancelA, _ := startNode(t, ncA, cfgA, planner, nil, committer)
	if err := a.Submit(context.Background(), table, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tasks queued by a", func() bool {
		d, _ := a.q.depth(context.Background())
		return d == 4
	})
	ncA.Close()
	cancelA()

	// Node b has workers; it executes the tasks, and once a's lease expires
	// b becomes the coordinator and commits them.
	ex := newFileExecutor(out, "b")
	b, _, _ := startNode(t, natstest.Connect(t, s), fastConfig(t, "b"), planner, ex, committer)
	waitFor(t, 10*time.Second, "results published", func() bool {
		info, err := b.q.results.Info(context.Background())
		return err == nil && info.State.Msgs == 4
	})
	// Nobody announces the table again: b finds the orphaned results and
	// the expired lease by itself.
	waitFor(t, 20*time.Second, "b commits a's tasks", func() bool {
		return len(committer.committed(table)) == 4
	})
	if got := committer.committed(table); len(slices.Compact(got)) != 4 {
		t.Fatalf("committed %v", got)
	}
}

// errThrottled stands for a store answering 429/503 while a table is planned.
var errThrottled = errors.New("503 SlowDown")

// A plan that fails with a transient error is retried with backoff by the
// node itself: no further event arrives for the table (its writer stopped),
// and the table must still be planned and maintained.
func TestTransientPlanFailureIsRetriedWithoutAnEvent(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	planner := newListPlanner(3)
	planner.failures = 3
	committer := newLogCommitter(logs)
	cfg := fastConfig(t, "a")
	cfg.Classify = func(err error) (Outcome, bool) {
		if errors.Is(err, errThrottled) {
			return OutcomeRetried, true
		}
		return 0, false
	}
	n, _, _ := startNode(t, natstest.Connect(t, s), cfg, planner, newFileExecutor(out, "a"), committer)
	const tb = "file:///tables/throttled.lance"
	if err := n.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the table planned after three throttled plans and its tasks committed", func() bool {
		return len(committer.committed(tb)) == 3
	})
	planner.mu.Lock()
	calls := planner.calls[tb]
	planner.mu.Unlock()
	if calls != 4 {
		t.Errorf("planned %d times, want 3 failures + 1 success", calls)
	}
}

// TestResultsWaitForTasksQueuedByAnotherHolder: a kept result that names
// sibling tasks in After waits for them although this coordinator never
// queued them (a lease taken over, a deduplicated publication) while tasks
// are left in the queue; it is ready once every sibling's result is in the
// batch, once a sibling ended without success, or once the queue has been
// empty for awaitGrace.
func TestResultsWaitForTasksQueuedByAnotherHolder(t *testing.T) {
	now := time.Unix(1000, 0)
	n := &Node{cfg: Config{Now: func() time.Time { return now }}}
	st := &tableState{inflight: map[string]time.Time{}}
	kept := batchMsg{res: Result{Task: Task{Key: "s1"}, After: []string{"s2", "s3"}}, seen: now}
	ready := func(batch []batchMsg) []bool {
		return readyResults(batch, func(b batchMsg, key string) bool {
			return st.outstanding(key) || n.awaiting(st, batch, b, key)
		})
	}
	n.depth.Store(2) // s2 and s3 queued or running somewhere
	if got := ready([]batchMsg{kept}); got[0] {
		t.Fatal("the kept result is ready while its siblings may still be running")
	}
	s2 := batchMsg{res: Result{Task: Task{Key: "s2"}}, seen: now}
	if got := ready([]batchMsg{kept, s2}); got[0] || got[1] {
		t.Fatalf("ready %v with s3 still running: s2 must wait with the result that names it", got)
	}
	s3 := batchMsg{res: Result{Task: Task{Key: "s3"}}, seen: now}
	if got := ready([]batchMsg{kept, s2, s3}); !got[0] || !got[1] || !got[2] {
		t.Fatalf("ready %v with every sibling's result in the batch", got)
	}
	st.ended = map[string]bool{"s3": true}
	if got := ready([]batchMsg{kept, s2}); !got[0] || !got[1] {
		t.Fatalf("ready %v after s3 ended without success", got)
	}
	st.ended = nil
	n.depth.Store(0)
	if got := ready([]batchMsg{kept}); got[0] {
		t.Fatal("ready the moment the queue looks empty: a sibling's result may be on its way")
	}
	now = now.Add(awaitGrace)
	if got := ready([]batchMsg{kept}); !got[0] {
		t.Fatal("still waiting with an empty queue past the grace: nothing left can produce the siblings' results")
	}
}

// TestLinkedResultsCommitTogether: the results waiting for a join (a
// rewrite, the other remaps of its read version, the parts) and the
// join's own result, which names none of them, are taken in one batch
// however small the batch size, and none of them while one waits; an
// unlinked result is left for the next batch.
func TestLinkedResultsCommitTogether(t *testing.T) {
	res := func(key string, after ...string) batchMsg {
		return batchMsg{res: Result{Task: Task{Key: key}, Payload: []byte("p"), After: after}}
	}
	batch := []batchMsg{res("part1", "join"), res("other"), res("part2", "join"), res("remap", "join"), res("rewrite", "join"), res("join")}
	none := func(batchMsg, string) bool { return false }
	take, rest := takeBatch(batch, readyResults(batch, none), 2)
	var keys []string
	for _, b := range take {
		keys = append(keys, b.res.Task.Key)
	}
	if !slices.Equal(keys, []string{"part1", "part2", "remap", "rewrite", "join"}) || len(rest) != 1 || rest[0].res.Task.Key != "other" {
		t.Fatalf("took %v, left %d", keys, len(rest))
	}
	// The rewrite still waits for a second remap: nothing linked to it
	// is ready, the join included.
	batch[4].res.After = []string{"join", "remap2"}
	ready := readyResults(batch, func(_ batchMsg, k string) bool { return k == "remap2" })
	if !slices.Equal(ready, []bool{false, true, false, false, false, false}) {
		t.Fatalf("ready %v", ready)
	}
}
