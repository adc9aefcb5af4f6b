package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	if q.tasks, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        TasksStream,
		Description: "lanced maintenance tasks (work queue, deduplicated by task key)",
		Subjects:    []string{taskSubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", TasksStream, err)
	}
	if q.results, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        ResultsStream,
		Description: "lanced task results, one subject per table, consumed by the table's coordinator",
		Subjects:    []string{resultSubjectPrefix + "*"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", ResultsStream, err)
	}
	if q.dead, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "lanced tasks that exhausted their deliveries",
		Subjects:    []string{deadSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.DeadLetterMaxAge,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", DeadStream, err)
	}
	if q.workers, err = js.CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
		Durable:       WorkerDurable,
		Description:   "lanced workers on every node",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		BackOff:       cfg.BackOff,
		MaxAckPending: -1,
		FilterSubject: taskSubjectPrefix + ">",
	}); err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", WorkerDurable, err)
	}
	if q.leases, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "lanced table coordinator leases",
		History:     1,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create kv %s: %w", LeaseBucket, err)
	}
	if q.holds, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      HoldBucket,
		Description: "lanced tables held after corruption",
		History:     1,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create kv %s: %w", HoldBucket, err)
	}
	return q, nil
}

// publish enqueues a task; duplicate reports whether JetStream had already
// seen its key inside the dedup window (or still holds it).
func (q *queue) publish(ctx context.Context, t Task) (duplicate bool, err error) {
	if err := t.validate(); err != nil {
		return false, err
	}
	ack, err := q.js.PublishMsg(ctx, taskMsg(t), jetstream.WithMsgID(t.Key), jetstream.WithExpectStream(TasksStream))
	if err != nil {
		return false, fmt.Errorf("publish task %s: %w", t.Key, err)
	}
	return ack.Duplicate, nil
}

// depth is the number of task messages waiting or unacknowledged.
func (q *queue) depth(ctx context.Context) (uint64, error) {
	info, err := q.tasks.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", TasksStream, err)
	}
	return info.State.Msgs, nil
}

// resultConsumer is the table's durable results consumer, created on demand
// by whoever holds the table's lease.
func (q *queue) resultConsumer(ctx context.Context, table string, ackWait time.Duration) (jetstream.Consumer, error) {
	id := TableID(table)
	c, err := q.js.CreateOrUpdateConsumer(ctx, ResultsStream, jetstream.ConsumerConfig{
		Durable:           "results-" + id,
		Description:       "results for " + table,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           ackWait,
		FilterSubject:     resultSubjectPrefix + id,
		InactiveThreshold: 24 * time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("create results consumer for %s: %w", table, err)
	}
	return c, nil
}

func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrMsgNotFound)
}
