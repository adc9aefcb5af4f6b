package scheduler

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// collect fetches the table's results for a short while, keeps successful
// ones for the next commit and settles the others.
func (n *Node) collect(ctx context.Context, cons jetstream.Consumer, table string, batch []batchMsg) []batchMsg {
	msgs, err := cons.Fetch(32, jetstream.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		n.log.Warn("fetch results", "table", table, "err", err)
		return batch
	}
	now := n.cfg.Now()
	for m := range msgs.Messages() {
		res, err := resultFromMsg(m.Headers(), m.Data())
		if err != nil {
			n.log.Error("drop result", "table", table, "err", err)
			_ = m.Term()
			continue
		}
		outcome := m.Headers().Get(hdrOutcome)
		log := n.log.With("table", table, "task_id", res.Task.Key, "kind", res.Task.Kind, "worker", res.Worker)
		n.mu.Lock()
		st := n.tables[table]
		delete(st.inflight, res.Task.Key)
		if outcome == OutcomeStale.String() {
			st.dirty = true
		}
		n.mu.Unlock()
		if outcome != OutcomeDone.String() {
			log.Info("task result", "outcome", outcome, "err", m.Headers().Get(hdrError))
			_ = m.Ack()
			continue
		}
		dup := false
		for _, b := range batch {
			if b.res.Task.Key == res.Task.Key {
				dup = true
			}
		}
		if dup {
			_ = m.Ack()
			continue
		}
		batch = append(batch, batchMsg{res: res, msg: m, seen: now})
	}
	// Keep waiting results from being redelivered while the batch fills.
	for _, b := range batch {
		if now.Sub(b.seen) > 5*time.Second {
			_ = b.msg.InProgress()
		}
	}
	return batch
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
			_ = b.msg.Ack()
		}
		n.mu.Lock()
		if rep.Replan {
			st.dirty = true
		}
		st.maintained = max(st.maintained, rep.Version)
		st.latest = max(st.latest, rep.Version)
		n.m.lag.WithLabelValues(table).Set(float64(st.latest - min(st.latest, st.maintained)))
		n.mu.Unlock()
		log.Info("batch committed", "version", rep.Version, "rebased", rep.Rebased, "duration", time.Since(start))
		return rest
	case OutcomeRetried:
		delay := backoff(2, n.cfg.RetryBase, n.cfg.RetryMax)
		for _, b := range take {
			_ = b.msg.NakWithDelay(delay)
		}
		log.Warn("commit failed, retrying", "retry_in", delay, "err", err)
		return rest
	case OutcomeShutdown:
		for _, b := range take {
			_ = b.msg.Nak()
		}
		return rest
	default:
		if o == OutcomeStale {
			n.m.commitConflict.WithLabelValues("stale").Inc()
			n.mu.Lock()
			st.dirty = true
			n.mu.Unlock()
		} else {
			n.m.commitConflict.WithLabelValues("abandoned").Inc()
		}
		if o == OutcomeCorrupt {
			_ = n.hold(ctx, table, err)
		}
		for _, b := range take {
			_ = b.msg.Ack()
		}
		log.Error("commit abandoned", "outcome", o.String(), "err", err)
		return rest
	}
}
