package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

func TestPublishDeduplicatesByTaskKey(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	n, err := New(context.Background(), nc, fastConfig(t, "a"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	task := Task{Kind: "rewrite", Key: "file:///t.lance@7/rewrite/1,2,3", Table: "file:///t.lance", ReadVersion: 7, Payload: []byte("x")}
	for i, wantDup := range []bool{false, true, true} {
		dup, err := n.q.publish(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		if dup != wantDup {
			t.Fatalf("publish %d: duplicate=%v, want %v", i, dup, wantDup)
		}
	}
	other := task
	other.Key = "file:///t.lance@8/rewrite/1,2,3"
	if dup, err := n.q.publish(ctx, other, 0); err != nil || dup {
		t.Fatalf("different key: dup=%v err=%v", dup, err)
	}
	if d, err := n.q.depth(ctx); err != nil || d != 2 {
		t.Fatalf("depth = %d, %v; want 2 messages for 2 distinct keys", d, err)
	}
	if _, err := n.q.publish(ctx, Task{Kind: "Bad.Kind", Key: "k", Table: "t"}, 0); err == nil {
		t.Fatal("a kind that is not one subject token was accepted")
	}
	// Once a copy has left the work queue (acked: it ended), its attempt
	// is still deduplicated; the attempt named after it (the caller knows
	// it ended without being committed) is a new copy, published once
	// however often it is published, and so is the attempt after that.
	var after uint64
	for round := range 2 {
		batch, err := n.q.workers.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		acked := 0
		for m := range batch.Messages() {
			if m.Headers().Get(hdrKey) == task.Key {
				meta, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				after = meta.Sequence.Stream
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
		if want := 2 - round; acked != want {
			t.Fatalf("round %d: acked %d messages, want %d", round, acked, want)
		}
		for i, p := range []struct {
			after   uint64
			wantDup bool
		}{{0, true}, {after, false}, {after, true}, {after, true}} {
			if dup, err := n.q.publish(ctx, task, p.after); err != nil || dup != p.wantDup {
				t.Fatalf("round %d: publish %d (after %d) once the copy ended: duplicate=%v err=%v, want %v", round, i, p.after, dup, err, p.wantDup)
			}
		}
		if d, err := n.q.depth(ctx); err != nil || d != 1 {
			t.Fatalf("round %d: depth = %d, %v; want the one new copy", round, d, err)
		}
	}
}

// publishTasks enqueues n tasks of one table directly on the queue.
func publishTasks(t *testing.T, node *Node, table string, count int) []string {
	t.Helper()
	var keys []string
	for i := range count {
		key := fmt.Sprintf("%s@1/rewrite/%d", table, i)
		if _, err := node.q.publish(context.Background(), Task{Kind: "rewrite", Key: key, Table: table, ReadVersion: 1, Payload: []byte(key)}, 0); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	return keys
}

func TestTaskOfDeadWorkerIsRedeliveredAndFinishedByAnother(t *testing.T) {
	s := natstest.Server(t)
	out := t.TempDir()

	// Worker A takes the task and dies mid-task: its connection closes
	// without an ack (what kill -9 does to a process).
	ncA := natstest.Connect(t, s)
	exA := newFileExecutor(out, "a")
	exA.block = make(chan struct{})
	cfgA := fastConfig(t, "a")
	cfgA.Workers = 1
	a, cancelA, _ := startNode(t, ncA, cfgA, nil, exA, nil)
	keys := publishTasks(t, a, "file:///tables/t1.lance", 1)
	select {
	case k := <-exA.started:
		if k != keys[0] {
			t.Fatalf("started %s", k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker a never started the task")
	}
	ncA.Close()
	cancelA()

	ncB := natstest.Connect(t, s)
	exB := newFileExecutor(out, "b")
	startNode(t, ncB, fastConfig(t, "b"), nil, exB, nil)
	waitFor(t, 10*time.Second, "worker b to finish the task", func() bool {
		return outputs(t, out)[keys[0]] == "b"
	})
	close(exA.block)
	n := natstest.Connect(t, s)
	node, err := New(context.Background(), n, fastConfig(t, "probe"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the queue to empty", func() bool {
		d, err := node.q.depth(context.Background())
		return err == nil && d == 0
	})
	info, err := node.q.results.Info(context.Background())
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("results stream holds %d messages (%v), want exactly 1", info.State.Msgs, err)
	}
}

func TestDrainFinishesOrHandsBackEveryTask(t *testing.T) {
	s := natstest.Server(t)
	out := t.TempDir()
	nc := natstest.Connect(t, s)
	ex := newFileExecutor(out, "a")
	ex.delay = 1500 * time.Millisecond
	cfg := fastConfig(t, "a")
	cfg.DrainTimeout = 500 * time.Millisecond // shorter than a task: some get handed back
	a, cancelA, doneA := startNode(t, nc, cfg, nil, ex, nil)
	keys := publishTasks(t, a, "file:///tables/t2.lance", 6)
	<-ex.started
	<-ex.started
	cancelA()
	select {
	case <-doneA:
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not finish")
	}
	// The handed-back tasks (Nak) and the untouched ones are still queued;
	// a fresh node finishes all of them.
	ncB := natstest.Connect(t, s)
	exB := newFileExecutor(out, "b")
	startNode(t, ncB, fastConfig(t, "b"), nil, exB, nil)
	waitFor(t, 20*time.Second, "every task finished", func() bool { return len(outputs(t, out)) == len(keys) })
	got := outputs(t, out)
	for _, k := range keys {
		if got[k] == "" {
			t.Errorf("task %s lost", k)
		}
	}
	exB.mu.Lock()
	defer exB.mu.Unlock()
	if len(exB.runs) < 4 {
		t.Errorf("node b ran %d tasks; the drain should have left at least 4 of 6", len(exB.runs))
	}
}

func TestTaskExhaustingDeliveriesGoesToDeadLetter(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	ex := newFileExecutor(t.TempDir(), "a")
	ex.fail = func(Task) error { return Transient(errBoom) }
	cfg := fastConfig(t, "a")
	cfg.MaxDeliver = 3
	cfg.BackOff = []time.Duration{time.Second}
	a, _, _ := startNode(t, nc, cfg, nil, ex, nil)
	keys := publishTasks(t, a, "file:///tables/t3.lance", 1)

	ctx := context.Background()
	waitFor(t, 15*time.Second, "a dead letter", func() bool {
		info, err := a.q.dead.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	msg, err := a.q.dead.GetLastMsgForSubject(ctx, deadSubjectPrefix+"rewrite")
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(hdrKey) != keys[0] || msg.Header.Get("Lanced-Deliveries") != "3" {
		t.Fatalf("dead letter key=%q deliveries=%q", msg.Header.Get(hdrKey), msg.Header.Get("Lanced-Deliveries"))
	}
	waitFor(t, 5*time.Second, "the task to leave the work queue", func() bool {
		d, err := a.q.depth(ctx)
		return err == nil && d == 0
	})
	ex.mu.Lock()
	runs := ex.runs[keys[0]]
	ex.mu.Unlock()
	if runs != 3 {
		t.Fatalf("task ran %d times, want MaxDeliver=3", runs)
	}
	// The coordinator hears that the task is over.
	res, err := a.q.results.GetLastMsgForSubject(ctx, resultSubjectPrefix+TableID("file:///tables/t3.lance"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get(hdrOutcome) != OutcomeAbandoned.String() {
		t.Fatalf("result outcome %q", res.Header.Get(hdrOutcome))
	}
}

func TestCorruptTaskHoldsTheTable(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	ex := newFileExecutor(t.TempDir(), "a")
	ex.fail = func(t Task) error {
		if t.Table == "file:///bad.lance" {
			return fmt.Errorf("read manifest: %w", ErrCorrupt)
		}
		return nil
	}
	cfg := fastConfig(t, "a")
	a, _, _ := startNode(t, nc, cfg, nil, ex, nil)
	publishTasks(t, a, "file:///bad.lance", 1)
	publishTasks(t, a, "file:///good.lance", 1)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the bad table held", func() bool {
		held, _ := a.isHeld(ctx, "file:///bad.lance")
		return held
	})
	if held, _ := a.isHeld(ctx, "file:///good.lance"); held {
		t.Fatal("the good table was held too")
	}
	if err := a.refreshHolds(ctx); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, a.m.held.WithLabelValues("file:///bad.lance")); v != 1 {
		t.Fatalf("lanced_table_held = %v", v)
	}
	// A held table's later tasks are not executed (the good table's task
	// may still run meanwhile: only the bad table's tasks are counted).
	badRuns := func() int {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		n := 0
		for k := range ex.runs {
			if strings.HasPrefix(k, "file:///bad.lance@") {
				n++
			}
		}
		return n
	}
	before := badRuns()
	publishTasks(t, a, "file:///bad.lance", 3)
	waitFor(t, 10*time.Second, "the queue to empty", func() bool {
		d, err := a.q.depth(ctx)
		return err == nil && d == 0
	})
	if after := badRuns(); after != before {
		t.Fatalf("tasks of a held table ran: %d → %d", before, after)
	}
}
