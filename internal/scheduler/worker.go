package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/internal/engine/progress"
)

// Executor runs one task. It must honour ctx (cancellation means: stop,
// delete what you wrote, return ctx's error) and classify its failures with
// the scheduler's sentinels or through Config.Classify. The returned Result's
// Task and Worker fields are filled in by the scheduler.
type Executor interface {
	Execute(ctx context.Context, t Task) (Result, error)
}

// runWorker pulls and executes tasks one at a time until stop is closed.
// Executions started before stop run on taskBase, which the node cancels
// with errShutdown once the drain deadline passes.
func (n *Node) runWorker(stop <-chan struct{}, taskBase context.Context) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		batch, err := n.q.workers.Fetch(1, jetstream.FetchMaxWait(n.cfg.FetchWait))
		if err != nil {
			n.log.Warn("fetch task", "err", err)
			select {
			case <-stop:
				return
			case <-time.After(n.cfg.FetchWait):
			}
			continue
		}
		for m := range batch.Messages() {
			select {
			case <-stop:
				// Fetched after the drain began: hand it straight back.
				_ = m.Nak()
				continue
			default:
			}
			n.handle(taskBase, m)
		}
	}
}

// handle executes one delivered task and answers it with exactly one verb.
func (n *Node) handle(base context.Context, m jetstream.Msg) {
	var attempt, seq uint64 = 1, 0
	if meta, err := m.Metadata(); err == nil {
		attempt, seq = meta.NumDelivered, meta.Sequence.Stream
	}
	t, err := taskFromHeaders(m.Headers(), m.Data())
	if err != nil {
		n.m.tasks.WithLabelValues("unknown", OutcomeAbandoned.String()).Inc()
		n.log.Error("drop task", "subject", m.Subject(), "attempt", attempt, "err", err)
		_ = m.TermWithReason("invalid envelope")
		return
	}
	log := n.log.With("table", t.Table, "task_id", t.Key, "kind", t.Kind, "read_version", t.ReadVersion, "attempt", attempt)

	if held, _ := n.isHeld(base, t.Table); held {
		n.m.tasks.WithLabelValues(t.Kind, OutcomeAbandoned.String()).Inc()
		log.Warn("skip task of held table")
		n.finish(base, t, seq, Result{}, OutcomeAbandoned, errTableHeld)
		_ = m.TermWithReason("table held")
		return
	}

	ctx, cancel := context.WithCancelCause(base)
	ctx, cancelTimeout := context.WithTimeout(ctx, n.cfg.TaskTimeout)
	prog := n.running.add(t)
	defer n.running.remove(t.Key)
	ctx = progress.With(ctx, prog)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(n.cfg.AckWait / 3)
		defer tick.Stop()
		logTick := time.NewTicker(n.cfg.ProgressEvery)
		defer logTick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := m.InProgress(); err != nil {
					cancel(fmt.Errorf("heartbeat: %w", err))
					return
				}
			case <-logTick.C:
				s := prog.Snapshot()
				log.Info("task in progress", append([]any{"duration", s.Elapsed.Round(time.Second)}, progressAttrs(s)...)...)
			}
		}
	}()

	n.m.tasksInFlight.Inc()
	start := time.Now()
	log.Info("task started")
	res, err := n.exec.Execute(ctx, t)
	dur := time.Since(start)
	if err != nil {
		// Let disposition see why the context ended, whatever the executor
		// wrapped: a drain must read as shutdown, not as a failure.
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
	}
	cancelTimeout()
	cancel(nil)
	<-hbDone
	n.m.tasksInFlight.Dec()
	n.m.taskDuration.WithLabelValues(t.Kind).Observe(dur.Seconds())

	o := disposition(err, n.cfg.Classify)
	if o == OutcomeDone {
		n.m.bytes.WithLabelValues("read").Add(float64(res.BytesRead))
		n.m.bytes.WithLabelValues("written").Add(float64(res.BytesWritten))
	}
	if final(o) {
		// The result goes out before the ack: a crash in between redelivers
		// the task message, and the duplicate result is dropped by its
		// message id (the key and the task message's stream sequence).
		if perr := n.finish(base, t, seq, res, o, err); perr != nil {
			log.Error("publish result", "err", perr)
			o = OutcomeRetried
		}
	}
	if o == OutcomeCorrupt {
		if herr := n.hold(base, t.Table, err); herr != nil {
			log.Error("hold table", "err", herr)
		}
	}
	delay := backoff(attempt, n.cfg.RetryBase, n.cfg.RetryMax)
	if aerr := respond(m, o, delay); aerr != nil {
		log.Warn("answer task message", "outcome", o.String(), "err", aerr)
	}
	n.m.tasks.WithLabelValues(t.Kind, o.String()).Inc()
	switch o {
	case OutcomeDone:
		log.Info("task done", "duration", dur, "fragments_before", res.FragmentsBefore, "fragments_after", res.FragmentsAfter,
			"rows_before", res.RowsBefore, "rows_after", res.RowsAfter, "bytes_before", res.BytesRead, "bytes_after", res.BytesWritten)
	case OutcomeShutdown:
		log.Info("task handed back", "duration", dur, "err", err)
	case OutcomeRetried:
		log.Warn("task failed, retrying", "duration", dur, "retry_in", delay, "err", err)
	default:
		log.Error("task ended", "outcome", o.String(), "duration", dur, "err", err)
	}
}

// final reports whether an outcome ends the task (a result goes to the
// coordinator) rather than handing it back to the queue.
func final(o Outcome) bool {
	return o != OutcomeRetried && o != OutcomeShutdown
}

// finish publishes the task's final result to its table's coordinator.
// Its message id names the task message (seq, its stream sequence), so a
// redelivery of that message publishes the result once, while another
// copy of the task (queued again after this one ended) gets its own.
func (n *Node) finish(ctx context.Context, t Task, seq uint64, res Result, o Outcome, err error) error {
	res.Task = Task{Kind: t.Kind, Key: t.Key, Table: t.Table, ReadVersion: t.ReadVersion}
	res.Worker, res.taskSeq = n.cfg.NodeID, seq
	msg := resultMsg(res)
	msg.Header.Set(hdrOutcome, o.String())
	if err != nil {
		msg.Header.Set(hdrError, strings.ToValidUTF8(err.Error(), "?"))
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	id := "result:" + t.Key + ":" + strconv.FormatUint(seq, 10)
	_, perr := n.q.js.PublishMsg(pctx, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(ResultsStream))
	return perr
}

// taskLogger is used where no message is at hand.
func taskLogger(l *slog.Logger, t Task) *slog.Logger {
	return l.With("table", t.Table, "task_id", t.Key, "kind", t.Kind)
}
