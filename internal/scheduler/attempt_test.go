package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

// racingCommitter gives up the first batch of a table like
// givingUpCommitter and, before it returns, publishes every given-up
// task again the way a second coordinator racing at a lease takeover (or
// this one retrying a publish whose acknowledgement timed out) would: the
// first attempt again, and the next attempt (named after the copy that
// ended) twice. Later batches are committed by the logCommitter.
type racingCommitter struct {
	*logCommitter
	q       *queue
	mu      sync.Mutex
	givenUp map[string][]string
	errs    []error
}

func (c *racingCommitter) Commit(ctx context.Context, table string, results []Result) (CommitReport, error) {
	c.mu.Lock()
	first := c.givenUp[table] == nil
	var keys []string
	if first {
		for _, r := range results {
			c.givenUp[table] = append(c.givenUp[table], r.Task.Key)
			keys = append(keys, r.Task.Key)
		}
	}
	c.mu.Unlock()
	if !first {
		return c.logCommitter.Commit(ctx, table, results)
	}
	for _, r := range results {
		t := Task{Kind: r.Task.Kind, Key: r.Task.Key, Table: table, ReadVersion: r.Task.ReadVersion, Payload: []byte(r.Task.Key)}
		for i, p := range []struct {
			after   uint64
			wantDup bool
		}{{0, true}, {r.taskSeq, false}, {r.taskSeq, true}} {
			dup, err := c.q.publish(ctx, t, p.after)
			if err == nil && dup != p.wantDup {
				err = fmt.Errorf("publication %d of %s (after %d): duplicate=%v, want %v", i, t.Key, p.after, dup, p.wantDup)
			}
			if err != nil {
				c.mu.Lock()
				c.errs = append(c.errs, err)
				c.mu.Unlock()
			}
		}
	}
	return CommitReport{Replan: true, Dropped: keys}, nil
}

// TestAttemptPublishedTwiceRunsOnce: a task given up at commit is planned
// again as a new attempt; that attempt, published by another party first
// (a racing coordinator) and then by the coordinator itself, and the
// first attempt published again, run once between them: each task runs
// twice in all (the given-up attempt and the new one) and is committed
// once.
func TestAttemptPublishedTwiceRunsOnce(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	other, err := New(context.Background(), natstest.Connect(t, s), fastConfig(t, "other"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	committer := &racingCommitter{logCommitter: newLogCommitter(logs), q: other.q, givenUp: map[string][]string{}}
	const tb = "file:///tables/raced.lance"
	n, ex, want := runUntilRunAgain(t, s, fastConfig(t, "a"), committer, committer.committed, out, tb)
	// Anything still queued would run now: give it the time to.
	waitFor(t, 10*time.Second, "an empty queue", func() bool {
		d, err := n.q.depth(context.Background())
		return err == nil && d == 0
	})
	time.Sleep(time.Second)
	committer.mu.Lock()
	if err := errors.Join(committer.errs...); err != nil {
		t.Error(err)
	}
	committer.mu.Unlock()
	if got := committer.committed(tb); !slices.Equal(got, want) {
		t.Errorf("committed %v, want each task once: %v", got, want)
	}
	ranTwice(t, ex, want)
}

// TestAbandonedTaskIsNotQueuedAgainUntilTheTableChanges: a task the
// executor abandons (it cannot succeed on this table) and one that
// exhausts its deliveries (dead-lettered) are not queued again when
// their table is planned again at the same version, here or on a node
// that takes the range over; the table's next version plans them afresh.
func TestAbandonedTaskIsNotQueuedAgainUntilTheTableChanges(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	const tb = "file:///tables/abandoned.lance"
	k0, k1 := tb+"@1/rewrite/0", tb+"@1/rewrite/1"
	planner := newListPlanner(3)
	committer := newLogCommitter(logs)
	ex := newFileExecutor(out, "a")
	ex.fail = func(t Task) error {
		switch t.Key {
		case k0:
			return fmt.Errorf("unsupported layout: %w", ErrIncompatible)
		case k1:
			return Transient(errBoom)
		}
		return nil
	}
	// A short duplicate window: JetStream's deduplication must not be
	// what keeps the abandoned tasks from running again.
	const window = time.Second
	cfg := fastConfig(t, "a")
	cfg.MaxDeliver = 2
	cfg.BackOff = []time.Duration{time.Second}
	cfg.DedupWindow = window
	cfg.LeaseLinger = time.Minute // a holds the range until it dies
	ncA := natstest.Connect(t, s)
	a, cancelA, doneA := startNode(t, ncA, cfg, planner, ex, committer)
	if err := a.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the third task committed", func() bool {
		return slices.Equal(committer.committed(tb), []string{tb + "@1/rewrite/2"})
	})
	ctx := context.Background()
	waitFor(t, 15*time.Second, "the dead letter", func() bool {
		info, err := a.q.dead.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	waitFor(t, 15*time.Second, "both ended tasks known as abandoned", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		ab := a.tables[tb].abandoned
		return ab[k0] == 1 && ab[k1] == 1
	})
	runs := func() (int, int) {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		return ex.runs[k0], ex.runs[k1]
	}
	r0, r1 := runs()
	if r0 != 1 || r1 != 2 {
		t.Fatalf("runs %d, %d; want 1 (abandoned) and MaxDeliver=2 (dead-lettered)", r0, r1)
	}
	// Planned again at the same version, here: nothing is queued.
	time.Sleep(2 * window)
	calls := planner.callCount(tb)
	if err := a.Submit(ctx, tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the table planned again", func() bool { return planner.callCount(tb) > calls })
	time.Sleep(2 * time.Second)
	if g0, g1 := runs(); g0 != r0 || g1 != r1 {
		t.Fatalf("abandoned tasks ran again at the same version: runs %d, %d", g0, g1)
	}
	// Node a dies holding the range; node b takes it over and plans the
	// table at the same version: nothing is queued either.
	ncA.Close()
	cancelA()
	<-doneA
	exB := newFileExecutor(out, "b")
	exB.fail = ex.fail
	cfgB := fastConfig(t, "b")
	cfgB.DedupWindow = window
	b, _, _ := startNode(t, natstest.Connect(t, s), cfgB, planner, exB, committer)
	calls = planner.callCount(tb)
	waitFor(t, 20*time.Second, "b plans the table after the takeover", func() bool {
		_ = b.Submit(ctx, tb, 1)
		time.Sleep(200 * time.Millisecond)
		return planner.callCount(tb) > calls
	})
	time.Sleep(2 * time.Second)
	exB.mu.Lock()
	rb0, rb1 := exB.runs[k0], exB.runs[k1]
	exB.mu.Unlock()
	if rb0 != 0 || rb1 != 0 {
		t.Fatalf("abandoned tasks ran again after the takeover at the same version: runs %d, %d", rb0, rb1)
	}
	// The table's next version plans them afresh.
	planner.mu.Lock()
	planner.version = 2
	planner.mu.Unlock()
	if err := b.Submit(ctx, tb, 2); err != nil {
		t.Fatal(err)
	}
	// (The test's planner plans version 1's committed task too while the
	// duplicate window is this short: only version 2 is counted.)
	waitFor(t, 30*time.Second, "version 2's tasks committed", func() bool {
		got := committer.committed(tb)
		return slices.Contains(got, tb+"@2/rewrite/0") && slices.Contains(got, tb+"@2/rewrite/1") && slices.Contains(got, tb+"@2/rewrite/2")
	})
	b.mu.Lock()
	left := len(b.tables[tb].abandoned)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d abandoned keys of version 1 kept after version 2 was planned", left)
	}
}

// TestHeldSkipIsNotAbandoned: a task a worker skipped because its table
// was held is queued again once planned (the hold may be released at the
// same table version), while one the executor abandoned is not.
func TestHeldSkipIsNotAbandoned(t *testing.T) {
	s := natstest.Server(t)
	n, err := New(context.Background(), natstest.Connect(t, s), fastConfig(t, "a"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const tb = "file:///tables/held-skip.lance"
	held := Task{Kind: "rewrite", Key: tb + "@3/rewrite/0", Table: tb, ReadVersion: 3}
	gone := Task{Kind: "rewrite", Key: tb + "@3/rewrite/1", Table: tb, ReadVersion: 3}
	if err := n.finish(ctx, held, 5, Result{}, OutcomeAbandoned, errTableHeld); err != nil {
		t.Fatal(err)
	}
	if err := n.finish(ctx, gone, 6, Result{}, OutcomeAbandoned, fmt.Errorf("layout: %w", ErrIncompatible)); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	st := n.state(tb)
	n.mu.Unlock()
	n.collect(ctx, tb, nil, true)
	attempts := n.attemptsOf([]Task{held, gone})
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := st.abandoned[held.Key]; ok || st.redo[held.Key].seq != 5 {
		t.Errorf("held skip: abandoned %v, redo %v; want it queued again after copy 5", st.abandoned, st.redo)
	}
	if v, ok := st.abandoned[gone.Key]; !ok || v != 3 {
		t.Errorf("abandoned task: abandoned %v; want it kept at read version 3", st.abandoned)
	}
	if attempts[0] != 5 || attempts[1] != 0 {
		t.Errorf("attempts %v, want [5 0]", attempts)
	}
}

// TestAbandonedTaskRunsAtMostOncePerNodeAfterItsRangeIsReleased: the
// abandoned keys a node knows travel in its range's lease record only
// while the range is held; a range released when its tables went idle
// (or when its node stops) takes them along, so a node that takes the
// range later and plans the table at the same version queues the task
// once more. That node then knows it as abandoned too: announcing the
// table again and again at that version, past the duplicate window, does
// not run it again (no loop); each node runs it at most once per version.
func TestAbandonedTaskRunsAtMostOncePerNodeAfterItsRangeIsReleased(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	const tb = "file:///tables/abandoned-released.lance"
	k0 := tb + "@1/rewrite/0"
	planner := newListPlanner(1)
	committer := newLogCommitter(logs)
	incompatible := func(Task) error { return fmt.Errorf("unsupported layout: %w", ErrIncompatible) }
	const window = time.Second // JetStream's deduplication must not be what keeps it from running
	config := func(id string) Config {
		cfg := fastConfig(t, id)
		cfg.DedupWindow = window
		cfg.LeaseLinger = 200 * time.Millisecond // idle ranges are released soon
		return cfg
	}
	runsOf := func(ex *fileExecutor) int {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		return ex.runs[k0]
	}
	ctx := context.Background()
	exA := newFileExecutor(out, "a")
	exA.fail = incompatible
	a, cancelA, doneA := startNode(t, natstest.Connect(t, s), config("a"), planner, exA, committer)
	if err := a.Submit(ctx, tb, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the task abandoned on a", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.tables[tb] != nil && a.tables[tb].abandoned[k0] == 1
	})
	waitFor(t, 20*time.Second, "a released the range", func() bool { return rangesHeld(a) == 0 })
	cancelA()
	<-doneA

	exB := newFileExecutor(out, "b")
	exB.fail = incompatible
	b, _, _ := startNode(t, natstest.Connect(t, s), config("b"), planner, exB, committer)
	for i := range 5 {
		time.Sleep(window + 500*time.Millisecond)
		calls := planner.callCount(tb)
		if err := b.Submit(ctx, tb, 1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("announcement %d planned", i), func() bool { return planner.callCount(tb) > calls })
	}
	time.Sleep(2 * time.Second)
	if ra, rb := runsOf(exA), runsOf(exB); ra != 1 || rb > 1 {
		t.Fatalf("the abandoned task ran %d times on a and %d on b over 5 announcements at its version; want 1 and at most 1", ra, rb)
	}
	t.Logf("runs: a %d, b %d", runsOf(exA), runsOf(exB))
}
