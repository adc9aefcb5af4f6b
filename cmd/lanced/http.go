package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthServer serves /metrics (our own registry), /healthz (the process
// is alive and its NATS connection is not closed) and /readyz (NATS up,
// scheduler taking work, first policy load done).
type healthServer struct {
	srv      *http.Server
	ln       net.Listener
	healthy  func() error
	ready    func() error
	log      *slog.Logger
	serveErr chan error
}

func newHealthServer(addr string, reg *prometheus.Registry, healthy, ready func() error, log *slog.Logger, extra ...func(*http.ServeMux)) (*healthServer, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("http listen %s: address already in use (another lanced?): stop that process, "+
			"or give this one another address with --http HOST:PORT (http { listen } in the config), or --http off", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("http listen %s: %w: give --http HOST:PORT (http { listen } in the config), or --http off", addr, err)
	}
	h := &healthServer{ln: ln, healthy: healthy, ready: ready, log: log, serveErr: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorLog: slogPromLogger{log}}))
	mux.HandleFunc("GET /healthz", h.check(h.healthy))
	mux.HandleFunc("GET /readyz", h.check(h.ready))
	for _, f := range extra {
		f(mux)
	}
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return h, nil
}

func (h *healthServer) Addr() string { return h.ln.Addr().String() }

func (h *healthServer) check(f func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := f(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ok: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

func (h *healthServer) Start() {
	go func() {
		err := h.srv.Serve(h.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		h.serveErr <- err
	}()
}

func (h *healthServer) Shutdown(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	if serr := <-h.serveErr; serr != nil && err == nil {
		err = serr
	}
	return err
}

type slogPromLogger struct{ l *slog.Logger }

func (s slogPromLogger) Println(v ...any) { s.l.Error("metrics handler", "err", fmt.Sprint(v...)) }
