package watch

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/lanced-dev/lanced/internal/format"
)

// Sink receives one table version. Sources call it once per announced
// version and acknowledge the message that carried it only after it
// returned nil; a non-nil error means "not handed on" and the message is
// redelivered where the transport allows it.
type Sink func(ctx context.Context, ref format.VersionRef) error

// Source produces table versions until ctx is done. Run returns nil (or
// ctx's error) on cancellation and a non-nil error only when the source
// cannot continue (it cannot open its subscription, say).
type Source interface {
	Run(ctx context.Context, sink Sink) error
}

// Options are the parts every source shares.
type Options struct {
	// Roots is the allow-list. Required: a source without roots drops
	// every event.
	Roots *Roots
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Metrics receives counts; nil counts into unregistered metrics.
	Metrics *Metrics
}

func (o Options) withDefaults() Options {
	if o.Roots == nil {
		o.Roots = NewRoots()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Metrics = orNewMetrics(o.Metrics)
	return o
}

// handler turns one transport message into sink calls; the message
// sources share it.
type handler struct {
	opts   Options
	source string // metric label: pubsub, nats, jetstream
}

// handle decodes one message and hands every version it names to sink.
// It returns nil when the message should be acknowledged (handled, or
// undecodable: logged, counted, never redelivered forever) and the sink's
// error when it should be redelivered.
func (h *handler) handle(ctx context.Context, body []byte, attrs map[string]string, sink Sink) error {
	m, log := h.opts.Metrics, h.opts.Logger
	evs, err := Decode(body, attrs)
	if err != nil {
		m.messages.WithLabelValues(h.source, "undecodable").Inc()
		log.Warn("undecodable event message", "source", h.source, "bytes", len(body), "err", err)
		return nil
	}
	for _, ev := range evs {
		ref, err := h.opts.Roots.Ref(ev)
		if err != nil {
			reason := DropReason(err)
			m.dropped.WithLabelValues(reason).Inc()
			if errors.Is(err, ErrUnsafeKey) || errors.Is(err, ErrOutsideRoots) {
				log.Warn("event rejected", "source", h.source, "reason", reason, "err", err)
			} else {
				log.Debug("event ignored", "source", h.source, "reason", reason, "err", err)
			}
			continue
		}
		if err := sink(ctx, ref); err != nil {
			m.messages.WithLabelValues(h.source, "sink_error").Inc()
			return err
		}
		m.refs.WithLabelValues(h.source).Inc()
	}
	m.messages.WithLabelValues(h.source, "handled").Inc()
	return nil
}
