package store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/lanced-dev/lanced/internal/store"
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
