// Package s3bridge is the S3 notification bridge of the test environment:
// a wrapper around a gofakes3 backend that turns every committed PUT (and
// DELETE) of a matching key into a real S3 event notification JSON message
// published on a NATS subject, the way S3 publishes to SQS/SNS/EventBridge.
//
// Wrap it around the emulator of internal/store/storetest:
//
//	s3 := storetest.StartS3With(t, s3bridge.Wrap(nc, s3bridge.Config{Subject: "s3.events.lance"}))
//
// or use Start, which does that. Only a PUT the inner backend accepted
// produces an event: a lost If-None-Match race (Lance's commit conflict)
// produces none, exactly as on S3. Inner write plus publish run under one
// mutex, so events arrive in commit order.
//
// Test environment only; production code never imports testenv.
package s3bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/johannesboyne/gofakes3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Envelope formats the bridge can publish.
const (
	// FormatS3 is the S3 event JSON as S3 sends it to SQS ({"Records":[…]}).
	FormatS3 = "s3"
	// FormatSNS wraps it in an SNS notification envelope (no raw delivery).
	FormatSNS = "sns"
	// FormatEventBridge sends the EventBridge "Object Created" shape.
	FormatEventBridge = "eventbridge"
)

// Config configures the bridge.
type Config struct {
	// Subject is the NATS subject to publish on. Required.
	Subject string
	// Prefix and Suffix filter keys like an S3 notification configuration's
	// filter rules (default suffix ".manifest", no prefix).
	Prefix, Suffix string
	// Format is the envelope (default FormatS3).
	Format string
	// Region appears in the events (default us-east-1).
	Region string
	// JetStream publishes through JetStream and waits for the stream's
	// ack (a stream must capture Subject); otherwise core NATS.
	JetStream bool
}

// Backend is a gofakes3.Backend that publishes notifications for
// committed writes of matching keys.
type Backend struct {
	gofakes3.Backend
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream

	mu        sync.Mutex // orders inner write + publish
	seq       uint64
	published atomic.Int64
	failed    atomic.Int64
	lastErr   atomic.Value
}

// Wrap returns a wrapper for storetest.StartS3With.
func Wrap(nc *nats.Conn, cfg Config) func(gofakes3.Backend) gofakes3.Backend {
	return func(inner gofakes3.Backend) gofakes3.Backend {
		b, err := New(inner, nc, cfg)
		if err != nil {
			panic(err) // configuration error in a test
		}
		return b
	}
}

// New wraps inner.
func New(inner gofakes3.Backend, nc *nats.Conn, cfg Config) (*Backend, error) {
	if cfg.Subject == "" {
		return nil, fmt.Errorf("s3bridge: no subject")
	}
	if cfg.Suffix == "" {
		cfg.Suffix = ".manifest"
	}
	if cfg.Format == "" {
		cfg.Format = FormatS3
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	b := &Backend{Backend: inner, cfg: cfg, nc: nc}
	if cfg.JetStream {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("s3bridge: jetstream: %w", err)
		}
		b.js = js
	}
	return b, nil
}

// Published is the number of notifications published.
func (b *Backend) Published() int64 { return b.published.Load() }

// Failed is the number of notifications that could not be published (the
// write itself stood, as on S3 when a notification is lost).
func (b *Backend) Failed() (int64, error) {
	err, _ := b.lastErr.Load().(error)
	return b.failed.Load(), err
}

func (b *Backend) match(key string) bool {
	return strings.HasPrefix(key, b.cfg.Prefix) && strings.HasSuffix(key, b.cfg.Suffix)
}

// PutObject writes through the inner backend and, if it committed and the
// key matches, publishes ObjectCreated:Put. Completed multipart uploads
// arrive here too (gofakes3's uploader calls the backend's PutObject).
func (b *Backend) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64, cond *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	if !b.match(key) {
		return b.Backend.PutObject(bucket, key, meta, input, size, cond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Backend.PutObject(bucket, key, meta, input, size, cond)
	if err != nil {
		return res, err
	}
	b.publish(bucket, key, size, "ObjectCreated:Put")
	return res, nil
}

// CopyObject copies through the inner backend (s3mem copies without
// calling our PutObject) and publishes ObjectCreated:Copy.
func (b *Backend) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	if !b.match(dstKey) {
		return b.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Backend.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
	if err != nil {
		return res, err
	}
	b.publish(dstBucket, dstKey, 0, "ObjectCreated:Copy")
	return res, nil
}

// DeleteObject deletes and publishes ObjectRemoved:Delete.
func (b *Backend) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	if !b.match(key) {
		return b.Backend.DeleteObject(bucket, key)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Backend.DeleteObject(bucket, key)
	if err != nil {
		return res, err
	}
	b.publish(bucket, key, 0, "ObjectRemoved:Delete")
	return res, nil
}

// DeleteMulti deletes and publishes ObjectRemoved:Delete per deleted key.
func (b *Backend) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.Backend.DeleteMulti(bucket, keys...)
	if err != nil {
		return res, err
	}
	for _, d := range res.Deleted {
		if b.match(d.Key) {
			b.publish(bucket, d.Key, 0, "ObjectRemoved:Delete")
		}
	}
	return res, nil
}

// publish sends one notification; the caller holds b.mu.
func (b *Backend) publish(bucket, key string, size int64, eventName string) {
	b.seq++
	data, err := b.encode(bucket, key, size, eventName, b.seq, time.Now().UTC())
	if err == nil {
		if b.js != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = b.js.Publish(ctx, b.cfg.Subject, data)
			cancel()
		} else {
			err = b.nc.Publish(b.cfg.Subject, data)
		}
	}
	if err != nil {
		b.failed.Add(1)
		b.lastErr.Store(fmt.Errorf("publish event for %s/%s: %w", bucket, key, err))
		return
	}
	b.published.Add(1)
}

// EncodeKey URL-encodes a key the way S3 event notifications do: form
// encoding (space as '+'), with '/' left as is.
func EncodeKey(key string) string {
	return strings.ReplaceAll(url.QueryEscape(key), "%2F", "/")
}

type record struct {
	EventVersion      string            `json:"eventVersion"`
	EventSource       string            `json:"eventSource"`
	AWSRegion         string            `json:"awsRegion"`
	EventTime         string            `json:"eventTime"`
	EventName         string            `json:"eventName"`
	UserIdentity      map[string]string `json:"userIdentity"`
	RequestParameters map[string]string `json:"requestParameters"`
	ResponseElements  map[string]string `json:"responseElements"`
	S3                recordS3          `json:"s3"`
}

type recordS3 struct {
	SchemaVersion   string `json:"s3SchemaVersion"`
	ConfigurationID string `json:"configurationId"`
	Bucket          struct {
		Name          string            `json:"name"`
		OwnerIdentity map[string]string `json:"ownerIdentity"`
		ARN           string            `json:"arn"`
	} `json:"bucket"`
	Object struct {
		Key       string `json:"key"`
		Size      int64  `json:"size,omitempty"`
		ETag      string `json:"eTag,omitempty"`
		Sequencer string `json:"sequencer"`
	} `json:"object"`
}

func (b *Backend) encode(bucket, key string, size int64, eventName string, seq uint64, now time.Time) ([]byte, error) {
	sequencer := fmt.Sprintf("%018X", seq)
	reqID := strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:16])
	switch b.cfg.Format {
	case FormatEventBridge:
		detailType := "Object Created"
		reason := "PutObject"
		if strings.HasPrefix(eventName, "ObjectRemoved:") {
			detailType, reason = "Object Deleted", "DeleteObject"
		}
		return json.Marshal(map[string]any{
			"version": "0", "id": uuid.NewString(), "detail-type": detailType, "source": "aws.s3",
			"account": "000000000000", "time": now.Format(time.RFC3339), "region": b.cfg.Region,
			"resources": []string{"arn:aws:s3:::" + bucket},
			"detail": map[string]any{
				"version":    "0",
				"bucket":     map[string]string{"name": bucket},
				"object":     map[string]any{"key": key, "size": size, "sequencer": sequencer},
				"request-id": reqID, "requester": "000000000000", "source-ip-address": "127.0.0.1",
				"reason": reason,
			},
		})
	case FormatS3, FormatSNS:
	default:
		return nil, fmt.Errorf("s3bridge: unknown format %q", b.cfg.Format)
	}
	r := record{
		EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: b.cfg.Region,
		EventTime:         now.Format("2006-01-02T15:04:05.000Z"),
		EventName:         eventName,
		UserIdentity:      map[string]string{"principalId": "AWS:LANCEDTESTENV"},
		RequestParameters: map[string]string{"sourceIPAddress": "127.0.0.1"},
		ResponseElements:  map[string]string{"x-amz-request-id": reqID, "x-amz-id-2": "s3bridge"},
	}
	r.S3.SchemaVersion = "1.0"
	r.S3.ConfigurationID = "lanced-s3bridge"
	r.S3.Bucket.Name = bucket
	r.S3.Bucket.OwnerIdentity = map[string]string{"principalId": "LANCEDTESTENV"}
	r.S3.Bucket.ARN = "arn:aws:s3:::" + bucket
	r.S3.Object.Key = EncodeKey(key)
	r.S3.Object.Size = size
	r.S3.Object.Sequencer = sequencer
	inner, err := json.Marshal(map[string]any{"Records": []record{r}})
	if err != nil || b.cfg.Format == FormatS3 {
		return inner, err
	}
	return json.Marshal(map[string]string{
		"Type": "Notification", "MessageId": uuid.NewString(),
		"TopicArn": "arn:aws:sns:" + b.cfg.Region + ":000000000000:lanced-s3bridge",
		"Subject":  "Amazon S3 Notification", "Message": string(inner),
		"Timestamp": now.Format("2006-01-02T15:04:05.000Z"), "SignatureVersion": "1",
		"Signature": "", "SigningCertURL": "", "UnsubscribeURL": "",
	})
}
