package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// opRecorder records the API operation of every request before the
// emulator serves it, with the object keys or list prefix it touched, as
// name says them.
type opRecorder struct {
	next http.Handler
	name func(*http.Request) (op string, keys []string)
	mu   sync.Mutex
	ops  map[string]int
	keys []string // bucket-relative keys and list prefixes
}

func (r *opRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	op, keys := r.name(req)
	r.mu.Lock()
	if r.ops != nil {
		r.ops[op]++
		r.keys = append(r.keys, keys...)
	}
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

// start clears what was recorded and starts recording.
func (r *opRecorder) start() {
	r.mu.Lock()
	r.ops, r.keys = map[string]int{}, nil
	r.mu.Unlock()
}

// recorded is what was recorded since start.
func (r *opRecorder) recorded() (map[string]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops, r.keys
}

// s3Keys names a request's S3 operation and the keys it touched: the key
// or list prefix, or for DeleteObjects the keys in its body (read and
// handed on).
func s3Keys(req *http.Request) (string, []string) {
	op, key := s3Operation(req)
	if op != "DeleteObjects" {
		return op, []string{key}
	}
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	var del struct {
		Objects []struct{ Key string } `xml:"Object"`
	}
	_ = xml.Unmarshal(body, &del)
	keys := []string{}
	for _, o := range del.Objects {
		keys = append(keys, o.Key)
	}
	return op, keys
}

// s3Operation names a path-style request's S3 API operation and the key
// (or, for listings, the prefix) it addresses.
func s3Operation(req *http.Request) (op, key string) {
	q := req.URL.Query()
	path := strings.TrimPrefix(req.URL.Path, "/")
	bucketLevel := !strings.Contains(path, "/")
	if _, k, ok := strings.Cut(path, "/"); ok {
		key = k
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case bucketLevel && q.Has("location"):
			return "GetBucketLocation", ""
		case bucketLevel && q.Get("list-type") == "2":
			return "ListObjectsV2", q.Get("prefix")
		case bucketLevel:
			return "ListObjects", q.Get("prefix")
		}
		return "GetObject", key
	case http.MethodHead:
		if bucketLevel {
			return "HeadBucket", ""
		}
		return "HeadObject", key
	case http.MethodPut:
		switch {
		case q.Has("partNumber"):
			return "UploadPart", key
		case req.Header.Get("X-Amz-Copy-Source") != "":
			return "CopyObject", key
		}
		return "PutObject", key
	case http.MethodPost:
		switch {
		case q.Has("delete"):
			return "DeleteObjects", key
		case q.Has("uploads"):
			return "CreateMultipartUpload", key
		case q.Has("uploadId"):
			return "CompleteMultipartUpload", key
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload", key
		}
		return "DeleteObject", key
	}
	return req.Method + " " + req.URL.RawQuery, key
}

// s3Actions maps S3 API operations onto the IAM actions that authorize them
// (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html).
var s3Actions = map[string]string{
	"GetObject": "s3:GetObject", "HeadObject": "s3:GetObject",
	"ListObjectsV2": "s3:ListBucket", "ListObjects": "s3:ListBucket", "HeadBucket": "s3:ListBucket",
	"PutObject": "s3:PutObject", "CreateMultipartUpload": "s3:PutObject", "UploadPart": "s3:PutObject",
	"CompleteMultipartUpload": "s3:PutObject", "AbortMultipartUpload": "s3:AbortMultipartUpload",
	"DeleteObject": "s3:DeleteObject", "DeleteObjects": "s3:DeleteObject",
	"GetBucketLocation": "s3:GetBucketLocation",
}

// documentedS3Policy reads the bucket policy JSON that docs/daemon.md
// documents (the json block after the "least-privilege-s3" marker) and
// returns its actions and resources.
func documentedS3Policy(t *testing.T) (actions, resources []string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/daemon.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(doc, []byte("<!-- least-privilege-s3 -->"))
	if !ok {
		t.Fatal("docs/daemon.md: no least-privilege-s3 marker")
	}
	_, rest, _ = bytes.Cut(rest, []byte("```json\n"))
	block, _, ok := bytes.Cut(rest, []byte("```"))
	if !ok {
		t.Fatal("docs/daemon.md: no json block after the least-privilege-s3 marker")
	}
	var pol struct {
		Statement []struct {
			Action   []string
			Resource any
		}
	}
	if err := json.Unmarshal(block, &pol); err != nil {
		t.Fatalf("docs/daemon.md: bucket policy: %v", err)
	}
	for _, st := range pol.Statement {
		actions = append(actions, st.Action...)
		switch r := st.Resource.(type) {
		case string:
			resources = append(resources, r)
		case []any:
			for _, x := range r {
				resources = append(resources, x.(string))
			}
		}
	}
	sort.Strings(actions)
	return slices.Compact(actions), resources
}

// TestS3OperationsMatchDocumentedLeastPrivilege records every S3 request
// lanced makes while compacting and cleaning real-Lance tables in the S3
// emulator and checks that the IAM actions they need are exactly the ones
// the documented bucket policy grants (s3:AbortMultipartUpload is granted
// for failed large uploads and may go unused), and that every key and list
// prefix lies under the tables' prefix, as the policy's resources require.
func TestS3OperationsMatchDocumentedLeastPrivilege(t *testing.T) {
	oracle.Require(t)
	mem := s3mem.New()
	if err := mem.CreateBucket(storetest.BucketName); err != nil {
		t.Fatal(err)
	}
	rec := &opRecorder{next: gofakes3.New(mem, gofakes3.WithAutoBucket(false)).Server(), name: s3Keys}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s3 := &storetest.S3Server{Endpoint: srv.URL}
	so := oracle.Options{StorageOptions: s3.LanceStorageOptions()}
	const prefix = "warehouse"
	var uris []string
	for _, sc := range []string{"appends", "deletes_arrow"} {
		lance := oracle.Build(t, sc, s3.LanceURI(prefix), so)
		uris = append(uris, s3.URI(strings.TrimPrefix(lance, "s3://"+storetest.BucketName+"/")))
	}

	rec.start()
	compactAndCleanup(t, uris)
	ops, keys := rec.recorded()
	t.Logf("S3 operations during compact + cleanup: %v", ops)
	documented, resources := documentedS3Policy(t)
	checkPrivileges(t, ops, func(op string) []string {
		if a, ok := s3Actions[op]; ok {
			return []string{a}
		}
		return nil
	}, []string{"s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:DeleteObject"},
		documented, map[string]bool{"s3:AbortMultipartUpload": true})
	checkKeysUnder(t, keys, prefix)
	if !slices.Contains(resources, "arn:aws:s3:::BUCKET/PREFIX/*") || !slices.Contains(resources, "arn:aws:s3:::BUCKET") {
		t.Errorf("documented resources %v: want the bucket (for listing) and BUCKET/PREFIX/* (objects)", resources)
	}
}

// compactAndCleanup runs lanced compact and lanced cleanup (everything
// old enough) on each table.
func compactAndCleanup(t *testing.T, uris []string) {
	t.Helper()
	for _, uri := range uris {
		var out bytes.Buffer
		if code := runMain([]string{"compact", uri}, &out, &out); code != 0 {
			t.Fatalf("compact %s: exit %d\n%s", uri, code, out.String())
		}
		out.Reset()
		if code := runMain([]string{"cleanup", "--older-than", "0", "--unverified-after", "0", uri}, &out, &out); code != 0 {
			t.Fatalf("cleanup %s: exit %d\n%s", uri, code, out.String())
		}
	}
}

// checkPrivileges compares the permissions the recorded operations need
// (perms maps an operation to them; nil: unknown) with the documented
// ones: every needed one documented, every documented one used (except
// those in mayBeUnused), and each of need exercised by the run.
func checkPrivileges(t *testing.T, ops map[string]int, perms func(op string) []string, need, documented []string, mayBeUnused map[string]bool) {
	t.Helper()
	used := map[string]bool{}
	for op := range ops {
		ps := perms(op)
		if ps == nil {
			t.Errorf("lanced issued %s, which the least-privilege mapping does not know", op)
		}
		for _, p := range ps {
			used[p] = true
		}
	}
	for _, p := range need {
		if !used[p] {
			t.Errorf("compact + cleanup never needed %s: the run did not exercise what the documentation grants", p)
		}
	}
	for p := range used {
		if !slices.Contains(documented, p) {
			t.Errorf("lanced needs %s, the documentation does not grant it", p)
		}
	}
	for _, p := range documented {
		if !used[p] && !mayBeUnused[p] {
			t.Errorf("the documentation grants %s, which lanced never used", p)
		}
	}
}

// checkKeysUnder fails for every recorded key or list prefix outside
// prefix.
func checkKeysUnder(t *testing.T, keys []string, prefix string) {
	t.Helper()
	for _, k := range keys {
		if k != prefix && !strings.HasPrefix(k, prefix+"/") {
			t.Errorf("request outside the tables' prefix: %q", k)
		}
	}
}
