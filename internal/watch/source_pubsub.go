package watch

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strings"
	"time"

	"gocloud.dev/gcerrors"
	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/gcppubsub"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	// The drivers a subscription URL may name. They link the AWS and GCP
	// SDKs, but only through Go CDK; this package calls no SDK directly.
	_ "gocloud.dev/pubsub/awssnssqs"
	_ "gocloud.dev/pubsub/mempubsub"
)

// PubSubSource reads a Go CDK subscription: awssqs://… (S3 events sent to
// SQS directly, through SNS, or through EventBridge), gcppubsub://… (GCS
// notifications; endpoint=host:port reads from a Pub/Sub emulator) or
// mem://… (tests). The subscription is opened by URL in
// Run, so credentials come from the environment as Go CDK resolves them.
type PubSubSource struct {
	url  string
	open func(ctx context.Context) (*pubsub.Subscription, error)
	h    handler
	// reopen is false for a subscription opened by the caller.
	reopen bool
	// closeConn releases what open dialled itself (an endpoint= connection).
	closeConn func()
	// useAttrs is false for SQS: its message attributes are not part of
	// an S3 notification, so they may not turn a body into a GCS event.
	useAttrs bool
}

// NewPubSubSource returns a source for the subscription at url.
func NewPubSubSource(url string, opts Options) *PubSubSource {
	s := &PubSubSource{
		url:      url,
		h:        handler{opts: opts.withDefaults(), source: "pubsub"},
		useAttrs: !strings.HasPrefix(url, "awssqs:"),
		reopen:   true,
	}
	s.open = func(ctx context.Context) (*pubsub.Subscription, error) {
		sub, closeConn, err := openSubscription(ctx, url)
		s.closeConn = closeConn
		return sub, err
	}
	return s
}

// openSubscription opens a Go CDK subscription URL. A gcppubsub:// URL may
// carry endpoint=host:port: the subscription is then read from a Pub/Sub
// emulator (or any plaintext Pub/Sub gRPC endpoint) at that address, with
// no credentials; the same as PUBSUB_EMULATOR_HOST, but per source. The
// connection is closed when the subscription shuts down.
func openSubscription(ctx context.Context, rawURL string) (*pubsub.Subscription, func(), error) {
	nop := func() {}
	u, err := neturl.Parse(rawURL)
	if err != nil || u.Scheme != gcppubsub.Scheme || !u.Query().Has("endpoint") {
		sub, err := pubsub.OpenSubscription(ctx, rawURL)
		return sub, nop, err
	}
	q := u.Query()
	ep := q.Get("endpoint")
	if _, _, err := net.SplitHostPort(ep); err != nil {
		return nil, nop, fmt.Errorf("endpoint %q: want host:port of a Pub/Sub emulator", ep)
	}
	q.Del("endpoint")
	u.RawQuery = q.Encode()
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nop, fmt.Errorf("endpoint %q: %w", ep, err)
	}
	sub, err := (&gcppubsub.URLOpener{Conn: conn}).OpenSubscriptionURL(ctx, u)
	if err != nil {
		conn.Close()
		return nil, nop, err
	}
	return sub, func() { conn.Close() }, nil
}

// NewPubSubSourceFrom wraps an already opened subscription (for callers
// that configure the driver themselves). Run shuts it down on return.
func NewPubSubSourceFrom(sub *pubsub.Subscription, opts Options) *PubSubSource {
	return &PubSubSource{
		url:      "subscription",
		h:        handler{opts: opts.withDefaults(), source: "pubsub"},
		open:     func(context.Context) (*pubsub.Subscription, error) { return sub, nil },
		useAttrs: true,
	}
}

// Run receives messages until ctx is done. Each message is acknowledged
// after its versions were handed to sink (or it was found undecodable);
// when the sink fails the message is nacked (redelivered) if the driver
// supports it, otherwise left to its ack deadline.
//
// A subscription that cannot be opened at all is a configuration error and
// returned. Once running, a failing subscription (Receive only returns
// errors Go CDK does not retry itself: permission denied, queue deleted)
// is logged, counted and reopened with backoff (1s doubling to 1m) until
// ctx is done; the poll source covers the gap.
func (s *PubSubSource) Run(ctx context.Context, sink Sink) error {
	sub, err := s.open(ctx)
	if err != nil {
		return fmt.Errorf("open subscription %s: %w", redactURL(s.url), err)
	}
	log := s.h.opts.Logger
	backoff := time.Second
	for {
		rerr := s.receive(ctx, sub, sink)
		s.shutdown(ctx, sub)
		if ctx.Err() != nil {
			return nil
		}
		if !s.reopen {
			return rerr
		}
		s.h.opts.Metrics.restarts.WithLabelValues("pubsub").Inc()
		for {
			log.Warn("subscription failed; reopening", "source", "pubsub", "subscription", redactURL(s.url), "err", rerr, "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			if sub, rerr = s.open(ctx); rerr == nil {
				break
			}
		}
	}
}

func (s *PubSubSource) shutdown(ctx context.Context, sub *pubsub.Subscription) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := sub.Shutdown(sctx); err != nil && ctx.Err() == nil {
		s.h.opts.Logger.Warn("shut down subscription", "source", "pubsub", "subscription", redactURL(s.url), "err", err)
	}
	if s.closeConn != nil {
		s.closeConn()
		s.closeConn = nil
	}
}

// receive handles messages until Receive fails or ctx is done.
func (s *PubSubSource) receive(ctx context.Context, sub *pubsub.Subscription, sink Sink) error {
	log := s.h.opts.Logger
	for {
		msg, err := sub.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receive from %s (%s): %w", redactURL(s.url), gcerrors.Code(err), err)
		}
		attrs := msg.Metadata
		if !s.useAttrs {
			attrs = nil
		}
		if herr := s.h.handle(ctx, msg.Body, attrs, sink); herr != nil {
			if msg.Nackable() {
				msg.Nack()
			}
			if ctx.Err() != nil || errors.Is(herr, context.Canceled) {
				return nil
			}
			log.Warn("event not handed on; will be redelivered", "source", "pubsub", "err", herr)
			continue
		}
		msg.Ack()
	}
}

// redactURL drops the query (which may carry credentials or tokens) from a
// subscription URL before it is logged.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}
