package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes one scheduler node. Zero values take the defaults listed on
// each field (applied by New).
type Config struct {
	// NodeID names this node in leases and results. Default: a random id.
	// It must differ between processes sharing one NATS.
	NodeID string
	// Workers is how many tasks this node executes at once. Default 2.
	Workers int
	// AckWait is how long a task may go without a heartbeat before it is
	// redelivered. Workers heartbeat every AckWait/3. Default 60s.
	AckWait time.Duration
	// MaxDeliver bounds deliveries per task; then it goes to LANCED_DEAD.
	// Default 5.
	MaxDeliver int
	// BackOff are the redelivery delays after an unacknowledged delivery
	// (a dead worker). Every entry must be at least AckWait. Default:
	// AckWait, 2·AckWait, 4·AckWait.
	BackOff []time.Duration
	// RetryBase and RetryMax bound NakWithDelay for transient failures:
	// RetryBase·2^(attempt-1), at most RetryMax. Defaults 2s and 5m.
	RetryBase, RetryMax time.Duration
	// TaskTimeout cuts a single execution short (the task is retried).
	// Default 6h.
	TaskTimeout time.Duration
	// DrainTimeout is how long in-flight tasks may run after shutdown
	// begins before they are cancelled and handed back. Default 30s.
	DrainTimeout time.Duration
	// LeaseTTL is the coordinator lease's lifetime; it is renewed every
	// LeaseTTL/3. Default 30s.
	LeaseTTL time.Duration
	// LeaseLinger is how long an idle table's coordinator stays (its
	// range's lease renewed) before it stops, so the table's next burst of
	// versions is planned at once; a range's lease is released when its
	// last coordinator stopped. Default LeaseTTL/2.
	LeaseLinger time.Duration
	// KeepHomeRanges makes the node take the lease ranges whose first
	// turn is its own (its home ranges) while it runs and keep them while
	// none of their tables is coordinated, so a table idle for longer
	// than LeaseLinger, or never seen, is planned without a lease write
	// (see homeranges.go). Off, a range is taken when one of its tables
	// is announced and released when its last coordinator stops.
	KeepHomeRanges bool
	// Planners is how many tables this node plans at once (plans read the
	// table's manifest from the object store). Default 16.
	Planners int
	// TableInFlight caps one table's tasks in the queue or running. Default 4.
	TableInFlight int
	// MaxQueueDepth stops this node's coordinators from enqueueing while the
	// work queue holds at least this many messages. Default 1000.
	MaxQueueDepth int
	// CommitBatchTasks is the micro-batch size when the Planner does not set
	// one. Default 8.
	CommitBatchTasks int
	// CommitMaxWait commits a partial batch once its oldest result waited
	// this long. Default 10s.
	CommitMaxWait time.Duration
	// FetchWait is how long a worker's pull request waits for a message.
	// Default 1s.
	FetchWait time.Duration
	// DedupWindow is the streams' Nats-Msg-Id window. Default 10m.
	DedupWindow time.Duration
	// DeadLetterMaxAge is how long LANCED_DEAD keeps messages. Default 14 days.
	DeadLetterMaxAge time.Duration
	// Holds, when set, keeps holds as table state: the truth every entry
	// point (this scheduler, the one-shot commands, the status page) reads
	// and that `lanced holds release` clears. The LANCED_HOLDS bucket is
	// then the nodes' shared index of held tables, reconciled with it.
	Holds HoldStore
	// Replicas for streams and buckets (1 on a single server, 3 on a
	// three-node cluster). Default 1.
	Replicas int
	// SetupTimeout bounds how long New keeps retrying stream and bucket
	// creation while the JetStream cluster is not ready. Default 2m.
	SetupTimeout time.Duration
	// Classify maps other packages' errors onto outcomes (store codes,
	// engine and format sentinels). Optional.
	Classify Classifier

	// ProgressEvery is how often a running task logs "task in progress"
	// with its rows and bytes done, totals and ETA. Default 30s.
	ProgressEvery time.Duration

	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock for leases. Default time.Now.
	Now func() time.Time
}

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("invalid scheduler config")

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	defInt(&c.Workers, 2)
	def(&c.AckWait, 60*time.Second)
	defInt(&c.MaxDeliver, 5)
	if c.BackOff == nil {
		c.BackOff = []time.Duration{c.AckWait, 2 * c.AckWait, 4 * c.AckWait}
	}
	def(&c.RetryBase, 2*time.Second)
	def(&c.RetryMax, 5*time.Minute)
	def(&c.TaskTimeout, 6*time.Hour)
	def(&c.ProgressEvery, 30*time.Second)
	def(&c.DrainTimeout, 30*time.Second)
	def(&c.LeaseTTL, 30*time.Second)
	def(&c.LeaseLinger, c.LeaseTTL/2)
	defInt(&c.Planners, 16)
	defInt(&c.TableInFlight, 4)
	defInt(&c.MaxQueueDepth, 1000)
	defInt(&c.CommitBatchTasks, 8)
	def(&c.CommitMaxWait, 10*time.Second)
	def(&c.FetchWait, time.Second)
	def(&c.DedupWindow, 10*time.Minute)
	def(&c.DeadLetterMaxAge, 14*24*time.Hour)
	defInt(&c.Replicas, 1)
	def(&c.SetupTimeout, 2*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate checks a Config after defaults were applied.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Workers < 0:
		return bad("workers %d < 0", c.Workers)
	case c.Planners < 1:
		return bad("planners %d < 1", c.Planners)
	case c.MaxDeliver < 1:
		return bad("max_deliver %d < 1", c.MaxDeliver)
	case len(c.BackOff) > c.MaxDeliver:
		return bad("%d backoff entries for max_deliver %d", len(c.BackOff), c.MaxDeliver)
	case c.AckWait < 100*time.Millisecond:
		return bad("ack_wait %s too short", c.AckWait)
	case c.LeaseTTL < 300*time.Millisecond:
		return bad("lease_ttl %s too short", c.LeaseTTL)
	case c.TableInFlight < 1 || c.MaxQueueDepth < 1 || c.CommitBatchTasks < 1:
		return bad("table_in_flight, max_queue_depth and commit_batch_tasks must be positive")
	}
	for _, b := range c.BackOff {
		if b < c.AckWait {
			return bad("backoff %s below ack_wait %s: heartbeats would not keep long tasks", b, c.AckWait)
		}
	}
	return nil
}
