package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// TestPutIfAbsentRetriesConditionalRequestConflict: S3 answers a
// conditional PUT racing another with 409 ConditionalRequestConflict; that
// is not a lost race, so PutIfAbsent asks again.
func TestPutIfAbsentRetriesConditionalRequestConflict(t *testing.T) {
	mem := s3mem.New()
	if err := mem.CreateBucket("lance"); err != nil {
		t.Fatal(err)
	}
	inner := gofakes3.New(mem).Server()
	var conflicts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" && conflicts.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource.</Message></Error>`))
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	q := url.Values{"endpoint": {srv.URL}, "region": {"us-east-1"}, "use_path_style": {"true"}, "anonymous": {"true"},
		"request_checksum_calculation": {"when_required"}, "response_checksum_validation": {"when_required"}}
	b := open(t, "s3://lance/t?"+q.Encode())
	ctx := context.Background()

	conflicts.Store(2)
	if err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("m1")); err != nil {
		t.Fatalf("PutIfAbsent after two 409s: %v", err)
	}
	if got, _ := b.Get(ctx, "_versions/1.manifest"); string(got) != "m1" {
		t.Errorf("content %q", got)
	}
	conflicts.Store(1)
	err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("m2"))
	if !errors.Is(err, store.ErrPreconditionFailed) {
		t.Errorf("existing key after a 409: %v, want ErrPreconditionFailed", err)
	}
	conflicts.Store(100)
	err = b.PutIfAbsent(ctx, "_versions/2.manifest", []byte("m"))
	if err == nil || errors.Is(err, store.ErrPreconditionFailed) || store.CodeOf(err) != store.Unavailable {
		t.Errorf("endless 409s: %v (code %v), want an Unavailable error", err, store.CodeOf(err))
	}
}

// TestDeleteManyUsesDeleteObjectsOnS3: one request per 1000 keys on S3.
func TestDeleteManyUsesDeleteObjectsOnS3(t *testing.T) {
	s3 := storetest.StartS3(t)
	reg := prometheus.NewRegistry()
	b, err := store.Instrument(open(t, s3.URI("dm")), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var keys []string
	for i := range 1200 {
		k := fmt.Sprintf("data/%04d.lance", i)
		keys = append(keys, k)
		if err := b.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteMany(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, reg, "lanced_store_operations_total", "op=delete_objects"); n != 2 {
		t.Errorf("DeleteObjects requests = %v, want 2 for 1200 keys", n)
	}
	left := 0
	_ = b.List(ctx, "", func(store.Object) error { left++; return nil })
	if left != 0 {
		t.Errorf("%d objects left", left)
	}
}

// TestGCSPutIfAbsentIsOneConditionalUpload: on gs:// PutIfAbsent is one
// upload request with ifGenerationMatch=0 (GCS's "create only if absent"
// precondition), and a lost race comes back as 412 → ErrPreconditionFailed.
func TestGCSPutIfAbsentIsOneConditionalUpload(t *testing.T) {
	var mu sync.Mutex
	var reqs []string
	gcs := storetest.StartGCSWith(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/upload/") {
				mu.Lock()
				reqs = append(reqs, r.URL.Query().Get("name")+" ifGenerationMatch="+r.URL.Query().Get("ifGenerationMatch"))
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	b := open(t, gcs.URI("t"))
	ctx := context.Background()
	if err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("m1")); err != nil {
		t.Fatal(err)
	}
	err := b.PutIfAbsent(ctx, "_versions/1.manifest", []byte("m2"))
	if !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("second PutIfAbsent: %v, want ErrPreconditionFailed", err)
	}
	want := []string{"t/_versions/1.manifest ifGenerationMatch=0", "t/_versions/1.manifest ifGenerationMatch=0"}
	if !slices.Equal(reqs, want) {
		t.Errorf("upload requests %q, want %q", reqs, want)
	}
	if got, _ := b.Get(ctx, "_versions/1.manifest"); string(got) != "m1" {
		t.Errorf("content %q, want m1", got)
	}
}
