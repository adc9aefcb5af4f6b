// Package gcsbridge is the GCS notification bridge of the test environment:
// an http.Handler around the GCS emulator (internal/store/storetest) that
// turns every successful create of a matching object into a Cloud Storage
// Pub/Sub notification, published to an in-process Pub/Sub emulator
// (cloud.google.com/go/pubsub/v2/pstest), the way GCS publishes to a topic
// configured with `gcloud storage buckets notifications create`.
//
// A notification has the attributes GCS documents for OBJECT_FINALIZE
// (https://cloud.google.com/storage/docs/pubsub-notifications):
// notificationConfig, eventType, payloadFormat=JSON_API_V1, bucketId,
// objectId, objectGeneration and eventTime, and as payload the object's
// JSON-API resource as the emulator serves it. Only a create the emulator
// accepted publishes: a lost ifGenerationMatch=0 race publishes nothing.
// Write plus publish run under one mutex, so notifications arrive in commit
// order. Both write paths are seen: JSON-API uploads (lanced, through
// gocloud.dev) and XML-API PUTs and multipart completions (real Lance).
//
// Test environment only; production code never imports testenv.
package gcsbridge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// Config configures the bridge. Zero values take the defaults.
type Config struct {
	Project      string // default "lanced-test"
	Topic        string // default "gcs-events"
	Subscription string // default "lanced"
	Suffix       string // object-name filter, default ".manifest"
}

// Bridge publishes notifications for creates of matching objects.
type Bridge struct {
	PS        *pstest.Server
	cfg       Config
	inner     http.Handler
	mu        sync.Mutex
	published atomic.Int64
}

// Start starts a Pub/Sub emulator with the topic and subscription, and the
// GCS emulator with the bridge in front of it (wrap, if not nil, goes in
// front of the bridge, e.g. a fault layer: a write whose response is lost
// still publishes, as on GCS).
func Start(t testing.TB, cfg Config, wrap func(http.Handler) http.Handler) (*storetest.GCSServer, *Bridge) {
	t.Helper()
	if cfg.Project == "" {
		cfg.Project = "lanced-test"
	}
	if cfg.Topic == "" {
		cfg.Topic = "gcs-events"
	}
	if cfg.Subscription == "" {
		cfg.Subscription = "lanced"
	}
	if cfg.Suffix == "" {
		cfg.Suffix = ".manifest"
	}
	ps := pstest.NewServer()
	t.Cleanup(func() { _ = ps.Close() })
	ctx := context.Background()
	topic := "projects/" + cfg.Project + "/topics/" + cfg.Topic
	if _, err := ps.GServer.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatalf("gcsbridge: create topic: %v", err)
	}
	if _, err := ps.GServer.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/" + cfg.Project + "/subscriptions/" + cfg.Subscription, Topic: topic, AckDeadlineSeconds: 10,
	}); err != nil {
		t.Fatalf("gcsbridge: create subscription: %v", err)
	}
	b := &Bridge{PS: ps, cfg: cfg}
	gcs := storetest.StartGCSWith(t, func(h http.Handler) http.Handler {
		b.inner = h
		if wrap != nil {
			return wrap(b)
		}
		return b
	})
	return gcs, b
}

// SubscriptionURL is the Go CDK URL lanced's pubsub source reads:
// gcppubsub://projects/<p>/subscriptions/<s>?endpoint=<pstest address>.
func (b *Bridge) SubscriptionURL() string {
	return "gcppubsub://projects/" + b.cfg.Project + "/subscriptions/" + b.cfg.Subscription + "?endpoint=" + url.QueryEscape(b.PS.Addr)
}

// Published is the number of notifications published.
func (b *Bridge) Published() int64 { return b.published.Load() }

// created returns the object a request creates, if it is one.
func created(r *http.Request) (string, bool) {
	q := r.URL.Query()
	p := r.URL.EscapedPath()
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/upload/storage/v1/b/"+storetest.BucketName+"/o"):
		return q.Get("name"), q.Get("name") != "" && q.Get("uploadType") != "resumable"
	case strings.HasPrefix(p, "/"+storetest.BucketName+"/") &&
		((r.Method == http.MethodPut && !q.Has("uploadId")) || (r.Method == http.MethodPost && q.Has("uploadId"))):
		name, err := url.PathUnescape(strings.TrimPrefix(p, "/"+storetest.BucketName+"/"))
		return name, err == nil
	}
	return "", false
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(c int) {
	if s.code == 0 {
		s.code = c
	}
	s.ResponseWriter.WriteHeader(c)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := created(r)
	if !ok || !strings.HasSuffix(name, b.cfg.Suffix) {
		b.inner.ServeHTTP(w, r)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	b.inner.ServeHTTP(sw, r)
	if sw.code != http.StatusOK {
		return
	}
	// The object resource, as the JSON API serves it: the payload.
	req := httptest.NewRequest(http.MethodGet, "/storage/v1/b/"+storetest.BucketName+"/o/"+url.PathEscape(name)+"?alt=json", nil)
	req.Host = r.Host
	rec := httptest.NewRecorder()
	b.inner.ServeHTTP(rec, req)
	var obj struct {
		Generation string `json:"generation"`
		Updated    string `json:"updated"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &obj) != nil {
		return
	}
	eventTime := obj.Updated
	if eventTime == "" {
		eventTime = time.Now().UTC().Format(time.RFC3339Nano)
	}
	b.PS.Publish("projects/"+b.cfg.Project+"/topics/"+b.cfg.Topic, rec.Body.Bytes(), map[string]string{
		"notificationConfig": "projects/_/buckets/" + storetest.BucketName + "/notificationConfigs/1",
		"eventType":          "OBJECT_FINALIZE",
		"payloadFormat":      "JSON_API_V1",
		"bucketId":           storetest.BucketName,
		"objectId":           name,
		"objectGeneration":   obj.Generation,
		"eventTime":          eventTime,
	})
	b.published.Add(1)
}
