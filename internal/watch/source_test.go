package watch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gocloud.dev/pubsub"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/watch/event/eventtest"
	"github.com/lanced-dev/lanced/testenv/natstest"
)

// flakySink records refs; it refuses the first `fail` calls.
type flakySink struct {
	mu    sync.Mutex
	fail  int
	calls int
	refs  []format.VersionRef
}

func (s *flakySink) sink(_ context.Context, r format.VersionRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail > 0 {
		s.fail--
		return errors.New("coordinator busy")
	}
	s.refs = append(s.refs, r)
	return nil
}

func (s *flakySink) wait(t *testing.T, n int) []format.VersionRef {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		refs := append([]format.VersionRef(nil), s.refs...)
		s.mu.Unlock()
		if len(refs) >= n || time.Now().After(deadline) {
			return refs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sampleMessages are the testdata payloads a mixed feed carries, with the
// refs they should produce under testRoots.
func sampleMessages(t *testing.T) (bodies [][]byte, attrs []map[string]string) {
	for _, f := range []string{"s3_direct_put.json", "sns_wrapped.json", "eventbridge_created.json", "gcs_finalize.json", "s3_test_event.json"} {
		b, a := eventtest.LoadSample(t, f)
		bodies = append(bodies, b)
		attrs = append(attrs, a)
	}
	bodies = append(bodies, []byte("not an event"))
	attrs = append(attrs, nil)
	return bodies, attrs
}

var sampleRefs = []format.VersionRef{
	{Table: "s3://lake/warehouse/events.lance", Version: 2},
	{Table: "s3://lake/warehouse/events.lance", Version: 2},
	{Table: "s3://lake/warehouse/events.lance", Version: 3},
	{Table: "gs://lake-gcs/warehouse/events.lance", Version: 4},
}

func natsMsg(subject string, body []byte, attrs map[string]string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range attrs {
		m.Header[k] = []string{v}
	}
	return m
}

func TestJetStreamSourceAcksAfterSink(t *testing.T) {
	nc := natstest.Conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	src, err := NewNATSSource(nc, NATSConfig{Subject: "ev.>", Stream: "EV", Durable: "w", AckWait: time.Second},
		Options{Roots: eventtest.Roots(t, ParseRoots), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{fail: 1} // the first hand-off fails: that message must come back
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink.sink) }()

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the source to create its stream, then publish through it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := js.Consumer(ctx, "EV", "w"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("consumer not created")
		}
		time.Sleep(10 * time.Millisecond)
	}
	bodies, attrs := sampleMessages(t)
	for i := range bodies {
		if _, err := js.PublishMsg(ctx, natsMsg("ev.x", bodies[i], attrs[i])); err != nil {
			t.Fatal(err)
		}
	}
	refs := sink.wait(t, len(sampleRefs))
	if !sameRefSet(refs, sampleRefs) {
		t.Fatalf("refs = %v, want %v", refs, sampleRefs)
	}
	// Everything acked: nothing pending, nothing left to deliver.
	deadline = time.Now().Add(10 * time.Second)
	for {
		cons, err := js.Consumer(ctx, "EV", "w")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			if info.Delivered.Consumer <= info.Delivered.Stream {
				t.Fatalf("the refused message was not redelivered: %+v", info)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages left unacked: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := counterValue(t, m.messages.WithLabelValues("jetstream", "undecodable")); got != 1 {
		t.Fatalf("undecodable = %v, want 1", got)
	}
	if got := counterValue(t, m.messages.WithLabelValues("jetstream", "sink_error")); got != 1 {
		t.Fatalf("sink_error = %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCoreNATSSource(t *testing.T) {
	nc := natstest.Conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := NewNATSSource(nc, NATSConfig{Subject: "s3.events", Queue: "lanced"}, Options{Roots: eventtest.Roots(t, ParseRoots)})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	go func() { _ = src.Run(ctx, sink.sink) }()
	// Core NATS is at-most-once: publish a probe until the subscription
	// is live, then the samples.
	probe, _ := eventtest.LoadSample(t, "s3_direct_put.json")
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.wait(t, 0)) == 0 {
		if err := nc.Publish("s3.events", probe); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("subscription never became live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := len(sink.wait(t, 0))
	bodies, attrs := sampleMessages(t)
	for i := range bodies {
		if err := nc.PublishMsg(natsMsg("s3.events", bodies[i], attrs[i])); err != nil {
			t.Fatal(err)
		}
	}
	refs := sink.wait(t, before+len(sampleRefs))
	if !sameRefSet(refs[before:], sampleRefs) {
		t.Fatalf("refs = %v, want %v", refs[before:], sampleRefs)
	}
}

func TestPubSubSourceMem(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic, err := pubsub.OpenTopic(ctx, "mem://lanced-watch-test")
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Shutdown(context.Background())
	m := NewMetrics(nil)
	src := NewPubSubSource("mem://lanced-watch-test", Options{Roots: eventtest.Roots(t, ParseRoots), Metrics: m})
	sink := &flakySink{fail: 1}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink.sink) }()
	time.Sleep(50 * time.Millisecond) // mempubsub delivers only to existing subscriptions
	bodies, attrs := sampleMessages(t)
	for i := range bodies {
		if err := topic.Send(ctx, &pubsub.Message{Body: bodies[i], Metadata: attrs[i]}); err != nil {
			t.Fatal(err)
		}
	}
	refs := sink.wait(t, len(sampleRefs))
	if !sameRefSet(refs, sampleRefs) {
		t.Fatalf("refs = %v, want %v", refs, sampleRefs)
	}
	if got := counterValue(t, m.messages.WithLabelValues("pubsub", "undecodable")); got != 1 {
		t.Fatalf("undecodable = %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPubSubSourceBadURL(t *testing.T) {
	src := NewPubSubSource("nosuch://x?token=secret", Options{})
	err := src.Run(context.Background(), func(context.Context, format.VersionRef) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "open subscription nosuch://x?…") {
		t.Fatalf("Run = %v; want an open error naming the redacted URL", err)
	}
}

// sameRefSet compares as multisets (the order across tables and message
// redeliveries is not fixed).
func sameRefSet(a, b []format.VersionRef) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[format.VersionRef]int{}
	for _, r := range a {
		count[r]++
	}
	for _, r := range b {
		count[r]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestPubSubSourceReopens: a subscription that fails after it was running
// is reopened (with backoff) and events keep flowing.
func TestPubSubSourceReopens(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic, err := pubsub.OpenTopic(ctx, "mem://lanced-watch-reopen")
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Shutdown(context.Background())
	m := NewMetrics(nil)
	src := NewPubSubSource("mem://lanced-watch-reopen", Options{Roots: eventtest.Roots(t, ParseRoots), Metrics: m})
	opened := make(chan *pubsub.Subscription, 4)
	src.open = func(ctx context.Context) (*pubsub.Subscription, error) {
		sub, err := pubsub.OpenSubscription(ctx, "mem://lanced-watch-reopen")
		if err == nil {
			opened <- sub
		}
		return sub, err
	}
	sink := &flakySink{}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink.sink) }()
	first := <-opened
	// Kill the running subscription from outside: Receive fails for good.
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		t.Fatal("subscription not reopened")
	}
	body, _ := eventtest.LoadSample(t, "s3_direct_put.json")
	if err := topic.Send(ctx, &pubsub.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	if got := sink.wait(t, 1); len(got) != 1 || got[0] != sampleRefs[0] {
		t.Fatalf("refs after reopen = %v", got)
	}
	if n := counterValue(t, m.restarts.WithLabelValues("pubsub")); n != 1 {
		t.Fatalf("restarts = %v, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestJetStreamSourceRecreatesConsumer: the durable consumer is deleted
// under a running source; it is recreated and events keep flowing.
func TestJetStreamSourceRecreatesConsumer(t *testing.T) {
	nc := natstest.Conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}}); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	src, err := NewNATSSource(nc, NATSConfig{Subject: "ev.>", Stream: "EV", Durable: "w"}, Options{Roots: eventtest.Roots(t, ParseRoots), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink.sink) }()
	body, _ := eventtest.LoadSample(t, "s3_direct_put.json")
	if _, err := js.Publish(ctx, "ev.a", body); err != nil {
		t.Fatal(err)
	}
	if got := sink.wait(t, 1); len(got) != 1 {
		t.Fatalf("refs = %v", got)
	}
	if err := js.DeleteConsumer(ctx, "EV", "w"); err != nil {
		t.Fatal(err)
	}
	body, _ = eventtest.LoadSample(t, "eventbridge_created.json")
	if _, err := js.Publish(ctx, "ev.b", body); err != nil {
		t.Fatal(err)
	}
	got := sink.wait(t, 2)
	if len(got) < 2 || got[len(got)-1] != sampleRefs[2] {
		t.Fatalf("refs after the consumer was deleted = %v", got)
	}
	if n := counterValue(t, m.restarts.WithLabelValues("jetstream")); n < 1 {
		t.Fatalf("restarts = %v", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
