package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// queue owns the streams, buckets and the shared worker consumer.
type queue struct {
	js      jetstream.JetStream
	tasks   jetstream.Stream
	results jetstream.Stream
	dead    jetstream.Stream
	workers jetstream.Consumer
	leases  jetstream.KeyValue
	holds   jetstream.KeyValue
}

// setupQueue creates or updates every stream, bucket and the worker
// consumer. It is idempotent: every node runs it at start.
func setupQueue(ctx context.Context, js jetstream.JetStream, cfg *Config) (*queue, error) {
	q := &queue{js: js}
	var err error
	storage := jetstream.FileStorage
	if err = setupStep(ctx, cfg, "stream "+TasksStream, func(ctx context.Context) (err error) {
		q.tasks, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        TasksStream,
			Description: "lanced maintenance tasks (work queue, deduplicated by task key)",
			Subjects:    []string{taskSubjectPrefix + ">"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DedupWindow,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", TasksStream, err)
	}
	if err = setupStep(ctx, cfg, "stream "+ResultsStream, func(ctx context.Context) (err error) {
		q.results, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        ResultsStream,
			Description: "lanced task results, one subject per table, read and removed by the table's coordinator",
			Subjects:    []string{resultSubjectPrefix + "*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DedupWindow,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", ResultsStream, err)
	}
	if err = setupStep(ctx, cfg, "stream "+DeadStream, func(ctx context.Context) (err error) {
		q.dead, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        DeadStream,
			Description: "lanced tasks that exhausted their deliveries",
			Subjects:    []string{deadSubjectPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     storage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.DeadLetterMaxAge,
			Duplicates:  cfg.DedupWindow,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", DeadStream, err)
	}
	if err = setupStep(ctx, cfg, "consumer "+WorkerDurable, func(ctx context.Context) (err error) {
		q.workers, err = js.CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
			Durable:       WorkerDurable,
			Description:   "lanced workers on every node",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    cfg.MaxDeliver,
			BackOff:       cfg.BackOff,
			MaxAckPending: -1,
			FilterSubject: taskSubjectPrefix + ">",
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", WorkerDurable, err)
	}
	if err = setupStep(ctx, cfg, "kv "+LeaseBucket, func(ctx context.Context) (err error) {
		q.leases, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      LeaseBucket,
			Description: "lanced table coordinator leases",
			History:     1,
			Storage:     storage,
			Replicas:    cfg.Replicas,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create kv %s: %w", LeaseBucket, err)
	}
	if err = setupStep(ctx, cfg, "kv "+HoldBucket, func(ctx context.Context) (err error) {
		q.holds, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      HoldBucket,
			Description: "lanced tables held after corruption",
			History:     1,
			Storage:     storage,
			Replicas:    cfg.Replicas,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create kv %s: %w", HoldBucket, err)
	}
	return q, nil
}

// setupStep runs one idempotent setup call, retrying while the JetStream
// cluster cannot answer yet (no meta leader, a stream leader being elected,
// a slow quorum): nodes may start before or together with their NATS
// cluster. Each attempt gets its own deadline; the whole step gives up after
// Config.SetupTimeout or when ctx ends. Other errors (a stream configured
// differently, no permission) are returned at once.
func setupStep(ctx context.Context, cfg *Config, what string, call func(context.Context) error) error {
	deadline := time.Now().Add(cfg.SetupTimeout)
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := call(actx)
		cancel()
		if err == nil || !clusterNotReady(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		cfg.Logger.Warn("jetstream not ready, retrying", "what", what, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// clusterNotReady reports errors that mean "ask again shortly": a request
// that timed out or found no responder, or JetStream answering 503 (cluster
// not available, no leader yet).
func clusterNotReady(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 503
}

type published struct {
	duplicate bool
	err       error
}

// requeue marks a task whose copy ended without being committed: seq is
// that copy's task stream sequence (0 when not known).
type requeue struct {
	ok  bool
	seq uint64
}

// publish enqueues one task; duplicate reports that JetStream had its key
// inside the duplicate window (see publishAll).
func (q *queue) publish(ctx context.Context, t Task, again requeue) (duplicate bool, err error) {
	r := q.publishAll(ctx, []Task{t}, []requeue{again})[0]
	return r.duplicate, r.err
}

// publishAll enqueues tasks without waiting for each acknowledgement in
// turn: all are sent, then every acknowledgement is awaited (result i is
// task i's). A task's message id is its key, so a task planned twice
// inside the duplicate window is enqueued once: duplicate reports that.
// A task with again[i].ok had a copy that ended without being committed
// (failed, given up, dropped at commit); JetStream deduplicating it
// against that copy would drop the work, so it is published again
// (requeueEnded). again may be nil.
func (q *queue) publishAll(ctx context.Context, tasks []Task, again []requeue) []published {
	out := make([]published, len(tasks))
	futures := make([]jetstream.PubAckFuture, len(tasks))
	for i, t := range tasks {
		if err := t.validate(); err != nil {
			out[i].err = err
			continue
		}
		f, err := q.js.PublishMsgAsync(taskMsg(t), jetstream.WithMsgID(t.Key), jetstream.WithExpectStream(TasksStream))
		if err != nil {
			out[i].err = fmt.Errorf("publish task %s: %w", t.Key, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			out[i].duplicate = ack.Duplicate
			if ack.Duplicate && i < len(again) && again[i].ok {
				out[i].duplicate, out[i].err = q.requeueEnded(ctx, tasks[i], ack.Sequence, again[i].seq)
			}
		case err := <-f.Err():
			out[i].err = fmt.Errorf("publish task %s: %w", tasks[i].Key, err)
		case <-ctx.Done():
			out[i].err = fmt.Errorf("publish task %s: %w", tasks[i].Key, ctx.Err())
		}
	}
	return out
}

// maxRequeues bounds the copies of one task requeueEnded walks past: each
// is a copy that ended inside the duplicate window.
const maxRequeues = 32

// requeueEnded publishes again a task whose publication JetStream
// deduplicated against the message at stream sequence seq. ended is the
// sequence of a copy the caller knows ended (its final result was read;
// its ack may still be on its way), 0 if not known. Another copy is
// queued, running or still to be read while its message is in the work
// queue or a result of it is stored: duplicate. Otherwise (a worker
// publishes the result before it acks) t is published with a message id
// naming that copy (key#seq), which every node derives alike, so the
// copies queued again after one ending are deduplicated among
// themselves; a publication meeting such a copy is judged the same way.
func (q *queue) requeueEnded(ctx context.Context, t Task, seq, ended uint64) (duplicate bool, err error) {
	for range maxRequeues {
		if seq == 0 {
			return true, nil // a copy being stored right now
		}
		if seq != ended {
			_, err := q.tasks.GetMsg(ctx, seq)
			switch {
			case err == nil:
				return true, nil
			case !isNotFound(err):
				return false, fmt.Errorf("publish task %s: look up its earlier copy: %w", t.Key, err)
			}
			if waiting, err := q.resultWaiting(ctx, t, seq); err != nil || waiting {
				return waiting, err
			}
		}
		ack, err := q.js.PublishMsg(ctx, taskMsg(t), jetstream.WithMsgID(t.Key+"#"+strconv.FormatUint(seq, 10)), jetstream.WithExpectStream(TasksStream))
		if err != nil {
			return false, fmt.Errorf("publish task %s again: %w", t.Key, err)
		}
		if !ack.Duplicate {
			return false, nil
		}
		seq = ack.Sequence
	}
	return false, fmt.Errorf("publish task %s: %d earlier copies ended inside the duplicate window", t.Key, maxRequeues)
}

// resultWaiting reports whether a result of t's copy at task stream
// sequence seq (or of a copy whose result does not say) is stored under
// its table's results subject.
func (q *queue) resultWaiting(ctx context.Context, t Task, seq uint64) (bool, error) {
	var from uint64
	for {
		m, err := q.nextResult(ctx, t.Table, from)
		if err != nil || m == nil {
			return false, err
		}
		if m.Header.Get(hdrKey) == t.Key {
			if s := m.Header.Get(hdrTaskSeq); s == "" || s == strconv.FormatUint(seq, 10) {
				return true, nil
			}
		}
		from = m.Sequence + 1
	}
}

// depth is the number of task messages waiting or unacknowledged.
func (q *queue) depth(ctx context.Context) (uint64, error) {
	info, err := q.tasks.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", TasksStream, err)
	}
	return info.State.Msgs, nil
}

// nextResult returns the table's first result at or after stream sequence
// seq, or nil when there is none. Results are read by subject straight
// from LANCED_RESULTS (a message get answered by the stream's leader), so
// no consumer exists per table: whoever holds the table's lease reads its
// subject, and a new holder finds everything the old one left.
func (q *queue) nextResult(ctx context.Context, table string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := q.results.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(resultSubjectPrefix+TableID(table)))
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read results of %s: %w", table, err)
	}
	return m, nil
}

// settleResult removes a result the coordinator is done with (committed,
// or finally rejected).
func (q *queue) settleResult(ctx context.Context, seq uint64) error {
	var apiErr *jetstream.APIError
	if err := q.results.DeleteMsg(ctx, seq); err != nil && !isNotFound(err) && !(errors.As(err, &apiErr) && apiErr.Code == 404) {
		return fmt.Errorf("remove result %d: %w", seq, err)
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrMsgNotFound)
}
