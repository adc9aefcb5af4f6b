package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
)

// s3Body is one S3 notification for version v of table i, as S3 sends it.
func s3Body(i int, v uint64) []byte {
	b, _ := json.Marshal(map[string]any{"Records": []any{map[string]any{
		"eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
		"eventTime": "2026-11-29T22:55:35.597Z", "eventName": "ObjectCreated:Put",
		"userIdentity":      map[string]string{"principalId": "AIDAJDPLRKLG7UEXAMPLE"},
		"requestParameters": map[string]string{"sourceIPAddress": "10.0.0.1"},
		"responseElements":  map[string]string{"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "x"},
		"s3": map[string]any{
			"s3SchemaVersion": "1.0", "configurationId": "lanced",
			"bucket": map[string]any{"name": "lake", "arn": "arn:aws:s3:::lake"},
			"object": map[string]any{
				"key":  fmt.Sprintf("warehouse/t%03d.lance/_versions/%s", i, format.ManifestName(format.NamingV2, v)),
				"size": 554, "eTag": "d41d8cd98f00b204e9800998ecf8427e", "sequencer": fmt.Sprintf("%018X", v),
			},
		},
	}}})
	return b
}

// BenchmarkIngest reports the event ingest rate (events/s) of the path a
// message takes in the daemon: decode, allow-list, coalesce. The
// stage=json_valid baseline (encoding/json validating the same bytes) is
// the floor to compare against in the same run.
func BenchmarkIngest(b *testing.B) {
	const tables = 100
	bodies := make([][]byte, 10_000)
	for k := range bodies {
		bodies[k] = s3Body(k%tables, uint64(k/tables+1))
	}
	roots, err := ParseRoots("s3://lake/warehouse")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}

	b.Run("stage=json_valid", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if !json.Valid(bodies[i%len(bodies)]) {
				b.Fatal("invalid")
			}
		}
		report(b)
	})
	b.Run("stage=decode+filter+coalesce", func(b *testing.B) {
		co := NewCoalescer(CoalescerConfig{Debounce: time.Second}, func(context.Context, format.VersionRef) error { return nil })
		h := handler{opts: Options{Roots: roots}.withDefaults(), source: "bench"}
		for i := 0; b.Loop(); i++ {
			if err := h.handle(ctx, bodies[i%len(bodies)], nil, co.Add); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("stage=coalesce", func(b *testing.B) {
		co := NewCoalescer(CoalescerConfig{Debounce: time.Second}, func(context.Context, format.VersionRef) error { return nil })
		refs := make([]format.VersionRef, tables*10)
		for k := range refs {
			refs[k] = format.VersionRef{Table: fmt.Sprintf("s3://lake/warehouse/t%03d.lance", k%tables), Version: uint64(k/tables + 1)}
		}
		for i := 0; b.Loop(); i++ {
			_ = co.Add(ctx, refs[i%len(refs)])
		}
		report(b)
	})
}

// BenchmarkFlood pushes 100,000 S3 events for 100 tables through decode,
// allow-list and a running coalescer (real clock, 50ms debounce) and
// reports the ingest rate and the evaluations it produced; it fails if
// any table got more than one evaluation per debounce window.
func BenchmarkFlood(b *testing.B) {
	const (
		events   = 100_000
		tables   = 100
		debounce = 50 * time.Millisecond
	)
	bodies := make([][]byte, events)
	for k := range bodies {
		bodies[k] = s3Body(k%tables, uint64(k/tables+1))
	}
	roots, err := ParseRoots("s3://lake/warehouse")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var evals atomic.Int64
		co := NewCoalescer(CoalescerConfig{Debounce: debounce, MaxDelay: 4 * debounce, AutoDone: true},
			func(context.Context, format.VersionRef) error { evals.Add(1); return nil })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = co.Run(ctx) }()
		h := handler{opts: Options{Roots: roots}.withDefaults(), source: "bench"}
		start := time.Now()
		for _, body := range bodies {
			if err := h.handle(ctx, body, nil, co.Add); err != nil {
				b.Fatal(err)
			}
		}
		ingest := time.Since(start)
		time.Sleep(2 * debounce)
		cancel()
		<-done
		windows := int64((time.Since(start))/debounce) + 1
		if n := evals.Load(); n > tables*windows {
			b.Fatalf("%d evaluations for %d tables in %d debounce windows", n, tables, windows)
		}
		b.ReportMetric(float64(events)/ingest.Seconds(), "events/s")
		b.ReportMetric(float64(evals.Load()), "evaluations")
	}
}
