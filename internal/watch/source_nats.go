package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSConfig configures a NATSSource.
type NATSConfig struct {
	// Subject carries the events (S3 event JSON, SNS or EventBridge
	// envelopes, or GCS notifications with their attributes as headers).
	// Wildcards are allowed. Required.
	Subject string
	// Stream, when set, makes the source read through JetStream: a durable
	// pull consumer on Stream, filtered to Subject, acknowledged only after
	// the sink returned nil. The stream is created (file storage, limits
	// retention, MaxAge 24h) if it does not exist. When empty the source
	// is a core NATS subscription: at-most-once, so keep a poll source
	// running next to it.
	Stream string
	// Durable names the JetStream consumer (default "lanced-watch").
	// Daemons sharing it split the events between them.
	Durable string
	// Queue is the core NATS queue group (core mode only).
	Queue string
	// AckWait is the JetStream consumer's ack wait (default 30s).
	AckWait time.Duration
	// MaxDeliver bounds redeliveries of a message whose sink keeps failing
	// (default 20).
	MaxDeliver int
}

// NATSSource reads events from a NATS subject. This package is the one
// place outside internal/scheduler that imports nats.go.
type NATSSource struct {
	nc  *nats.Conn
	cfg NATSConfig
	h   handler
}

// NewNATSSource returns a source reading cfg.Subject on nc. The caller owns
// nc (an in-process connection to the embedded server, or one to an
// external cluster) and closes it after Run returned.
func NewNATSSource(nc *nats.Conn, cfg NATSConfig, opts Options) (*NATSSource, error) {
	if nc == nil {
		return nil, errors.New("nats source: no connection")
	}
	if cfg.Subject == "" {
		return nil, errors.New("nats source: no subject")
	}
	if cfg.Durable == "" {
		cfg.Durable = "lanced-watch"
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 20
	}
	src := "nats"
	if cfg.Stream != "" {
		src = "jetstream"
	}
	return &NATSSource{nc: nc, cfg: cfg, h: handler{opts: opts.withDefaults(), source: src}}, nil
}

// Run consumes until ctx is done.
func (s *NATSSource) Run(ctx context.Context, sink Sink) error {
	if s.cfg.Stream != "" {
		return s.runJetStream(ctx, sink)
	}
	return s.runCore(ctx, sink)
}

func headerAttrs(h nats.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	attrs := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			attrs[k] = v[0]
		}
	}
	return attrs
}

func (s *NATSSource) runCore(ctx context.Context, sink Sink) error {
	var (
		sub *nats.Subscription
		err error
	)
	if s.cfg.Queue != "" {
		sub, err = s.nc.QueueSubscribeSync(s.cfg.Subject, s.cfg.Queue)
	} else {
		sub, err = s.nc.SubscribeSync(s.cfg.Subject)
	}
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", s.cfg.Subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A burst larger than the default pending limit would be dropped by
	// the client as a slow consumer; allow a deep buffer instead.
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		return fmt.Errorf("set pending limits on %s: %w", s.cfg.Subject, err)
	}
	log := s.h.opts.Logger
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receive from %s: %w", s.cfg.Subject, err)
		}
		if herr := s.h.handle(ctx, msg.Data, headerAttrs(msg.Header), sink); herr != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Core NATS cannot redeliver: the poll source catches up.
			log.Warn("event not handed on; lost until the next poll sweep", "source", "nats", "err", herr)
		}
	}
}

func (s *NATSSource) runJetStream(ctx context.Context, sink Sink) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.Stream(ctx, s.cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:      s.cfg.Stream,
			Subjects:  []string{s.cfg.Subject},
			Storage:   jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy,
			MaxAge:    24 * time.Hour,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", s.cfg.Stream, err)
		}
	} else if err != nil {
		return fmt.Errorf("look up stream %s: %w", s.cfg.Stream, err)
	}
	log := s.h.opts.Logger
	backoff := time.Second
	first := true
	for {
		err := s.consume(ctx, js, sink)
		if ctx.Err() != nil {
			return nil
		}
		if first && err != nil && !errors.Is(err, errConsumeBroken) {
			return err // the consumer could not be set up at all
		}
		first = false
		s.h.opts.Metrics.restarts.WithLabelValues("jetstream").Inc()
		log.Warn("jetstream consumer failed; recreating", "source", "jetstream", "stream", s.cfg.Stream, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// errConsumeBroken marks a consumer that worked and then failed.
var errConsumeBroken = errors.New("consumer stopped")

// consume sets up the durable consumer and handles messages until ctx is
// done or the iterator fails.
func (s *NATSSource) consume(ctx context.Context, js jetstream.JetStream, sink Sink) error {
	cons, err := js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		FilterSubject: s.cfg.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    s.cfg.MaxDeliver,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s on stream %s: %w", s.cfg.Durable, s.cfg.Stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("consume %s: %w", s.cfg.Stream, err)
	}
	defer it.Stop()
	log := s.h.opts.Logger
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				continue // the iterator re-pulls by itself (server restart, slow link)
			}
			return fmt.Errorf("receive from stream %s: %w: %w", s.cfg.Stream, errConsumeBroken, err)
		}
		if herr := s.h.handle(ctx, msg.Data(), headerAttrs(msg.Headers()), sink); herr != nil {
			if ctx.Err() != nil {
				_ = msg.Nak()
				return nil
			}
			log.Warn("event not handed on; will be redelivered", "source", "jetstream", "err", herr)
			if err := msg.NakWithDelay(time.Second); err != nil {
				log.Warn("nak event", "source", "jetstream", "err", err)
			}
			continue
		}
		if err := msg.Ack(); err != nil {
			log.Warn("ack event", "source", "jetstream", "err", err)
		}
	}
}
