package scheduler

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// collect reads the table's new results (up to 32 per call) from the
// results stream, keeps successful ones for the next commit and settles
// the others. It reads from st.resultsFrom on; results handed back after
// a failed commit are read again once st.rereadAt has passed. With probe
// it reads until the end of the table's subject (one read more, which
// finds nothing); without, only as many results as were announced on the
// subject since the last call (st.notified), so a coordinator woken by a
// result's announcement reads just that result and one woken by a plan
// reads nothing. more reports that it stopped at the bound with results
// left to read; st.caughtUp records whether the last read reached the
// end of the subject.
func (n *Node) collect(ctx context.Context, table string, batch []batchMsg, probe bool) (_ []batchMsg, more bool) {
	n.mu.Lock()
	st := n.tables[table]
	from, wait := st.resultsFrom, n.cfg.Now().Before(st.rereadAt)
	want := st.notified
	st.notified = 0
	caughtUp := st.caughtUp
	n.mu.Unlock()
	if wait || !probe && want == 0 {
		return batch, false
	}
	now := n.cfg.Now()
	replan := false // a result read ended its task without a commit
	for i := range collectBound + 1 {
		if i == collectBound {
			more, caughtUp = true, false
			break
		}
		if !probe && i == want {
			break // every announced result read
		}
		m, err := n.q.nextResult(ctx, table, from)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("read results", "table", table, "err", err)
			}
			caughtUp = false
			break
		}
		if m == nil {
			if !probe {
				// Announced but not readable: the announcement (the
				// core NATS copy of the message) can arrive before the
				// stream stored it. Read to the end again shortly
				// (nextWait) rather than at the next results poll.
				n.mu.Lock()
				st.probe = true
				n.mu.Unlock()
			}
			caughtUp = true
			break
		}
		from = m.Sequence + 1
		res, err := resultFromMsg(m.Header, m.Data)
		if err != nil {
			n.log.Error("drop result", "table", table, "err", err)
			n.settle(ctx, table, m.Sequence)
			continue
		}
		outcome := m.Header.Get(hdrOutcome)
		n.mu.Lock()
		delete(st.inflight, res.Task.Key)
		if outcome == OutcomeDone.String() {
			// Planned around until committed or dropped; a result that
			// ended the task otherwise frees its fragments now.
			st.collected = append(st.collected, res.Task.Key)
			n.mu.Unlock()
		} else {
			if st.ended == nil {
				st.ended = map[string]bool{}
			}
			st.ended[res.Task.Key] = true
			// A task skipped because its table was held is not
			// abandoned: once the hold is released it is queued again.
			heldSkip := m.Header.Get(hdrError) == errTableHeld.Error()
			if outcome == OutcomeAbandoned.String() && !heldSkip {
				n.noteAbandonedLocked(st, res.Task.Key, res.Task.ReadVersion)
			} else {
				n.noteRedoLocked(st, res.Task.Key, res.taskSeq)
			}
			if heldSkip {
				st.heldCheckedAt = time.Time{} // the plan looks at the hold first
			}
			n.mu.Unlock()
			// The plans made while the task was in flight planned around
			// it: its fragments are free again, and work deferred behind
			// it (a catch-up behind a rewrite of its fragments) is due now.
			// No new version may ever announce that (the table's writer
			// may have stopped), so the table is planned again once this
			// read ends (once for all the results it read). Not after
			// corruption: the worker holds the table (after it published
			// this result), and it waits for an operator.
			replan = replan || outcome != OutcomeCorrupt.String()
			n.log.Info("task result", "table", table, "task_id", res.Task.Key, "kind", res.Task.Kind, "worker", res.Worker,
				"outcome", outcome, "err", m.Header.Get(hdrError))
			n.settle(ctx, table, m.Sequence)
			continue
		}
		if slices.ContainsFunc(batch, func(b batchMsg) bool { return b.res.Task.Key == res.Task.Key }) {
			n.settle(ctx, table, m.Sequence) // the same task's result twice
			continue
		}
		batch = append(batch, batchMsg{res: res, seq: m.Sequence, seen: now})
	}
	n.mu.Lock()
	st.resultsFrom = max(st.resultsFrom, from)
	st.caughtUp = caughtUp && st.resultsFrom == from // nothing handed back meanwhile
	if replan {
		n.markDirtyLocked(st)
	}
	n.mu.Unlock()
	return batch, more
}

// collectBound is how many results one collect reads.
const collectBound = 32

// announceRecheck is how soon a coordinator reads its results again
// after an announced result was not found (stored a moment after its
// announcement arrived); once, the node's results poll being the net.
const announceRecheck = 50 * time.Millisecond

// settle removes a result from the stream; a failure leaves it for the
// next holder (or the next read) and is logged.
func (n *Node) settle(ctx context.Context, table string, seq uint64) {
	// A result that was acted on is removed even while shutting down.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := n.q.settleResult(ctx, seq); err != nil {
		n.log.Warn("remove result", "table", table, "err", err)
	}
}

// handBack returns results to the stream to be read again after delay
// (they were never removed; the read position moves back to them).
func (n *Node) handBack(table string, batch []batchMsg, delay time.Duration) {
	if len(batch) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.tables[table]
	for _, b := range batch {
		st.resultsFrom = min(st.resultsFrom, b.seq)
	}
	st.rereadAt = n.cfg.Now().Add(delay)
	st.caughtUp = false
}

// maybeCommit commits the batch when it is full, when nothing else of the
// table is outstanding, or when its oldest result waited CommitMaxWait.
// A result whose After tasks are still pending or in flight waits, and so
// do the results it is to be committed with; a result is committed with
// every result of the batch it names in After or that names it
// (linkedResults), however many they are.
func (n *Node) maybeCommit(ctx context.Context, table string, batch []batchMsg) []batchMsg {
	if len(batch) == 0 || n.commit == nil {
		return batch
	}
	n.mu.Lock()
	st := n.tables[table]
	size := st.batchSize
	if size <= 0 {
		size = n.cfg.CommitBatchTasks
	}
	quiet := len(st.pending) == 0 && len(st.inflight) == 0
	ready := readyResults(batch, func(b batchMsg, key string) bool {
		return st.outstanding(key) || n.awaiting(st, batch, b, key)
	})
	n.mu.Unlock()
	var oldest time.Time
	nready := 0
	for i, b := range batch {
		if ready[i] {
			if nready == 0 {
				oldest = b.seen
			}
			nready++
		}
	}
	if nready == 0 || nready < size && !quiet && n.cfg.Now().Sub(oldest) < n.cfg.CommitMaxWait {
		return batch
	}
	take, rest := takeBatch(batch, ready, size)
	results := make([]Result, len(take))
	for i, b := range take {
		results[i] = b.res
	}
	log := n.log.With("table", table, "tasks", len(take))
	start := time.Now()
	rep, err := n.commit.Commit(ctx, table, results)
	o := disposition(err, n.cfg.Classify)
	n.m.commits.WithLabelValues(o.String()).Inc()
	if rep.Rebased > 0 {
		n.m.commitConflict.WithLabelValues("rebased").Add(float64(rep.Rebased))
	}
	n.m.filesRemoved.Add(float64(rep.FilesRemoved))
	switch o {
	case OutcomeDone:
		n.m.commitBatch.Observe(float64(len(take)))
		n.forgetKept(table, take)
		n.keep(ctx, table, take, rep)
		for _, b := range take {
			n.settle(ctx, table, b.seq)
		}
		n.mu.Lock()
		for _, k := range rep.Dropped {
			var seq uint64
			if i := slices.IndexFunc(take, func(b batchMsg) bool { return b.res.Task.Key == k }); i >= 0 {
				seq = take[i].res.taskSeq
			}
			n.noteRedoLocked(st, k, seq)
		}
		if rep.Replan {
			n.markDirtyLocked(st)
		}
		st.maintained = max(st.maintained, rep.Version)
		st.latest = max(st.latest, rep.Version)
		n.m.lag.WithLabelValues(table).Set(float64(st.latest - min(st.latest, st.maintained)))
		n.mu.Unlock()
		log.Info("batch committed", "version", rep.Version, "rebased", rep.Rebased, "duration", time.Since(start))
		return rest
	case OutcomeRetried:
		delay := backoff(2, n.cfg.RetryBase, n.cfg.RetryMax)
		n.handBack(table, take, delay)
		log.Warn("commit failed, retrying", "retry_in", delay, "err", err)
		return rest
	case OutcomeShutdown:
		// Left in the stream for the next holder.
		return rest
	default:
		if o == OutcomeStale {
			n.m.commitConflict.WithLabelValues("stale").Inc()
			n.mu.Lock()
			n.markDirtyLocked(st)
			n.mu.Unlock()
		} else {
			n.m.commitConflict.WithLabelValues("abandoned").Inc()
		}
		if o == OutcomeCorrupt {
			_ = n.hold(ctx, table, err)
		}
		n.forgetKept(table, take)
		n.mu.Lock()
		for _, b := range take {
			if o == OutcomeAbandoned {
				// It cannot be committed at its read version: not
				// queued again there (tableState.abandoned).
				n.noteAbandonedLocked(st, b.res.Task.Key, b.res.Task.ReadVersion)
			} else {
				n.noteRedoLocked(st, b.res.Task.Key, b.res.taskSeq)
			}
		}
		// Nothing was committed, so no new version announces the table:
		// the work planned around these results (and theirs, if the
		// table changed since) is planned here; not a table just held.
		if o != OutcomeCorrupt {
			n.markDirtyLocked(st)
		}
		n.mu.Unlock()
		for _, b := range take {
			n.settle(ctx, table, b.seq)
		}
		log.Error("commit abandoned", "outcome", o.String(), "err", err)
		return rest
	}
}

// outstanding reports whether the table's task with key is pending or in
// flight. n.mu is held.
func (st *tableState) outstanding(key string) bool {
	_, ok := st.inflight[key]
	return ok || slices.ContainsFunc(st.pending, func(t Task) bool { return t.Key == key })
}

// awaiting reports whether result b should go on waiting for the task key
// it names in After although this coordinator has not queued that task:
// after a lease takeover the task may still be queued or running for the
// previous holder, and a publication that JetStream deduplicated leaves the
// original running. Every task ends with a result (done, failed, or
// abandoned when dead-lettered), so b waits until key's result is in batch
// or ended without success, or until no task is left in the queue (a
// refreshed depth of zero) and b has been read for awaitGrace. n.mu is held.
func (n *Node) awaiting(st *tableState, batch []batchMsg, b batchMsg, key string) bool {
	if st.ended[key] || slices.ContainsFunc(batch, func(c batchMsg) bool { return c.res.Task.Key == key }) {
		return false
	}
	return n.depth.Load() > 0 || n.cfg.Now().Sub(b.seen) < awaitGrace
}

// awaitGrace is how long a result waits for a task it names in After once
// the task queue is empty: two refreshes of the queue depth.
const awaitGrace = 10 * time.Second

// readyResults marks the results of batch that may be committed now: a
// result is ready when none of the tasks it names in After is
// outstanding, and so is every result linked to it (one naming the other
// in After, directly or through other results of the batch): linked
// results commit together or not at all.
func readyResults(batch []batchMsg, outstanding func(b batchMsg, key string) bool) []bool {
	ready := make([]bool, len(batch))
	for i, b := range batch {
		ready[i] = !slices.ContainsFunc(b.res.After, func(k string) bool { return outstanding(b, k) })
	}
	for _, c := range linkedResults(batch) {
		if slices.ContainsFunc(c, func(i int) bool { return !ready[i] }) {
			for _, i := range c {
				ready[i] = false
			}
		}
	}
	return ready
}

// linkedResults groups the results of batch (by index, each group in
// batch order, groups in the order of their first result) that must be
// committed together: a result and every result it names in After or
// that names it, transitively. A kept rewrite names the join of its
// remap's parts, and so do the parts and the other remaps of its read
// version; the join names nothing, yet it commits only with them.
func linkedResults(batch []batchMsg) [][]int {
	group := make([]int, len(batch))
	for i := range group {
		group[i] = i
	}
	var find func(i int) int
	find = func(i int) int {
		for group[i] != i {
			group[i] = group[group[i]]
			i = group[i]
		}
		return i
	}
	for i, b := range batch {
		for j, c := range batch {
			if i != j && slices.Contains(b.res.After, c.res.Task.Key) {
				if ri, rj := find(i), find(j); ri != rj {
					group[max(ri, rj)] = min(ri, rj)
				}
			}
		}
	}
	var out [][]int
	at := map[int]int{}
	for i := range batch {
		r := find(i)
		k, ok := at[r]
		if !ok {
			k = len(out)
			at[r] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// takeBatch takes ready results in order, each with every result linked
// to it (linkedResults: the group may pass size, it is never cut), until
// size results are taken, and returns the rest.
func takeBatch(batch []batchMsg, ready []bool, size int) (take, rest []batchMsg) {
	taken := make([]bool, len(batch))
	n := 0
	for _, c := range linkedResults(batch) {
		if n >= size || !ready[c[0]] {
			continue
		}
		for _, i := range c {
			taken[i] = true
		}
		n += len(c)
	}
	for i, b := range batch {
		if taken[i] {
			take = append(take, b)
		} else {
			rest = append(rest, b)
		}
	}
	return take, rest
}

// forgetKept stops planning around the results of batch, kept or just
// read (committed or given up).
func (n *Node) forgetKept(table string, batch []batchMsg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.tables[table]
	for _, b := range batch {
		delete(st.kept, b.res.Task.Key)
		st.collected = slices.DeleteFunc(st.collected, func(k string) bool { return k == b.res.Task.Key })
		for _, k := range b.res.After {
			delete(st.ended, k)
		}
	}
}

// keptMsgID is the Nats-Msg-Id of a kept result's publication: the task
// and the results stream sequence of the message it is published from
// (the result being committed), so publishing one result again twice (a
// publish retried, two coordinators racing over one batch at a lease
// takeover) stores it once, while a result kept again later (a rewrite
// waits for its remap's parts, then for their join) is published from
// its new message and is a new publication.
func keptMsgID(key string, from uint64) string {
	return "kept:" + key + ":" + strconv.FormatUint(from, 10)
}

// keep publishes the results a commit kept back (CommitReport.Kept) as new
// result messages and queues the tasks they wait for. Publishing comes
// first: until the batch's messages are removed, a coordinator that dies
// leaves the originals to the next holder. A kept result that cannot be
// published, or whose publication JetStream deduplicated (the earlier
// message may be removed already), is lost to this batch (its outputs are
// recorded in the journal, which cleanup settles), is not planned around,
// and the table is planned again.
// take are the batch's messages, which the kept results are published
// from (keptMsgID).
func (n *Node) keep(ctx context.Context, table string, take []batchMsg, rep CommitReport) {
	if len(rep.Kept) == 0 && len(rep.Followups) == 0 {
		return
	}
	lost := false
	var published []string
	for _, r := range rep.Kept {
		i := slices.IndexFunc(take, func(b batchMsg) bool { return b.res.Task.Key == r.Task.Key })
		if i < 0 {
			lost = true
			n.log.Error("keep result", "table", table, "task_id", r.Task.Key, "err", "the committer kept a result that is not in the batch")
			continue
		}
		msg := resultMsg(r)
		msg.Header.Set(hdrOutcome, OutcomeDone.String())
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		ack, err := n.q.js.PublishMsg(pctx, msg, jetstream.WithMsgID(keptMsgID(r.Task.Key, take[i].seq)), jetstream.WithExpectStream(ResultsStream))
		cancel()
		switch {
		case err != nil:
			lost = true
			n.log.Warn("keep result", "table", table, "task_id", r.Task.Key, "err", err)
		case ack.Duplicate:
			// The same message was published before and may be settled
			// already: this result may never be read again.
			lost = true
			n.log.Warn("keep result", "table", table, "task_id", r.Task.Key, "err", "publication deduplicated")
		default:
			published = append(published, r.Task.Key)
		}
	}
	n.mu.Lock()
	st := n.tables[table]
	if lost {
		n.markDirtyLocked(st)
	}
	if st.kept == nil {
		st.kept = map[string]bool{}
	}
	// Only results that will be read again are planned around: a lost
	// one's fragments are planned again.
	for _, k := range published {
		st.kept[k] = true
	}
	queued := 0
	for _, t := range rep.Followups {
		if st.outstanding(t.Key) {
			continue
		}
		n.addPendingLocked(st, t)
		queued++
	}
	n.mu.Unlock()
	n.log.Info("results kept for follow-up tasks", "table", table, "kept", len(rep.Kept), "tasks", queued)
	n.kick()
}
