package store

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSilentEndpointFailsInBoundedTime: an endpoint that accepts
// connections and never answers (a wrong port, a stuck proxy) fails a
// read after the response-header timeout, once, with the one-line advice;
// it is not retried by the SDK or the store (it hung for ever before).
func TestSilentEndpointFailsInBoundedTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	accepted := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			accepted++
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	old := responseHeaderTimeout
	responseHeaderTimeout = 500 * time.Millisecond
	t.Cleanup(func() { responseHeaderTimeout = old })

	ep := "http://" + ln.Addr().String()
	for _, uri := range []string{
		"s3://lake/t.lance?anonymous=true&region=us-east-1&use_path_style=true&endpoint=" + ep,
		"gs://lake/t.lance?anonymous=true&endpoint=" + ep,
	} {
		mu.Lock()
		accepted = 0
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b, err := Open(ctx, uri)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		began := time.Now()
		_, err = b.Get(ctx, "_versions/1.manifest")
		took := time.Since(began)
		_ = b.Close()
		cancel()
		if err == nil {
			t.Fatalf("%s: read from a silent endpoint succeeded", uri)
		}
		if took > 10*time.Second {
			t.Errorf("%s: took %v to fail (response-header timeout 500ms)", uri, took)
		}
		want := "cannot reach " + ep + " (timed out)"
		if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("%s: want one line with %q, got: %v", uri, want, err)
		}
		mu.Lock()
		n := accepted
		mu.Unlock()
		if n != 1 {
			t.Errorf("%s: %d connections: a silent endpoint should be tried once", uri, n)
		}
	}
}
