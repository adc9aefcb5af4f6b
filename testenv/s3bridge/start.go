package s3bridge

import (
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/nats-io/nats.go"

	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// Start starts the store's S3 emulator (bucket storetest.BucketName) with
// the bridge around its backend, for the duration of the test.
func Start(t testing.TB, nc *nats.Conn, cfg Config) (*storetest.S3Server, *Backend) {
	t.Helper()
	var bridge *Backend
	s3 := storetest.StartS3With(t, func(inner gofakes3.Backend) gofakes3.Backend {
		b, err := New(inner, nc, cfg)
		if err != nil {
			t.Fatalf("%v", err)
		}
		bridge = b
		return b
	})
	return s3, bridge
}
