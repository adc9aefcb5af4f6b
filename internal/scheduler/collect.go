package scheduler

import (
	"context"
	"slices"
	"time"
)

// collect reads the table's new results (up to 32 per call) from the
// results stream, keeps successful ones for the next commit and settles
// the others. It reads from st.resultsFrom on; results handed back after
// a failed commit are read again once st.rereadAt has passed.
func (n *Node) collect(ctx context.Context, table string, batch []batchMsg) []batchMsg {
	n.mu.Lock()
	st := n.tables[table]
	from, wait := st.resultsFrom, n.cfg.Now().Before(st.rereadAt)
	n.mu.Unlock()
	if wait {
		return batch
	}
	now := n.cfg.Now()
	for range 32 {
		m, err := n.q.nextResult(ctx, table, from)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("read results", "table", table, "err", err)
			}
			break
		}
		if m == nil {
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
		log := n.log.With("table", table, "task_id", res.Task.Key, "kind", res.Task.Kind, "worker", res.Worker)
		n.mu.Lock()
		delete(st.inflight, res.Task.Key)
		if outcome == OutcomeStale.String() {
			st.dirty = true
			n.scheduleLocked(st)
		}
		n.mu.Unlock()
		if outcome != OutcomeDone.String() {
			log.Info("task result", "outcome", outcome, "err", m.Header.Get(hdrError))
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
	n.mu.Unlock()
	return batch
}

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
}

// maybeCommit commits the batch when it is full, when nothing else of the
// table is outstanding, or when its oldest result waited CommitMaxWait.
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
	n.mu.Unlock()
	oldest := batch[0].seen
	if len(batch) < size && !quiet && n.cfg.Now().Sub(oldest) < n.cfg.CommitMaxWait {
		return batch
	}
	take := batch[:min(size, len(batch))]
	rest := batch[len(take):]
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
		for _, b := range take {
			n.settle(ctx, table, b.seq)
		}
		n.mu.Lock()
		if rep.Replan {
			st.dirty = true
			n.scheduleLocked(st)
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
			st.dirty = true
			n.scheduleLocked(st)
			n.mu.Unlock()
		} else {
			n.m.commitConflict.WithLabelValues("abandoned").Inc()
		}
		if o == OutcomeCorrupt {
			_ = n.hold(ctx, table, err)
		}
		for _, b := range take {
			n.settle(ctx, table, b.seq)
		}
		log.Error("commit abandoned", "outcome", o.String(), "err", err)
		return rest
	}
}
