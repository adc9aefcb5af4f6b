package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

// deferPlanner plans one task per table version ("<table>@<v>/catchup")
// and, like the engine's planner, none while a task of the table is
// queued, running or waiting for its commit (the work it would do is
// deferred behind the task in flight: a catch-up behind a rewrite of its
// fragments or a remap of its index). It records every plan.
type deferPlanner struct {
	mu      sync.Mutex
	version uint64
	plans   []deferPlan
}

// deferPlan is one plan a deferPlanner made: the version, the tasks it
// saw in flight and the task it planned ("" for none).
type deferPlan struct {
	version  uint64
	inFlight []string
	task     string
}

func deferKey(table string, v uint64) string { return fmt.Sprintf("%s@%d/catchup", table, v) }

func (p *deferPlanner) Plan(_ context.Context, table string, inFlight []string) (Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := Plan{ReadVersion: p.version}
	rec := deferPlan{version: p.version, inFlight: slices.Clone(inFlight)}
	if len(inFlight) == 0 {
		rec.task = deferKey(table, p.version)
		pl.Tasks = []Task{{Kind: "catchup", Key: rec.task, Table: table, ReadVersion: p.version, Payload: []byte(rec.task)}}
	}
	p.plans = append(p.plans, rec)
	return pl, nil
}

func (p *deferPlanner) setVersion(v uint64) {
	p.mu.Lock()
	p.version = v
	p.mu.Unlock()
}

// deferredAt reports whether a plan at version v planned nothing because
// of tasks in flight.
func (p *deferPlanner) deferredAt(v uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.plans, func(d deferPlan) bool { return d.version == v && d.task == "" && len(d.inFlight) > 0 })
}

// gateExecutor runs a fileExecutor, except that the first task named
// first waits for release and then fails with err (nil: runs).
type gateExecutor struct {
	*fileExecutor
	first   string
	release chan struct{}
	err     error
}

func (e *gateExecutor) Execute(ctx context.Context, t Task) (Result, error) {
	if t.Key == e.first {
		e.mu.Lock()
		e.runs[t.Key]++
		e.mu.Unlock()
		select {
		case <-e.release:
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		}
		if e.err != nil {
			return Result{}, e.err
		}
	}
	return e.fileExecutor.Execute(ctx, t)
}

// gateCommitter commits with a logCommitter, except that a batch holding
// the task first waits for release and then fails with err.
type gateCommitter struct {
	*logCommitter
	first   string
	release chan struct{}
	err     error
}

func (c *gateCommitter) Commit(ctx context.Context, table string, results []Result) (CommitReport, error) {
	if slices.ContainsFunc(results, func(r Result) bool { return r.Task.Key == c.first }) {
		select {
		case <-c.release:
		case <-ctx.Done():
			return CommitReport{}, context.Cause(ctx)
		}
		return CommitReport{}, c.err
	}
	return c.logCommitter.Commit(ctx, table, results)
}

// TestWorkDeferredBehindAnEndedTaskIsPlanned: the table's last version
// (its writer stopped: no version follows) was planned while a task of an
// earlier version was in flight, so the plan deferred its work behind
// that task. The task then ends without a commit: the executor abandons
// it, or its commit is abandoned. Nothing changes the table again, so
// the coordinator itself must plan it again: the deferred work is queued
// and committed, and the ended task is not queued again.
func TestWorkDeferredBehindAnEndedTaskIsPlanned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		atExec bool // the executor abandons the task; else its commit
	}{
		{"executor abandons", true},
		{"commit abandoned", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			out, logs := t.TempDir(), t.TempDir()
			const tb = "file:///tables/deferred.lance"
			first, last := deferKey(tb, 1), deferKey(tb, 2)
			planner := &deferPlanner{version: 1}
			release := make(chan struct{})
			abandon := fmt.Errorf("unsupported layout: %w", ErrIncompatible)
			ex := &gateExecutor{fileExecutor: newFileExecutor(out, "a"), first: first, release: release}
			committer := &gateCommitter{logCommitter: newLogCommitter(logs), first: first, release: release, err: abandon}
			if tc.atExec {
				ex.err = abandon
			} else {
				ex.release = nil // the task runs; its commit waits
				ex.first = ""
			}
			n, _, _ := startNode(t, natstest.Connect(t, s), fastConfig(t, "a"), planner, ex, committer)
			ctx := context.Background()
			if err := n.Submit(ctx, tb, 1); err != nil {
				t.Fatal(err)
			}
			if tc.atExec {
				waitFor(t, 10*time.Second, "the first task running", func() bool {
					ex.mu.Lock()
					defer ex.mu.Unlock()
					return ex.runs[first] == 1
				})
			} else {
				waitFor(t, 10*time.Second, "the first task's result collected", func() bool {
					n.mu.Lock()
					defer n.mu.Unlock()
					st := n.tables[tb]
					return st != nil && slices.Contains(st.collected, first)
				})
			}
			// The writer's last version, planned while the first task is
			// in flight: its work is deferred.
			planner.setVersion(2)
			if err := n.Submit(ctx, tb, 2); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "version 2 planned behind the task in flight", func() bool { return planner.deferredAt(2) })
			close(release)
			waitFor(t, 15*time.Second, "version 2's task committed with no new version announced", func() bool {
				return slices.Equal(committer.committed(tb), []string{last})
			})
			ex.mu.Lock()
			runs := ex.runs[first]
			ex.mu.Unlock()
			if runs != 1 {
				t.Errorf("the abandoned task ran %d times, want once", runs)
			}
		})
	}
}

// TestAnnouncedResultNotStoredYetIsReadAgainSoon: a result's
// announcement (the core NATS copy of its message) can arrive before the
// stream stored it, so the coordinator's read finds nothing. It reads
// again within announceRecheck, not at the next results poll (2 s later,
// up to a fifth of a catch-up's settle window), and finds the result.
func TestAnnouncedResultNotStoredYetIsReadAgainSoon(t *testing.T) {
	ctx := context.Background()
	const tb = "file:///tables/announced.lance"
	n, st := coordinatorState(t, tb)
	n.noteResult(TableID(tb)) // the announcement, ahead of its message
	batch, _ := n.collect(ctx, tb, nil, false)
	var idle time.Time
	if wait, done := n.nextWait(st, batch, &idle); done || wait > announceRecheck {
		t.Fatalf("after an announced result was not found: wait %s (done %v), want at most %s", wait, done, announceRecheck)
	}
	task := Task{Kind: "rewrite", Key: tb + "@1/rewrite/0", Table: tb, ReadVersion: 1}
	if err := n.finish(ctx, task, 7, Result{Payload: []byte("out")}, OutcomeDone, nil); err != nil {
		t.Fatal(err)
	}
	// The coordinator's next turn: a read to the end of the subject.
	n.mu.Lock()
	probe := st.probe || !st.caughtUp
	st.probe = false
	n.mu.Unlock()
	batch, _ = n.collect(ctx, tb, batch, probe)
	if len(batch) != 1 || batch[0].res.Task.Key != task.Key {
		t.Fatalf("the result was not read on the next turn: batch %v", batch)
	}
}

// TestResultWaitingForOutstandingTasksDoesNotSpin: a result waiting for
// tasks still outstanding (a rewrite for its remaps) does not make the
// coordinator wake every millisecond once CommitMaxWait passed: it
// sleeps until a result arrives (resultPoll at most); a ready result is
// committed CommitMaxWait after it was read.
func TestResultWaitingForOutstandingTasksDoesNotSpin(t *testing.T) {
	const tb = "file:///tables/waiting.lance"
	remap := tb + "@1/remap/0"
	old := time.Now().Add(-time.Minute)
	kept := batchMsg{res: Result{Task: Task{Key: tb + "@1/rewrite/0", Table: tb}, After: []string{remap}}, seen: old}
	n, st := coordinatorState(t, tb)
	n.mu.Lock()
	st.inflight[remap] = old
	n.mu.Unlock()
	var idle time.Time
	if wait, _ := n.nextWait(st, []batchMsg{kept}, &idle); wait != resultPoll {
		t.Errorf("waiting for a remap in flight: wait %s, want %s", wait, resultPoll)
	}
	ready := batchMsg{res: Result{Task: Task{Key: tb + "@1/rewrite/1", Table: tb}}, seen: time.Now()}
	if wait, _ := n.nextWait(st, []batchMsg{kept, ready}, &idle); wait > n.cfg.CommitMaxWait || wait < n.cfg.CommitMaxWait/2 {
		t.Errorf("with a ready result read just now: wait %s, want about CommitMaxWait %s", wait, n.cfg.CommitMaxWait)
	}
}

// coordinatorState returns a node that does not run (its streams set up
// on an embedded server) and the state of table tb as if its coordinator
// ran there with every result read: for calling the coordinator's steps
// (collect, nextWait) one by one.
func coordinatorState(t *testing.T, tb string) (*Node, *tableState) {
	t.Helper()
	n, err := New(context.Background(), natstest.Connect(t, natstest.Server(t)), fastConfig(t, "a"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.state(tb)
	st.running, st.caughtUp = true, true
	return n, st
}

// TestEndedResultsReadTogetherPlanTheTableOnce: results of tasks that
// ended without a commit, read in one turn, plan the table again once
// (not once per result, each plan a planner turn and a Plan call while
// the rest are still being read).
func TestEndedResultsReadTogetherPlanTheTableOnce(t *testing.T) {
	ctx := context.Background()
	const tb = "file:///tables/ended.lance"
	planner := &deferPlanner{version: 1}
	n, err := New(ctx, natstest.Connect(t, natstest.Server(t)), fastConfig(t, "a"), planner, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancelCause(ctx)
	t.Cleanup(func() { stop(nil) })
	n.mu.Lock()
	st := n.state(tb)
	st.running, st.caughtUp = true, true
	st.ctx, st.stop, st.heldCheckedAt = pctx, stop, time.Now()
	st.lease = &lease{expires: time.Now().Add(time.Hour)}
	n.mu.Unlock()
	go n.runPlanner(pctx)
	const ended = 8
	for i := range ended {
		task := Task{Kind: "catchup", Key: fmt.Sprintf("%s@1/catchup/%d", tb, i), Table: tb, ReadVersion: 1}
		o := []Outcome{OutcomeStale, OutcomeAbandoned}[i%2]
		if err := n.finish(ctx, task, uint64(i+1), Result{}, o, fmt.Errorf("task %d ended", i)); err != nil {
			t.Fatal(err)
		}
	}
	batch, more := n.collect(ctx, tb, nil, true)
	if len(batch) != 0 || more {
		t.Fatalf("read %d results to commit (more: %v), want none", len(batch), more)
	}
	waitFor(t, 5*time.Second, "the table planned", func() bool {
		planner.mu.Lock()
		defer planner.mu.Unlock()
		return len(planner.plans) > 0
	})
	time.Sleep(200 * time.Millisecond) // a second plan, if any, meanwhile
	planner.mu.Lock()
	plans := len(planner.plans)
	planner.mu.Unlock()
	if plans != 1 {
		t.Errorf("%d ended results read in one turn planned the table %d times, want once", ended, plans)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range ended {
		if k := fmt.Sprintf("%s@1/catchup/%d", tb, i); !st.ended[k] {
			t.Errorf("%s not recorded as ended", k)
		}
	}
}
