package s3bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/watch"
	"github.com/lanced-dev/lanced/testenv/natstest"
	"github.com/lanced-dev/lanced/testenv/oracle"
	"github.com/lanced-dev/lanced/testenv/s3bridge"
)

// collector is a watch.Sink that records refs in arrival order.
type collector struct {
	mu   sync.Mutex
	refs []format.VersionRef
}

func (c *collector) sink(_ context.Context, r format.VersionRef) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs = append(c.refs, r)
	return nil
}

func (c *collector) forTable(table string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var vs []uint64
	for _, r := range c.refs {
		if r.Table == table {
			vs = append(vs, r.Version)
		}
	}
	return vs
}

func (c *collector) waitFor(t *testing.T, table string, n int) []uint64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		vs := c.forTable(table)
		if len(vs) >= n || time.Now().After(deadline) {
			return vs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBridgeEventsDecode checks every envelope the bridge publishes against
// the watch decoder, including keys S3 must URL-encode, and that a lost
// If-None-Match race publishes nothing.
func TestBridgeEventsDecode(t *testing.T) {
	nc := natstest.Conn(t)
	roots, err := watch.ParseRoots("s3://lance/db")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{s3bridge.FormatS3, s3bridge.FormatSNS, s3bridge.FormatEventBridge} {
		t.Run(f, func(t *testing.T) {
			subj := "events." + f
			sub, err := nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			mem := s3mem.New()
			if err := mem.CreateBucket("lance"); err != nil {
				t.Fatal(err)
			}
			b, err := s3bridge.New(mem, nc, s3bridge.Config{Subject: subj, Format: f})
			if err != nil {
				t.Fatal(err)
			}
			put := func(key string, cond *gofakes3.PutConditions) error {
				_, err := b.PutObject("lance", key, nil, bytes.NewReader([]byte("m")), 1, cond)
				return err
			}
			star := "*"
			ifAbsent := &gofakes3.PutConditions{IfNoneMatch: &star}
			keys := []string{
				"db/t.lance/data/0101.lance",                         // filtered by suffix: no event
				"db/t.lance/_versions/18446744073709551614.manifest", // v1
				"db/my table+x.lance/_versions/3.manifest",           // needs encoding
			}
			for _, k := range keys {
				if err := put(k, ifAbsent); err != nil {
					t.Fatal(err)
				}
			}
			if err := put(keys[1], ifAbsent); err == nil {
				t.Fatal("second conditional put of the same manifest succeeded")
			}
			if _, err := b.DeleteMulti("lance", keys[1]); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			want := []struct {
				ref     format.VersionRef
				created bool
			}{
				{format.VersionRef{Table: "s3://lance/db/t.lance", Version: 1}, true},
				{format.VersionRef{Table: "s3://lance/db/my table+x.lance", Version: 3}, true},
				{format.VersionRef{Table: "s3://lance/db/t.lance", Version: 1}, false},
			}
			for i, w := range want {
				msg, err := sub.NextMsg(5 * time.Second)
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				evs, err := watch.Decode(msg.Data, nil)
				if err != nil || len(evs) != 1 {
					t.Fatalf("event %d: Decode(%s) = %v, %v", i, msg.Data, evs, err)
				}
				if evs[0].Created != w.created {
					t.Fatalf("event %d: created = %v, want %v", i, evs[0].Created, w.created)
				}
				evs[0].Created = true
				r, err := roots.Ref(evs[0])
				if err != nil || r != w.ref {
					t.Fatalf("event %d: Ref = %v, %v; want %v", i, r, err, w.ref)
				}
			}
			if msg, err := sub.NextMsg(100 * time.Millisecond); err == nil {
				t.Fatalf("unexpected event %s", msg.Data)
			}
			if n, err := b.Failed(); n != 0 {
				t.Fatalf("%d publishes failed: %v", n, err)
			}
		})
	}
}

// TestLanceCommitsBecomeVersionRefs: real Lance writes tables into the S3
// emulator; the bridge publishes its manifest PUTs on NATS (captured by a
// JetStream stream); watch's NATS source and decoder yield exactly the
// versions real Lance lists, in commit order.
func TestLanceCommitsBecomeVersionRefs(t *testing.T) {
	oracle.Require(t)
	cases := []struct {
		format   string
		scenario string
		ops      []oracle.Op
	}{
		// 30 V2-named versions, then a delete and an append.
		{s3bridge.FormatS3, "appends", []oracle.Op{{"op": "delete", "where": "id % 7 = 0"}, {"op": "add", "rows": 50, "seed": 3}}},
		// V1 names ({v}.manifest) through the EventBridge envelope.
		{s3bridge.FormatEventBridge, "v1_paths", []oracle.Op{{"op": "add", "rows": 10, "seed": 4}}},
	}
	for _, tc := range cases {
		t.Run(tc.format+"/"+tc.scenario, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nc := natstest.Conn(t)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S3EVENTS", Subjects: []string{"s3.events.>"}}); err != nil {
				t.Fatal(err)
			}
			s3, bridge := s3bridge.Start(t, nc, s3bridge.Config{Subject: "s3.events.lance", Format: tc.format, JetStream: true})

			roots, err := watch.ParseRoots(s3.LanceURI("db"))
			if err != nil {
				t.Fatal(err)
			}
			m := watch.NewMetrics(nil)
			src, err := watch.NewNATSSource(nc, watch.NATSConfig{Subject: "s3.events.>", Stream: "S3EVENTS"},
				watch.Options{Roots: roots, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			col := &collector{}
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, col.sink) }()

			opts := oracle.Options{StorageOptions: s3.LanceStorageOptions()}
			uri := oracle.Build(t, tc.scenario, s3.LanceURI("db"), opts)
			res := oracle.RunOps(t, uri, tc.ops, opts)
			var last struct {
				Version uint64 `json:"version"`
			}
			if err := json.Unmarshal(res[len(res)-1], &last); err != nil {
				t.Fatal(err)
			}
			rep := oracle.Inspect(t, uri, 0, opts)
			if rep.LatestVersion != last.Version {
				t.Fatalf("Lance: latest %d, last op at %d", rep.LatestVersion, last.Version)
			}
			want := rep.Versions // every version Lance committed, ascending
			got := col.waitFor(t, uri, len(want))
			if len(got) != len(want) {
				t.Fatalf("refs for %s: %v, want versions %v", uri, got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("refs for %s: %v, want versions %v (in commit order)", uri, got, want)
				}
			}
			if bridge.Published() < int64(len(want)) {
				t.Fatalf("bridge published %d events for %d versions", bridge.Published(), len(want))
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("source: %v", err)
			}
			t.Logf("%s: %d versions, %d events published (incl. the __manifest namespace table)", uri, len(want), bridge.Published())
		})
	}
}
