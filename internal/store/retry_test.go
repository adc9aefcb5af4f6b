package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/objfault"
)

// faultyEmulators starts S3 and GCS emulators behind a fault layer.
func faultyEmulators(t *testing.T, run func(t *testing.T, uri string, fh *objfault.Handler)) {
	for _, name := range []string{"s3", "gcs"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var fh *objfault.Handler
			wrap := func(d objfault.Dialect) func(http.Handler) http.Handler {
				return func(h http.Handler) http.Handler {
					fh = objfault.Wrap(h, objfault.Config{Dialect: d})
					return fh
				}
			}
			var uri string
			if name == "s3" {
				uri = storetest.StartS3WithHandler(t, wrap(objfault.S3)).URI("retry")
			} else {
				uri = storetest.StartGCSWith(t, wrap(objfault.GCS)).URI("retry")
			}
			run(t, uri, fh)
		})
	}
}

// onKey matches requests for one object (or a listing of its prefix),
// however the dialect spells the path.
func onKey(method, key string) func(r *http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != method {
			return false
		}
		return strings.Contains(r.URL.Path, key) || strings.Contains(r.URL.RawQuery, key)
	}
}

// TestRetriesTransientFailures: every read-side operation (and put and
// delete) succeeds through a run of transient failures longer than the
// SDKs' own retries (4 in a row on the same request), for each kind of
// transient failure; the retries show in lanced_store_retries_total.
func TestRetriesTransientFailures(t *testing.T) {
	faultyEmulators(t, func(t *testing.T, uri string, fh *objfault.Handler) {
		reg := prometheus.NewRegistry()
		base := open(t, uri)
		b, err := store.Instrument(store.WithRetry(base, store.Retry{Attempts: 8, Base: time.Millisecond, Max: 20 * time.Millisecond}), reg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		data := bytes.Repeat([]byte("0123456789abcdef"), 256)
		kinds := []objfault.Kind{objfault.Internal, objfault.SlowDown, objfault.TooMany, objfault.Reset, objfault.ShortBody}
		// The kinds run side by side (the SDKs' own backoff dominates).
		t.Run("kinds", func(t *testing.T) {
			for _, kind := range kinds {
				t.Run(string(kind), func(t *testing.T) {
					t.Parallel()
					key := "obj-" + string(kind)
					if err := b.Put(ctx, key, data); err != nil {
						t.Fatal(err)
					}
					for _, op := range readOps(ctx, b, key, data) {
						if kind == objfault.ShortBody && op.method != http.MethodGet {
							continue
						}
						method := op.method
						if strings.HasPrefix(uri, "gs://") && op.name == "attributes" {
							method = http.MethodGet // GCS reads metadata with a GET
						}
						// Faults a try did not use carry over to the next op.
						fh.AddRule(&objfault.Rule{Match: onKey(method, key), Kind: kind, Times: 4})
						if err := op.do(); err != nil {
							t.Errorf("%s through 4 × %s: %v", op.name, kind, err)
						}
						if got := fh.Injected(kind); got == 0 {
							t.Errorf("%s: no %s injected", op.name, kind)
						}
					}
				})
			}
		})
		// Put and delete, through a run of 503s.
		for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
			fh.AddRule(&objfault.Rule{Match: onKey(m, "obj-write"), Kind: objfault.SlowDown, Times: 4})
		}
		if err := b.Put(ctx, "obj-write", data); err != nil {
			t.Errorf("put through 4 × 503: %v", err)
		}
		if err := b.Delete(ctx, "obj-write"); err != nil {
			t.Errorf("delete through 4 × 503: %v", err)
		}
		if _, err := b.Attributes(ctx, "obj-write"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after delete: %v, want not found", err)
		}
		retries := retriesTotal(reg)
		if retries == 0 {
			t.Error("lanced_store_retries_total is 0")
		}
		t.Logf("%d requests, injected %v, store retries %v", fh.Requests(), fh.Counts(), retries)
	})
}

// retryOp is one read-side operation of the store, with the HTTP method its
// requests use; do fails when the operation errs or returns wrong content.
type retryOp struct {
	name, method string
	do           func() error
}

// readOps are the read-side operations on key, whose content is data.
func readOps(ctx context.Context, b *store.Bucket, key string, data []byte) []retryOp {
	return []retryOp{
		{"get", http.MethodGet, func() error {
			got, err := b.Get(ctx, key)
			if err == nil && !bytes.Equal(got, data) {
				return errors.New("wrong bytes")
			}
			return err
		}},
		{"get_range", http.MethodGet, func() error {
			r, err := b.GetRange(ctx, key, 100, 3000)
			if err != nil {
				return err
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err == nil && !bytes.Equal(got, data[100:3100]) {
				return errors.New("wrong bytes")
			}
			return err
		}},
		{"read_at", http.MethodGet, func() error {
			ra, err := b.OpenReaderAt(ctx, key)
			if err != nil {
				return err
			}
			defer ra.Close()
			p := make([]byte, 1000)
			if _, err := ra.ReadAt(p, 2000); err != nil {
				return err
			}
			if !bytes.Equal(p, data[2000:3000]) {
				return errors.New("wrong bytes")
			}
			return nil
		}},
		{"attributes", http.MethodHead, func() error {
			a, err := b.Attributes(ctx, key)
			if err == nil && a.Size != int64(len(data)) {
				return errors.New("wrong size")
			}
			return err
		}},
		{"list", http.MethodGet, func() error {
			n := 0
			err := b.List(ctx, key, func(store.Object) error { n++; return nil })
			if err == nil && n != 1 {
				return errors.New("wrong listing")
			}
			return err
		}},
	}
}

// retriesTotal sums lanced_store_retries_total over its labels.
func retriesTotal(reg *prometheus.Registry) float64 {
	var retries float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "lanced_store_retries_total" {
			for _, m := range mf.GetMetric() {
				retries += m.GetCounter().GetValue()
			}
		}
	}
	return retries
}

// TestRetriesBounded: a store that keeps failing fails the operation after
// the policy's tries with the transient code; a missing key is not
// retried; a cancelled context stops the backoff.
func TestRetriesBounded(t *testing.T) {
	faultyEmulators(t, func(t *testing.T, uri string, fh *objfault.Handler) {
		reg := prometheus.NewRegistry()
		b, err := store.Instrument(store.WithRetry(open(t, uri), store.Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}), reg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := b.Put(ctx, "always", []byte("x")); err != nil {
			t.Fatal(err)
		}
		fh.AddRule(&objfault.Rule{Match: onKey(http.MethodGet, "always"), Kind: objfault.SlowDown})
		before := fh.Requests()
		_, err = b.Get(ctx, "always")
		if c := store.CodeOf(err); c != store.Unavailable && c != store.Throttled {
			t.Fatalf("Get from a failing store = %v (code %s), want a transient code", err, c)
		}
		// 3 store tries, each at most 3 SDK tries.
		if n := fh.Requests() - before; n < 3 || n > 9 {
			t.Errorf("%d requests for 3 tries", n)
		}
		if n := counter(t, reg, "lanced_store_retries_total", "op=get,code="+store.CodeOf(err).String()); n != 2 {
			t.Errorf("lanced_store_retries_total{op=get} = %v, want 2", n)
		}

		before = fh.Requests()
		if _, err := b.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
		if n := fh.Requests() - before; n != 1 {
			t.Errorf("a missing key took %d requests, want 1", n)
		}

		slow := store.WithRetry(open(t, uri), store.Retry{Attempts: 10, Base: time.Second, Max: time.Minute})
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := slow.Get(cctx, "always"); err == nil {
			t.Fatal("Get succeeded against a failing store")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a cancelled context took %s to stop the retries", d)
		}
	})
}
