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
	if q.tasks, err = createStream(ctx, js, cfg, jetstream.StreamConfig{
		Name:        TasksStream,
		Description: "lanced maintenance tasks (work queue, deduplicated by task key)",
		Subjects:    []string{taskSubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, err
	}
	if q.results, err = createStream(ctx, js, cfg, jetstream.StreamConfig{
		Name:        ResultsStream,
		Description: "lanced task results, one subject per table, read and removed by the table's coordinator",
		Subjects:    []string{resultSubjectPrefix + "*"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, err
	}
	if q.dead, err = createStream(ctx, js, cfg, jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "lanced tasks that exhausted their deliveries",
		Subjects:    []string{deadSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.DeadLetterMaxAge,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, err
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
	if q.leases, err = createKV(ctx, js, cfg, LeaseBucket, "lanced table coordinator leases"); err != nil {
		return nil, err
	}
	if q.holds, err = createKV(ctx, js, cfg, HoldBucket, "lanced tables held after corruption"); err != nil {
		return nil, err
	}
	return q, nil
}

// createStream creates or updates the stream sc (file storage, cfg's
// replicas) with setupStep's retries.
func createStream(ctx context.Context, js jetstream.JetStream, cfg *Config, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	sc.Storage, sc.Replicas = jetstream.FileStorage, cfg.Replicas
	var st jetstream.Stream
	if err := setupStep(ctx, cfg, "stream "+sc.Name, func(ctx context.Context) (err error) {
		st, err = js.CreateOrUpdateStream(ctx, sc)
		return err
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", sc.Name, err)
	}
	return st, nil
}

// createKV creates or updates the key-value bucket name (one revision per
// key, file storage, cfg's replicas) with setupStep's retries.
func createKV(ctx context.Context, js jetstream.JetStream, cfg *Config, name, description string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	if err := setupStep(ctx, cfg, "kv "+name, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: description, History: 1,
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create kv %s: %w", name, err)
	}
	return kv, nil
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

// attemptID is the Nats-Msg-Id of a task's publication. A task's first
// attempt is published under its key, so planning the same task twice
// (a plan repeated, a coordinator retrying a publish after a timeout, two
// coordinators racing at a lease takeover) enqueues it once inside the
// duplicate window. A task whose attempt ended without being committed
// and is planned again is a new attempt, named after the copy it
// replaces: key#<that copy's task stream sequence>. Every node that knows
// of the ended copy (its coordinator, a node taking the range over from
// the lease record) derives the same id, so the new attempt is queued
// once too; after is 0 for a first attempt.
func attemptID(key string, after uint64) string {
	if after == 0 {
		return key
	}
	return key + "#" + strconv.FormatUint(after, 10)
}

// publish enqueues one task (see publishAll).
func (q *queue) publish(ctx context.Context, t Task, after uint64) (duplicate bool, err error) {
	r := q.publishAll(ctx, []Task{t}, []uint64{after})[0]
	return r.duplicate, r.err
}

// publishAll enqueues tasks without waiting for each acknowledgement in
// turn: all are sent, then every acknowledgement is awaited (result i is
// task i's). Task i is published under attemptID(key, after[i]); a
// publication JetStream already had inside the duplicate window is
// reported as duplicate: the same attempt is queued, running or done.
// after may be nil (first attempts).
func (q *queue) publishAll(ctx context.Context, tasks []Task, after []uint64) []published {
	out := make([]published, len(tasks))
	futures := make([]jetstream.PubAckFuture, len(tasks))
	for i, t := range tasks {
		if err := t.validate(); err != nil {
			out[i].err = err
			continue
		}
		var prev uint64
		if i < len(after) {
			prev = after[i]
		}
		f, err := q.js.PublishMsgAsync(taskMsg(t), jetstream.WithMsgID(attemptID(t.Key, prev)), jetstream.WithExpectStream(TasksStream))
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
		case err := <-f.Err():
			out[i].err = fmt.Errorf("publish task %s: %w", tasks[i].Key, err)
		case <-ctx.Done():
			out[i].err = fmt.Errorf("publish task %s: %w", tasks[i].Key, ctx.Err())
		}
	}
	return out
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
