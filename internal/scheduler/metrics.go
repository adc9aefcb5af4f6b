package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the scheduler's Prometheus series, registered on the
// Registerer given in Config (never the global one).
type metrics struct {
	tasks          *prometheus.CounterVec   // kind, outcome
	taskDuration   *prometheus.HistogramVec // kind
	tasksInFlight  prometheus.Gauge
	enqueued       *prometheus.CounterVec // kind, result=queued|duplicate
	queueDepth     prometheus.Gauge
	pending        prometheus.Gauge
	bytes          *prometheus.CounterVec // direction
	commits        *prometheus.CounterVec // outcome
	commitConflict *prometheus.CounterVec // outcome
	commitBatch    prometheus.Histogram
	filesRemoved   prometheus.Counter
	deadLetters    prometheus.Counter
	leasesHeld     prometheus.Gauge
	leaseLost      prometheus.Counter
	handOffs       prometheus.Counter
	held           *prometheus.GaugeVec // table
	lag            *prometheus.GaugeVec // table
	plans          *prometheus.CounterVec
}

// newMetrics registers the scheduler's metrics on reg. With tableHolds
// (Config.Holds set) lanced_table_held is left to whoever reads the holds
// from table state (the status collector) and kept unregistered here.
func newMetrics(reg prometheus.Registerer, tableHolds bool) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	heldFactory := f
	if tableHolds {
		heldFactory = promauto.With(nil)
	}
	m := &metrics{
		tasks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_scheduler_tasks_total",
			Help: "Task executions by kind and outcome (done, stale, retried, abandoned, corrupt, shutdown).",
		}, []string{"kind", "outcome"}),
		taskDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lanced_scheduler_task_duration_seconds",
			Help:    "Wall time of task executions by kind.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"kind"}),
		tasksInFlight: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_scheduler_tasks_in_flight",
			Help: "Tasks this node's workers are executing.",
		}),
		enqueued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_scheduler_enqueued_total",
			Help: "Tasks published to the queue by kind; result=duplicate when JetStream deduplicated the key.",
		}, []string{"kind", "result"}),
		queueDepth: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_scheduler_queue_depth",
			Help: "Messages in the LANCED_TASKS work queue (waiting or unacknowledged).",
		}),
		pending: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_scheduler_pending_tasks",
			Help: "Planned tasks this node's coordinators hold back for fairness or backpressure.",
		}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_scheduler_task_bytes_total",
			Help: "Bytes read and written by executed tasks.",
		}, []string{"direction"}),
		commits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_scheduler_commits_total",
			Help: "Micro-batch commits by outcome.",
		}, []string{"outcome"}),
		commitConflict: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_commit_conflicts_total",
			Help: "Commit conflicts by outcome (rebased, stale, abandoned).",
		}, []string{"outcome"}),
		commitBatch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "lanced_scheduler_commit_batch_tasks",
			Help:    "Task results per micro-batch commit.",
			Buckets: prometheus.LinearBuckets(1, 4, 8),
		}),
		filesRemoved: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_scheduler_files_removed_total",
			Help: "Files removed by commits (failed outputs, superseded files).",
		}),
		deadLetters: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_scheduler_dead_letters_total",
			Help: "Tasks moved to LANCED_DEAD after exhausting their deliveries.",
		}),
		leasesHeld: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_scheduler_leases_held",
			Help: "Coordinator lease ranges this node holds (each covers the tables whose id hashes into it).",
		}),
		leaseLost: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_scheduler_leases_lost_total",
			Help: "Leases this node lost before releasing them (renewal failed or expired).",
		}),
		handOffs: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_scheduler_ranges_handed_off_total",
			Help: "Lease ranges this node handed to a less loaded node (rebalancing).",
		}),
		held: heldFactory.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lanced_table_held",
			Help: "1 while a table is held (after corruption was reported, or by an operator); only held tables appear.",
		}, []string{"table"}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lanced_table_lag_versions",
			Help: "Latest known table version minus the version last maintained, for tables this node coordinates.",
		}, []string{"table"}),
		plans: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_scheduler_plans_total",
			Help: "Table evaluations by result (tasks, empty, held, error).",
		}, []string{"result"}),
	}
	// Every unlabelled-by-table series is exported from the start, at 0.
	for _, o := range []string{"rebased", "stale", "abandoned"} {
		m.commitConflict.WithLabelValues(o)
	}
	for _, o := range []string{"tasks", "empty", "held", "error"} {
		m.plans.WithLabelValues(o)
	}
	return m
}
