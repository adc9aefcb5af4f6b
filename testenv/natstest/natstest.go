// Package natstest runs an embedded nats-server with JetStream for tests:
// the one NATS test server helper the test suites share.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Server starts a nats-server with JetStream, stored in a per-test
// directory, with a client listener on a random 127.0.0.1 port; it is shut
// down when the test ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Connect connects to s (reconnecting forever); the connection is closed
// when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Conn starts a Server and connects to it.
func Conn(t testing.TB) *nats.Conn {
	t.Helper()
	return Connect(t, Server(t))
}
