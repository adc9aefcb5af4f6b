package watch

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the watch subsystem's Prometheus metrics. Create one per
// process with NewMetrics and share it between sources and the coalescer
// (registering twice on one registerer fails).
type Metrics struct {
	messages      *prometheus.CounterVec // source, outcome
	dropped       *prometheus.CounterVec // reason
	refs          *prometheus.CounterVec // source
	sweeps        *prometheus.CounterVec // outcome
	restarts      *prometheus.CounterVec // source
	coalesced     prometheus.Counter
	evaluations   prometheus.Counter
	pendingTables prometheus.Gauge
	busyTables    prometheus.Gauge
}

// NewMetrics registers the watch metrics on reg. A nil reg gives working,
// unregistered metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		messages: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_watch_messages_total",
			Help: "Event messages received, by source kind and outcome (handled, undecodable, sink_error).",
		}, []string{"source", "outcome"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_watch_events_dropped_total",
			Help: "Object events that did not name a table version, by reason.",
		}, []string{"reason"}),
		refs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_watch_refs_total",
			Help: "Table versions handed to the sink, by source kind.",
		}, []string{"source"}),
		sweeps: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_watch_poll_sweeps_total",
			Help: "Poll sweeps over one root, by outcome (ok, error).",
		}, []string{"outcome"}),
		restarts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_watch_source_restarts_total",
			Help: "Times a source's subscription failed and was reopened, by source kind.",
		}, []string{"source"}),
		coalesced: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_watch_coalescer_events_total",
			Help: "Table versions received by the coalescer.",
		}),
		evaluations: f.NewCounter(prometheus.CounterOpts{
			Name: "lanced_watch_coalescer_evaluations_total",
			Help: "Table evaluations emitted by the coalescer.",
		}),
		pendingTables: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_watch_coalescer_pending_tables",
			Help: "Tables with events waiting for their debounce window.",
		}),
		busyTables: f.NewGauge(prometheus.GaugeOpts{
			Name: "lanced_watch_coalescer_busy_tables",
			Help: "Tables emitted and not yet reported done.",
		}),
	}
}

func orNewMetrics(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
