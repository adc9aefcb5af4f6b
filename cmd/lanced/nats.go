package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startEmbeddedNATS runs a nats-server with JetStream stored under
// stateDir/jetstream. With listen empty the server opens no TCP port and
// the daemon connects in-process; with listen set, other lanced nodes (and
// the nats CLI) can connect to it.
func startEmbeddedNATS(stateDir, listen string, log *slog.Logger) (*server.Server, error) {
	storeDir := filepath.Join(stateDir, "jetstream")
	if err := os.MkdirAll(storeDir, 0o750); err != nil {
		return nil, fmt.Errorf("create jetstream store %s: %w", storeDir, err)
	}
	opts := &server.Options{
		ServerName: "lanced",
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true, // the daemon owns signals
		NoLog:      true,
		DontListen: listen == "",
	}
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen %q: %w", listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen %q: port: %w", listen, err)
		}
		opts.Host, opts.Port = host, p
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s (store %s)", storeDir)
	}
	if listen != "" {
		log.Info("embedded nats listening", "addr", ns.Addr().String())
	} else {
		log.Info("embedded nats started", "store", storeDir)
	}
	return ns, nil
}

// connectNATS connects to the embedded server in-process, or to the
// configured cluster with credentials and TLS.
func connectNATS(ctx context.Context, cfg natsConfig, ns *server.Server, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	}
	url := cfg.URL
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
		url = ""
	} else {
		if cfg.Credentials != "" {
			opts = append(opts, nats.UserCredentials(cfg.Credentials))
		}
		if t := cfg.TLS; t != nil {
			if t.CAFile != "" {
				opts = append(opts, nats.RootCAs(t.CAFile))
			}
			if t.CertFile != "" {
				opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
			}
		}
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect nats %s: %w", redactURL(url), err)
	}
	// With RetryOnFailedConnect the first connect may still be pending.
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nc, nil
}

// redactURL hides user info in NATS URLs for logs and errors.
func redactURL(u string) string {
	if u == "" {
		return "in-process"
	}
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		if i := strings.Index(u, "://"); i >= 0 && i < at {
			return u[:i+3] + "***@" + u[at+1:]
		}
	}
	return u
}
