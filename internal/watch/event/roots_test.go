package event

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/watch/event/eventtest"
)

const v1 = "18446744073709551614.manifest" // V2 name of version 1

func TestRootsRef(t *testing.T) {
	roots, err := ParseRoots("s3://lake/tables", "s3://other/one/t.lance", "gs://g", "file:///srv/lance")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		ev     ObjectEvent
		table  string // want this table at version 1, or
		reason string // this drop reason
	}{
		{"table under root", s3ev("lake", "tables/t.lance/_versions/"+v1), "s3://lake/tables/t.lance", ""},
		{"nested table", s3ev("lake", "tables/a/b/t.lance/_versions/1.manifest"), "s3://lake/tables/a/b/t.lance", ""},
		{"root is the table", s3ev("lake", "tables/_versions/"+v1), "s3://lake/tables", ""},
		{"exact table root", s3ev("other", "one/t.lance/_versions/"+v1), "s3://other/one/t.lance", ""},
		{"whole-bucket root", ObjectEvent{SchemeGCS, "g", "x.lance/_versions/1.manifest", true}, "gs://g/x.lance", ""},
		{"file root", ObjectEvent{"file", "", "srv/lance/t.lance/_versions/1.manifest", true}, "file:///srv/lance/t.lance", ""},

		{"dotdot", s3ev("lake", "tables/../secret/t.lance/_versions/"+v1), "", "unsafe_key"},
		{"dotdot after table", s3ev("lake", "tables/t.lance/../../x/_versions/"+v1), "", "unsafe_key"},
		{"dot segment", s3ev("lake", "tables/./t.lance/_versions/"+v1), "", "unsafe_key"},
		{"double slash", s3ev("lake", "tables//t.lance/_versions/"+v1), "", "unsafe_key"},
		{"leading slash", s3ev("lake", "/tables/t.lance/_versions/"+v1), "", "unsafe_key"},
		{"literal percent (double-encoded slash)", s3ev("lake", "tables%2F..%2Fx/t.lance/_versions/"+v1), "", "unsafe_key"},
		{"backslash", s3ev("lake", `tables\..\x/t.lance/_versions/`+v1), "", "unsafe_key"},
		{"nul byte", s3ev("lake", "tables/t.lance\x00/_versions/"+v1), "", "unsafe_key"},
		{"question mark", s3ev("lake", "tables/t.lance?x=1/_versions/"+v1), "", "unsafe_key"},
		{"hash", s3ev("lake", "tables/t#.lance/_versions/"+v1), "", "unsafe_key"},
		{"invalid utf8", s3ev("lake", "tables/\xff.lance/_versions/"+v1), "", "unsafe_key"},
		{"bucket with slash", s3ev("lake/tables", "t.lance/_versions/"+v1), "", "unsafe_key"},
		{"bucket with dotdot path", s3ev("lake/../other", "one/t.lance/_versions/"+v1), "", "unsafe_key"},

		{"string-prefix sibling root", s3ev("lake", "tables2/t.lance/_versions/"+v1), "", "outside_roots"},
		{"sibling by suffix", s3ev("lake", "tablesx.lance/_versions/"+v1), "", "outside_roots"},
		{"parent of root", s3ev("lake", "_versions/"+v1), "", "outside_roots"},
		{"other bucket", s3ev("lake2", "tables/t.lance/_versions/"+v1), "", "outside_roots"},
		{"other scheme same bucket", ObjectEvent{SchemeGCS, "lake", "tables/t.lance/_versions/" + v1, true}, "", "outside_roots"},
		{"sibling of exact table root", s3ev("other", "one/t2.lance/_versions/"+v1), "", "outside_roots"},
		{"odd prefix", s3ev("lake", "xtables/t.lance/_versions/"+v1), "", "outside_roots"},

		{"data file", s3ev("lake", "tables/t.lance/data/0101.lance"), "", "not_manifest"},
		{"detached", s3ev("lake", "tables/t.lance/_versions/d9223372036854775809.manifest"), "", "not_manifest"},
		{"staging", s3ev("lake", "tables/t.lance/_versions/"+v1+"-0d5b1c1e-7a39-4c1f-9d8c-2f1c9e7b6a55"), "", "not_manifest"},
		{"tmp", s3ev("lake", "tables/t.lance/_versions/.tmp_1.manifest"), "", "not_manifest"},
		{"version zero", s3ev("lake", "tables/t.lance/_versions/0.manifest"), "", "not_manifest"},
		{"manifest below versions", s3ev("lake", "tables/t.lance/_versions/x/1.manifest"), "", "not_manifest"},
		{"reserved segment in table", s3ev("lake", "tables/t.lance/_transactions/_versions/1.manifest"), "", "not_manifest"},
		{"hint", s3ev("lake", "tables/t.lance/_versions/latest_version_hint.json"), "", "not_manifest"},
		{"branch", s3ev("lake", "tables/t.lance/tree/feature/x/_versions/"+v1), "", "branch"},
		{"namespace table", s3ev("lake", "tables/__manifest/_versions/"+v1), "", "branch"},
		{"deleted", ObjectEvent{SchemeS3, "lake", "tables/t.lance/_versions/" + v1, false}, "", "not_created"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := roots.Ref(tc.ev)
			if tc.reason != "" {
				if err == nil || DropReason(err) != tc.reason {
					t.Fatalf("Ref = %v, %v; want drop %s", r, err, tc.reason)
				}
				return
			}
			if err != nil || r.Table != tc.table || r.Version != 1 {
				t.Fatalf("Ref = %v, %v; want %s@1", r, err, tc.table)
			}
		})
	}
}

func s3ev(bucket, key string) ObjectEvent { return ObjectEvent{SchemeS3, bucket, key, true} }

// TestEncodedKeysThroughDecode sends hostile keys the way S3 would deliver
// them (URL-encoded in the event JSON), so the decoding step is covered too.
func TestEncodedKeysThroughDecode(t *testing.T) {
	roots, err := ParseRoots("s3://lake/tables")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"tables%2F..%2Fsecret%2Ft.lance%2F_versions%2F" + v1: "unsafe_key",
		"tables%2Ft.lance%2F_versions%2F" + v1:               "", // %2F is a plain slash in a key
		"tables%252F..%252Fx%2Ft.lance%2F_versions%2F" + v1:  "unsafe_key",
		"tables/%2E%2E/x.lance/_versions/" + v1:              "unsafe_key",
		"tables/%2F/t.lance/_versions/" + v1:                 "unsafe_key",
		"tables2/t.lance/_versions/" + v1:                    "outside_roots",
		"tables/t+1.lance/_versions/" + v1:                   "",
		"tables/t.lance/_versions/%00" + v1:                  "unsafe_key",
	}
	for key, reason := range cases {
		body, _ := json.Marshal(map[string]any{"Records": []any{map[string]any{
			"eventVersion": "2.1", "eventName": "ObjectCreated:Put",
			"s3": map[string]any{"bucket": map[string]any{"name": "lake"}, "object": map[string]any{"key": key}},
		}}})
		evs, err := Decode(body, nil)
		if err != nil || len(evs) != 1 {
			t.Fatalf("%s: Decode = %v, %v", key, evs, err)
		}
		r, err := roots.Ref(evs[0])
		switch {
		case reason == "" && err != nil:
			t.Errorf("%s: Ref error %v", key, err)
		case reason == "" && !strings.HasPrefix(r.Table, "s3://lake/tables/"):
			t.Errorf("%s: table %s", key, r.Table)
		case reason != "" && (err == nil || DropReason(err) != reason):
			t.Errorf("%s: Ref = %v, %v; want %s", key, r, err, reason)
		}
	}
}

func TestParseRootRejects(t *testing.T) {
	for _, s := range []string{
		"", "tables", "http://x/y", "s3://", "s3:///x", "s3://b/a/../c", "s3://b/a//c",
		"s3://b/a%2Fc", "s3://b/x#frag", "file://host/x", "file:///", "gs://b/./x", "s3://user@b/x",
	} {
		if _, err := ParseRoot(s); err == nil {
			t.Errorf("ParseRoot(%q) accepted", s)
		}
	}
	r, err := ParseRoot("s3://b/a/b/")
	if err != nil || r.URI() != "s3://b/a/b" {
		t.Fatalf("ParseRoot trailing slash = %v, %v", r, err)
	}
}

// FuzzDecode checks that no payload panics the decoder and that whatever
// comes out of Decode+Ref stays inside the allow-listed roots.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		body, attrs := eventtest.LoadSample(f, filepath.Base(p))
		f.Add(body, attrs["eventType"], attrs["bucketId"], attrs["objectId"])
	}
	f.Add([]byte(`{"Records":[{"eventVersion":"2.1","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"lake"},"object":{"key":"tables%2F..%2Fx/_versions/1.manifest"}}}]}`), "", "", "")
	f.Add([]byte(`{}`), "OBJECT_FINALIZE", "lake-gcs", "warehouse/../t/_versions/1.manifest")
	roots, err := ParseRoots("s3://lake/warehouse", "gs://lake-gcs/warehouse")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, eventType, bucketID, objectID string) {
		var attrs map[string]string
		if eventType != "" || bucketID != "" || objectID != "" {
			attrs = map[string]string{"eventType": eventType, "bucketId": bucketID, "objectId": objectID}
		}
		evs, err := Decode(body, attrs)
		if err != nil {
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("error does not wrap ErrUndecodable: %v", err)
			}
			return
		}
		for _, ev := range evs {
			r, err := roots.Ref(ev)
			if err != nil {
				continue
			}
			if !strings.HasPrefix(r.Table, "s3://lake/warehouse") && !strings.HasPrefix(r.Table, "gs://lake-gcs/warehouse") {
				t.Fatalf("table %q escaped the roots (event %+v)", r.Table, ev)
			}
			rest := r.Table[strings.Index(r.Table, "/warehouse")+len("/warehouse"):]
			if rest != "" && rest[0] != '/' {
				t.Fatalf("table %q is a string-prefix sibling of a root", r.Table)
			}
			for _, seg := range strings.Split(rest, "/")[1:] {
				if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "%\\?#") {
					t.Fatalf("table %q has unsafe segment %q", r.Table, seg)
				}
			}
			if r.Version == 0 {
				t.Fatalf("version 0 from %+v", ev)
			}
		}
	})
}

func TestRootsOpenURI(t *testing.T) {
	roots, err := ParseRoots("s3://lake/a?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1", "s3://lake/a/b?region=eu-west-1", "gs://g")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"s3://lake/a/t.lance":   "s3://lake/a/t.lance?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1",
		"s3://lake/a/b/t.lance": "s3://lake/a/b/t.lance?region=eu-west-1", // the most specific root
		"s3://lake/ab/t.lance":  "s3://lake/ab/t.lance",                   // no root contains it
		"gs://g/t.lance":        "gs://g/t.lance",                         // root without a query
	}
	for table, want := range cases {
		if got := roots.OpenURI(table); got != want {
			t.Errorf("OpenURI(%s) = %s, want %s", table, got, want)
		}
	}
	// Matching ignores the query.
	if r, err := roots.Ref(s3ev("lake", "a/t.lance/_versions/"+v1)); err != nil || r.Table != "s3://lake/a/t.lance" {
		t.Fatalf("Ref = %v, %v", r, err)
	}
}
