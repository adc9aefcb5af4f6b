package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/watch/event/eventtest"
)

func ref(table string, v uint64) format.VersionRef {
	return format.VersionRef{Table: table, Version: v}
}

func TestDecodeSamples(t *testing.T) {
	roots := eventtest.Roots(t, ParseRoots)
	cases := []struct {
		file    string
		refs    []format.VersionRef
		dropped []string // drop reasons, in record order
	}{
		{file: "s3_direct_put.json", refs: []format.VersionRef{ref("s3://lake/warehouse/events.lance", 2)}},
		{
			file: "s3_direct_batch.json",
			refs: []format.VersionRef{
				ref("s3://lake/warehouse/events.lance", 2),
				ref("s3://lake/warehouse/legacy.lance", 7), // V1 name, multipart upload
			},
			// data file, .txn, manifest delete, detached version, version hint
			dropped: []string{"not_manifest", "not_manifest", "not_created", "not_manifest", "not_manifest"},
		},
		{file: "s3_test_event.json"},
		{file: "s3_encoded_key.json", refs: []format.VersionRef{ref("s3://lake/warehouse/click stream=v2.lance", 10)}},
		{file: "sns_wrapped.json", refs: []format.VersionRef{ref("s3://lake/warehouse/events.lance", 2)}},
		{file: "eventbridge_created.json", refs: []format.VersionRef{ref("s3://lake/warehouse/events.lance", 3)}},
		{file: "eventbridge_deleted.json", dropped: []string{"not_created"}},
		{file: "gcs_finalize.json", refs: []format.VersionRef{ref("gs://lake-gcs/warehouse/events.lance", 4)}},
		{file: "gcs_finalize_nopayload.json", refs: []format.VersionRef{ref("gs://lake-gcs/warehouse/events.lance", 3)}},
		{file: "gcs_delete_overwritten.json", dropped: []string{"not_created"}},
		{file: "gcs_push.json", refs: []format.VersionRef{ref("gs://lake-gcs/warehouse/events.lance", 4)}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			body, attrs := eventtest.LoadSample(t, tc.file)
			evs, err := Decode(body, attrs)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			var refs []format.VersionRef
			var dropped []string
			for _, ev := range evs {
				r, err := roots.Ref(ev)
				if err != nil {
					dropped = append(dropped, DropReason(err))
					continue
				}
				refs = append(refs, r)
			}
			if !equalRefs(refs, tc.refs) {
				t.Errorf("refs = %v, want %v", refs, tc.refs)
			}
			if strings.Join(dropped, ",") != strings.Join(tc.dropped, ",") {
				t.Errorf("dropped = %v, want %v", dropped, tc.dropped)
			}
		})
	}
}

func equalRefs(a, b []format.VersionRef) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		attrs map[string]string
	}{
		{"not json", `Records: []`, nil},
		{"empty", ``, nil},
		{"unknown shape", `{"hello":"world"}`, nil},
		{"record without s3", `{"Records":[{"eventVersion":"2.1","eventName":"ObjectCreated:Put"}]}`, nil},
		{"major version 3", `{"Records":[{"eventVersion":"3.0","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`, nil},
		{"bad key escape", `{"Records":[{"eventVersion":"2.1","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a%zz"}}}]}`, nil},
		{"sns message not json", `{"Type":"Notification","Message":"hello"}`, nil},
		{"sns nested too deep", nestSNS(`{"Records":[]}`, 4), nil},
		{"eventbridge without key", `{"source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"b"}}}`, nil},
		{"gcs attributes incomplete", `{}`, map[string]string{"eventType": "OBJECT_FINALIZE", "bucketId": "b"}},
		{"gcs payload disagrees", `{"name":"other","bucket":"b"}`, map[string]string{"eventType": "OBJECT_FINALIZE", "bucketId": "b", "objectId": "k", "payloadFormat": "JSON_API_V1"}},
		{"gcs push bad base64", `{"message":{"attributes":{"eventType":"OBJECT_FINALIZE","bucketId":"b","objectId":"k"},"data":"***"}}`, nil},
		{"oversized", `{"Records":[` + strings.Repeat(" ", maxMessageBytes) + `]}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := Decode([]byte(tc.body), tc.attrs)
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("Decode = %v, %v; want ErrUndecodable", evs, err)
			}
		})
	}
}

func nestSNS(inner string, depth int) string {
	for range depth {
		b, _ := json.Marshal(map[string]string{"Type": "Notification", "Message": inner})
		inner = string(b)
	}
	return inner
}

func TestDecodeSNSInnerEventBridge(t *testing.T) {
	body, _ := eventtest.LoadSample(t, "eventbridge_created.json")
	evs, err := Decode([]byte(nestSNS(string(body), 1)), nil)
	if err != nil || len(evs) != 1 || evs[0].Key != "warehouse/events.lance/_versions/18446744073709551612.manifest" {
		t.Fatalf("Decode = %v, %v", evs, err)
	}
}
