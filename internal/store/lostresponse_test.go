package store_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/objfault"
)

// conditionalPut matches S3's If-None-Match: * PUT and GCS's
// ifGenerationMatch=0 upload.
func conditionalPut(r *http.Request) bool {
	return (r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*") ||
		(r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/upload/") && r.URL.Query().Get("ifGenerationMatch") == "0")
}

// TestPutIfAbsentLostResponse: the conditional create is applied but its
// response never arrives. PutIfAbsent must not report a failure for a
// create that landed (the engine would then give up or redo a commit that
// exists), nor a success for someone else's object.
func TestPutIfAbsentLostResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, wrap func(http.Handler) http.Handler) string
	}{
		{"s3", func(t *testing.T, wrap func(http.Handler) http.Handler) string {
			return storetest.StartS3WithHandler(t, wrap).URI("lost")
		}},
		{"gcs", func(t *testing.T, wrap func(http.Handler) http.Handler) string {
			return storetest.StartGCSWith(t, wrap).URI("lost")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fh *objfault.Handler
			dialect := objfault.S3
			if tc.name == "gcs" {
				dialect = objfault.GCS
			}
			uri := tc.start(t, func(h http.Handler) http.Handler {
				fh = objfault.Wrap(h, objfault.Config{Dialect: dialect})
				return fh
			})
			b := open(t, uri)
			ctx := context.Background()
			for _, kind := range []objfault.Kind{objfault.LostResponse, objfault.Reset, objfault.Internal} {
				key := "_versions/" + string(kind) + ".manifest"
				rule := &objfault.Rule{Match: conditionalPut, Kind: kind, Times: 1}
				fh.AddRule(rule)
				err := b.PutIfAbsent(ctx, key, []byte("ours-"+string(kind)))
				got, gerr := b.Get(ctx, key)
				switch {
				case fh.Injected(kind) != 1:
					t.Fatalf("%s: fault not injected", kind)
				case gerr == nil && string(got) == "ours-"+string(kind):
					if err != nil {
						t.Errorf("%s: the create landed but PutIfAbsent = %v", kind, err)
					}
				case store.CodeOf(gerr) == store.NotFound:
					if err == nil {
						t.Errorf("%s: PutIfAbsent succeeded but nothing landed", kind)
					}
				default:
					t.Errorf("%s: after PutIfAbsent (%v) the key holds %q, %v", kind, err, got, gerr)
				}
				// Whatever happened, the key now either is ours or absent;
				// a rival must lose against ours.
				if gerr == nil {
					if err := b.PutIfAbsent(ctx, key, []byte("rival")); !errors.Is(err, store.ErrPreconditionFailed) {
						t.Errorf("%s: rival PutIfAbsent = %v, want ErrPreconditionFailed", kind, err)
					}
				}
			}
			// A lost response on a create that lost the race: the key holds
			// the winner's bytes, so PutIfAbsent reports the conflict.
			if err := b.Put(ctx, "_versions/taken.manifest", []byte("winner")); err != nil {
				t.Fatal(err)
			}
			fh.AddRule(&objfault.Rule{Match: conditionalPut, Kind: objfault.LostResponse, Times: 1})
			if err := b.PutIfAbsent(ctx, "_versions/taken.manifest", []byte("loser")); err == nil {
				t.Error("a create that lost the race (response lost) reported success")
			}
		})
	}
}
