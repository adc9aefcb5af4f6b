package storetest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Emulator is what the S3 and GCS emulators have in common: URIs for
// store.Open and for real Lance, and Lance's storage options.
type Emulator interface {
	URI(prefix string) string
	LanceURI(prefix string) string
	LanceStorageOptions() map[string]string
}

var (
	_ Emulator = (*S3Server)(nil)
	_ Emulator = (*GCSServer)(nil)
)

// GCSServer is an in-process GCS emulator (fsouza/fake-gcs-server with its
// in-memory backend) on 127.0.0.1 with a random port, serving the JSON API
// under /storage/v1/, uploads under /upload/storage/v1/ and XML-API reads
// (/<bucket>/<object>), with bucket "lance".
//
// Preconditions: fake-gcs-server v1.56.1 honours ifGenerationMatch=0 (the
// DoesNotExist condition PutIfAbsent sends) atomically: its memory backend
// compares the live generation and stores the object under one write lock,
// and answers 412 otherwise; the same holds for ifGenerationMatch=<n> (the
// GenerationMatch condition PutIfMatch sends). No wrapper models them; the
// conformance races (16 writers, 10 rounds, exactly one winner each;
// PutIfMatchCounter, no increment lost) and
// TestGCSPutIfAbsentIsOneConditionalUpload show it.
//
// Cost: the memory backend finds objects by a linear scan (formatting every
// object's ID), so each request costs O(objects in the bucket). Keep test
// buckets to a few thousand objects.
type GCSServer struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Fake is the emulator behind any wrapping handler.
	Fake *fakestorage.Server
	srv  *httptest.Server
}

// StartGCS starts a GCS emulator for the duration of the test.
func StartGCS(t testing.TB) *GCSServer {
	return StartGCSWith(t, nil)
}

// StartGCSWith is StartGCS with the emulator's HTTP handler passed through
// wrap first (nil: none), e.g. to publish notifications or inject faults.
func StartGCSWith(t testing.TB, wrap func(http.Handler) http.Handler) *GCSServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("storetest: listen: %v", err)
	}
	endpoint := "http://" + l.Addr().String()
	fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true,
		Scheme:     "http",
		// Resumable-upload Location headers and XML-API reads name this
		// host, so they must be the listener's address.
		ExternalURL: endpoint,
		PublicHost:  l.Addr().String(),
	})
	if err != nil {
		l.Close()
		t.Fatalf("storetest: fake-gcs-server: %v", err)
	}
	fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: BucketName})
	var h http.Handler = newGCSXML(fake.HTTPHandler(), BucketName)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		fake.Stop()
	})
	return &GCSServer{Endpoint: endpoint, Fake: fake, srv: srv}
}

// URI returns a gs:// URI for prefix (no leading '/') that store.Open
// accepts: the emulator as endpoint, no credentials.
func (s *GCSServer) URI(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("anonymous", "true")
	u := url.URL{Scheme: "gs", Host: BucketName, RawQuery: q.Encode()}
	if p := strings.Trim(prefix, "/"); p != "" {
		u.Path = "/" + p
	}
	return u.String()
}

// LanceStorageOptions returns the storage options real Lance (lance 8.0.0
// via @lancedb/lancedb, object_store's GCS client) needs for this emulator:
// a service-account key whose gcs_base_url is the emulator and whose
// disable_oauth skips the token exchange (object_store requires the
// client_email, private_key and private_key_id fields to be present, empty
// is fine), and allow_http for the plain-HTTP endpoint. The short timeouts
// make a misconfiguration fail fast.
func (s *GCSServer) LanceStorageOptions() map[string]string {
	key, _ := json.Marshal(map[string]any{
		"gcs_base_url": s.Endpoint, "disable_oauth": true,
		"client_email": "", "private_key": "", "private_key_id": "",
	})
	return map[string]string{
		"google_service_account_key": string(key),
		"allow_http":                 "true",
		"connect_timeout":            "5s",
		"timeout":                    "60s",
	}
}

// LanceURI returns the URI real Lance uses for prefix: gs://lance/prefix.
func (s *GCSServer) LanceURI(prefix string) string {
	p := strings.Trim(prefix, "/")
	if p == "" {
		return "gs://" + BucketName
	}
	return "gs://" + BucketName + "/" + p
}
