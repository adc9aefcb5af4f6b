package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// TestS3SDKLogsGoThroughSlog: with the SDK's default response checksum
// validation an S3 emulator's GET answers carry no checksum and the SDK
// logs a DEBUG line per response. Every such line must reach slog (JSON,
// at Debug), none the process's stderr as plain text.
func TestS3SDKLogsGoThroughSlog(t *testing.T) {
	srv := storetest.StartS3(t)
	uri := strings.Replace(srv.URI("logs"), "response_checksum_validation=when_required", "response_checksum_validation=when_supported", 1)

	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			out := captureStderr(t, func() {
				slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
				b := open(t, uri)
				ctx := context.Background()
				for i := range 3 {
					if err := b.Put(ctx, "k", []byte{byte(i)}); err != nil {
						t.Fatal(err)
					}
					if _, err := b.Get(ctx, "k"); err != nil {
						t.Fatal(err)
					}
				}
				_ = b.Close()
			})
			checksumLines := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				var rec map[string]any
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Errorf("non-JSON line on stderr: %q", sc.Text())
					continue
				}
				if strings.Contains(rec["msg"].(string), "no supported checksum") {
					checksumLines++
					if rec["level"] != "DEBUG" || rec["component"] != "aws-sdk" {
						t.Errorf("SDK line %v: want level DEBUG, component aws-sdk", rec)
					}
				}
			}
			if level == slog.LevelDebug && checksumLines == 0 {
				t.Errorf("no SDK checksum line at Debug level; output:\n%s", out)
			}
			if level == slog.LevelInfo && checksumLines != 0 {
				t.Errorf("%d SDK DEBUG lines at Info level", checksumLines)
			}
		})
	}
}

// captureStderr runs fn with os.Stderr and slog's default logger
// redirected to a pipe and returns what was written.
func captureStderr(t *testing.T, fn func()) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldErr, oldLog := os.Stderr, slog.Default()
	os.Stderr = w
	done := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(r)
		done <- data
	}()
	func() {
		defer func() { os.Stderr = oldErr; slog.SetDefault(oldLog) }()
		fn()
	}()
	_ = w.Close()
	return <-done
}
