package event

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Errors returned by the decoders. Every decode error wraps ErrUndecodable;
// a message that fails to decode is logged, counted and acknowledged, never
// redelivered.
var (
	// ErrUndecodable marks a message that is not one of the known event
	// formats (or is malformed).
	ErrUndecodable = errors.New("undecodable event")
)

// maxMessageBytes bounds what a decoder will parse. S3 notifications are at
// most 64 KiB; Pub/Sub messages at most 10 MB, but a GCS notification is a
// small JSON object resource.
const maxMessageBytes = 1 << 20

// Scheme values of ObjectEvent.Scheme.
const (
	SchemeS3  = "s3"
	SchemeGCS = "gs"
)

// ObjectEvent is one object-store notification, decoded but not yet
// filtered: the key is the object key as stored (URL decoding done).
type ObjectEvent struct {
	// Scheme is the URI scheme of the store, SchemeS3 or SchemeGCS.
	Scheme string
	// Bucket is the bucket name.
	Bucket string
	// Key is the decoded object key.
	Key string
	// Created is true for object-created events (S3 ObjectCreated:*,
	// EventBridge "Object Created", GCS OBJECT_FINALIZE). Deletions and
	// other events are decoded with Created false and ignored by the
	// filter.
	Created bool
}

// URI returns scheme://bucket/key.
func (e ObjectEvent) URI() string { return e.Scheme + "://" + e.Bucket + "/" + e.Key }

// Decode decodes one message body (and its attributes, if the transport
// has them: Pub/Sub attributes, SQS message attributes, NATS headers) in
// any of the supported formats:
//
//   - S3 event notification JSON ({"Records":[...]}), as S3 delivers it to
//     SQS, or to SNS with raw delivery;
//   - the SNS envelope ({"Type":"Notification","Message":"<S3 JSON>"});
//   - EventBridge ({"source":"aws.s3","detail-type":"Object Created",
//     "detail":{"bucket":{"name":..},"object":{"key":..}}});
//   - GCS Pub/Sub notifications: attributes eventType, bucketId, objectId
//     (the JSON_API_V1 payload is cross-checked when present), or the JSON
//     push envelope {"message":{"attributes":{..},"data":"<base64>"}}.
//
// The S3 test event sent when a notification is configured decodes to no
// events and no error. Anything else returns an error wrapping
// ErrUndecodable.
func Decode(body []byte, attrs map[string]string) ([]ObjectEvent, error) {
	if len(body) > maxMessageBytes {
		return nil, fmt.Errorf("message of %d bytes exceeds %d: %w", len(body), maxMessageBytes, ErrUndecodable)
	}
	if attrs["eventType"] != "" || attrs["bucketId"] != "" || attrs["objectId"] != "" {
		return decodeGCS(attrs, body)
	}
	return decodeJSON(body, 0)
}

// envelope is the union of the top-level shapes Decode accepts. Go's JSON
// decoder matches names case-insensitively, so "Message" (SNS, a string)
// and "message" (GCS push, an object) share one RawMessage field.
type envelope struct {
	Records []s3Record `json:"Records"`

	// S3 test event.
	Event string `json:"Event"`

	// SNS envelope.
	Type    string          `json:"Type"`
	Message json.RawMessage `json:"Message"`

	// EventBridge.
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Detail     json.RawMessage `json:"detail"`
}

type s3Record struct {
	EventVersion string `json:"eventVersion"`
	EventName    string `json:"eventName"`
	S3           *struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key string `json:"key"`
		} `json:"object"`
	} `json:"s3"`
}

type ebDetail struct {
	Bucket struct {
		Name string `json:"name"`
	} `json:"bucket"`
	Object struct {
		Key string `json:"key"`
	} `json:"object"`
}

type gcsPush struct {
	Attributes map[string]string `json:"attributes"`
	Data       string            `json:"data"`
}

func decodeJSON(body []byte, depth int) ([]ObjectEvent, error) {
	if depth > 2 {
		return nil, fmt.Errorf("envelopes nested too deep: %w", ErrUndecodable)
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("parse event json: %v: %w", err, ErrUndecodable)
	}
	switch {
	case env.Records != nil:
		return decodeS3Records(env.Records)
	case env.Event == "s3:TestEvent":
		return nil, nil
	case env.Type == "Notification" && isJSONString(env.Message):
		var inner string
		if err := json.Unmarshal(env.Message, &inner); err != nil {
			return nil, fmt.Errorf("sns message: %v: %w", err, ErrUndecodable)
		}
		return decodeJSON([]byte(inner), depth+1)
	case env.Source == "aws.s3" && len(env.Detail) > 0:
		return decodeEventBridge(env.DetailType, env.Detail)
	case isJSONObject(env.Message):
		var push gcsPush
		if err := json.Unmarshal(env.Message, &push); err != nil {
			return nil, fmt.Errorf("gcs push message: %v: %w", err, ErrUndecodable)
		}
		data, err := base64.StdEncoding.DecodeString(push.Data)
		if err != nil {
			return nil, fmt.Errorf("gcs push data: %v: %w", err, ErrUndecodable)
		}
		if push.Attributes == nil {
			return nil, fmt.Errorf("gcs push message without attributes: %w", ErrUndecodable)
		}
		return decodeGCS(push.Attributes, data)
	}
	return nil, fmt.Errorf("no S3, SNS, EventBridge or GCS event shape: %w", ErrUndecodable)
}

func isJSONString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }
func isJSONObject(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }

func decodeS3Records(recs []s3Record) ([]ObjectEvent, error) {
	out := make([]ObjectEvent, 0, len(recs))
	for i, r := range recs {
		if r.S3 == nil || r.S3.Bucket.Name == "" || r.S3.Object.Key == "" {
			return nil, fmt.Errorf("s3 record %d: no s3.bucket.name or s3.object.key: %w", i, ErrUndecodable)
		}
		// Match the major version exactly; any minor version is fine.
		if major, _, _ := strings.Cut(r.EventVersion, "."); major != "2" {
			return nil, fmt.Errorf("s3 record %d: eventVersion %q (want 2.x): %w", i, r.EventVersion, ErrUndecodable)
		}
		// S3 keys are URL-encoded form style: '+' is a space.
		key, err := url.QueryUnescape(r.S3.Object.Key)
		if err != nil {
			return nil, fmt.Errorf("s3 record %d: key %q: %v: %w", i, r.S3.Object.Key, err, ErrUndecodable)
		}
		// S3 writes "ObjectCreated:Put"; S3-compatible stores (MinIO)
		// prefix "s3:".
		name := strings.TrimPrefix(r.EventName, "s3:")
		out = append(out, ObjectEvent{
			Scheme:  SchemeS3,
			Bucket:  r.S3.Bucket.Name,
			Key:     key,
			Created: strings.HasPrefix(name, "ObjectCreated:"),
		})
	}
	return out, nil
}

// decodeEventBridge reads an S3 event delivered by EventBridge. Its keys are
// taken verbatim (AWS's examples do not URL-encode them); a key holding '%'
// is rejected later by the filter, so a mis-encoded key can never be acted
// on.
func decodeEventBridge(detailType string, raw json.RawMessage) ([]ObjectEvent, error) {
	var d ebDetail
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("eventbridge detail: %v: %w", err, ErrUndecodable)
	}
	if d.Bucket.Name == "" || d.Object.Key == "" {
		return nil, fmt.Errorf("eventbridge detail: no bucket.name or object.key: %w", ErrUndecodable)
	}
	return []ObjectEvent{{
		Scheme:  SchemeS3,
		Bucket:  d.Bucket.Name,
		Key:     d.Object.Key,
		Created: detailType == "Object Created",
	}}, nil
}

// gcsObject is the part of the JSON_API_V1 object resource we cross-check.
type gcsObject struct {
	Name   string `json:"name"`
	Bucket string `json:"bucket"`
}

// decodeGCS reads a GCS Pub/Sub notification. The attributes are
// authoritative; with payloadFormat JSON_API_V1 the payload must name the
// same object. A DELETE/ARCHIVE of a generation replaced by an overwrite
// (overwrittenByGeneration set) is not a deletion of the object.
func decodeGCS(attrs map[string]string, body []byte) ([]ObjectEvent, error) {
	typ, bucket, object := attrs["eventType"], attrs["bucketId"], attrs["objectId"]
	if typ == "" || bucket == "" || object == "" {
		return nil, fmt.Errorf("gcs notification needs eventType, bucketId and objectId attributes: %w", ErrUndecodable)
	}
	if len(body) > 0 && attrs["payloadFormat"] != "NONE" {
		var o gcsObject
		if err := json.Unmarshal(body, &o); err != nil {
			return nil, fmt.Errorf("gcs payload: %v: %w", err, ErrUndecodable)
		}
		if (o.Name != "" && o.Name != object) || (o.Bucket != "" && o.Bucket != bucket) {
			return nil, fmt.Errorf("gcs payload names %s/%s, attributes %s/%s: %w", o.Bucket, o.Name, bucket, object, ErrUndecodable)
		}
	}
	return []ObjectEvent{{
		Scheme:  SchemeGCS,
		Bucket:  bucket,
		Key:     object,
		Created: typ == "OBJECT_FINALIZE",
	}}, nil
}
