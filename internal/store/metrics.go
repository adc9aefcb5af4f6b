package store

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	ops      *prometheus.CounterVec
	failures *prometheus.CounterVec
	retries  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// Instrument returns b with Prometheus metrics registered on reg:
// lanced_store_operations_total{op}, lanced_store_operation_failures_total{op,code}
// lanced_store_retries_total{op,code} (tries repeated after a transient
// failure, by the failure's code) and
// lanced_store_operation_duration_seconds{op}. The result shares b's
// connection and takes over closing it; Subs of it are instrumented too.
// A not-found on get/attributes/delete counts as a failure with code
// not_found (callers probing for existence should expect those).
func Instrument(b *Bucket, reg prometheus.Registerer) (*Bucket, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_store_operations_total",
			Help: "Object store operations, by operation.",
		}, []string{"op"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_store_operation_failures_total",
			Help: "Failed object store operations, by operation and error code.",
		}, []string{"op", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lanced_store_retries_total",
			Help: "Object store tries repeated after a transient failure (throttled, unavailable, short read), by operation and the failure's code.",
		}, []string{"op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lanced_store_operation_duration_seconds",
			Help:    "Object store operation latency.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 20},
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.failures, m.retries, m.duration} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			switch existing := are.ExistingCollector.(type) {
			case *prometheus.CounterVec:
				switch c {
				case m.ops:
					m.ops = existing
				case m.failures:
					m.failures = existing
				default:
					m.retries = existing
				}
			case *prometheus.HistogramVec:
				m.duration = existing
			}
		}
	}
	c := *b
	c.metrics = m
	b.owner = false
	return &c, nil
}

func (m *metrics) observe(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.ops.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.failures.WithLabelValues(op, CodeOf(err).String()).Inc()
	}
}

func (m *metrics) retried(op, code string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(op, code).Inc()
}

// WithFaults returns b with fn consulted before every operation (op is
// "get", "get_range", "open_reader_at", "attributes", "list", "list_dir",
// "put", "new_writer", "put_if_absent" or "delete"; key is relative to b). A
// non-nil error from fn fails the operation with that error (classified by
// CodeOf) before any I/O. For tests: error injection, crash simulation. The
// result shares b's connection; close b.
func WithFaults(b *Bucket, fn func(op, key string) error) *Bucket {
	c := *b
	c.owner = false
	prev := b.fault
	c.fault = func(op, key string) error {
		if prev != nil {
			if err := prev(op, key); err != nil {
				return err
			}
		}
		return fn(op, key)
	}
	return &c
}
