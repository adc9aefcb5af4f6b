package storetest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// BucketName is the bucket StartS3 creates.
const BucketName = "lance"

// S3Server is an in-process S3 emulator on 127.0.0.1 with a random port,
// path-style addressing and bucket "lance". It honours If-None-Match: * and
// If-Match: <ETag> on PutObject atomically: gofakes3 v1.2.0's s3mem backend
// checks both (gofakes3.CheckPutConditions) and stores the object under one
// lock, answering 412 otherwise, as the conformance races (PutIfAbsentRace,
// PutIfMatchRace, PutIfMatchCounter) show; no wrapper models them.
type S3Server struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Backend is the storage behind the server (after any wrapping).
	Backend gofakes3.Backend
	srv     *httptest.Server
}

// StartS3 starts an emulator for the duration of the test.
func StartS3(t testing.TB) *S3Server {
	return StartS3With(t, nil)
}

// StartS3With is StartS3 with the s3mem backend passed through wrap first
// (nil: none), e.g. to publish notifications for committed objects.
func StartS3With(t testing.TB, wrap func(gofakes3.Backend) gofakes3.Backend) *S3Server {
	t.Helper()
	return StartS3Wrapped(t, wrap, nil)
}

// StartS3WithHandler is StartS3 with the emulator's HTTP handler passed
// through wrap (e.g. a fault layer).
func StartS3WithHandler(t testing.TB, wrap func(http.Handler) http.Handler) *S3Server {
	t.Helper()
	return StartS3Wrapped(t, nil, wrap)
}

// StartS3Wrapped wraps both the backend (nil: none) and the HTTP handler
// (nil: none).
func StartS3Wrapped(t testing.TB, wrap func(gofakes3.Backend) gofakes3.Backend, wrapHandler func(http.Handler) http.Handler) *S3Server {
	t.Helper()
	mem := s3mem.New()
	if err := mem.CreateBucket(BucketName); err != nil {
		t.Fatalf("storetest: create bucket: %v", err)
	}
	var be gofakes3.Backend = mem
	if wrap != nil {
		be = wrap(mem)
	}
	faker := gofakes3.New(be, gofakes3.WithAutoBucket(false))
	var h http.Handler = faker.Server()
	if wrapHandler != nil {
		h = wrapHandler(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &S3Server{Endpoint: srv.URL, Backend: be, srv: srv}
}

// URI returns an s3:// URI for prefix (no leading '/') that store.Open
// accepts: path-style, anonymous (gofakes3 checks no signatures), and with
// checksums only when required (the SDK's default aws-chunked trailers are
// not what third-party stores expect).
func (s *S3Server) URI(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", "us-east-1")
	q.Set("use_path_style", "true")
	q.Set("anonymous", "true")
	q.Set("request_checksum_calculation", "when_required")
	q.Set("response_checksum_validation", "when_required")
	u := url.URL{Scheme: "s3", Host: BucketName, Path: "/" + strings.Trim(prefix, "/"), RawQuery: q.Encode()}
	if strings.Trim(prefix, "/") == "" {
		u.Path = ""
	}
	return u.String()
}

// LanceURI returns the URI real Lance uses for prefix: s3://lance/prefix.
func (s *S3Server) LanceURI(prefix string) string {
	p := strings.Trim(prefix, "/")
	if p == "" {
		return "s3://" + BucketName
	}
	return "s3://" + BucketName + "/" + p
}

// LanceStorageOptions returns the storage options real Lance (lance 8.0.0 via
// @lancedb/lancedb) needs to use this emulator: endpoint, dummy credentials
// (Lance must not fall through to IMDS), region, and allow_http for the
// plain-HTTP endpoint. The short timeouts make a misconfiguration fail fast.
func (s *S3Server) LanceStorageOptions() map[string]string {
	return map[string]string{
		"aws_endpoint":          s.Endpoint,
		"aws_access_key_id":     "lanced-test",
		"aws_secret_access_key": "lanced-test",
		"aws_region":            "us-east-1",
		"allow_http":            "true",
		"connect_timeout":       "5s",
		"timeout":               "60s",
	}
}
