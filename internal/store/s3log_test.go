package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
			sdkDebugLines(t, out, level, "no supported checksum")
		})
	}
}

// TestIMDSFallbackWarningGoesThroughSlog: off EC2, with no credentials in
// the environment, the SDK's credential chain asks the instance metadata
// service, which refuses a token; the SDK then warns "falling back to
// IMDSv1". That line must reach slog (JSON, at Debug), never stderr as
// plain text, and the read fails with the one-line advice.
func TestIMDSFallbackWarningGoesThroughSlog(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusForbidden) // no IMDSv2 token
			return
		}
		w.WriteHeader(http.StatusNotFound) // no instance role
	}))
	t.Cleanup(imds.Close)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "none"))
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_EC2_METADATA_DISABLED", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	srv := storetest.StartS3(t)
	uri := strings.Replace(srv.URI("imds"), "anonymous=true&", "", 1)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			var getErr error
			out := captureStderr(t, func() {
				slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
				b := open(t, uri)
				_, getErr = b.Get(context.Background(), "k")
			})
			if getErr == nil || !strings.Contains(getErr.Error(), "no AWS credentials found") {
				t.Fatalf("want the no-credentials advice, got %v", getErr)
			}
			sdkDebugLines(t, out, level, "IMDSv1")
		})
	}
}

// sdkDebugLines checks out, a process's stderr logged at level: every line
// is slog JSON, and the SDK lines whose message contains msg are Debug lines
// of component aws-sdk, present at Debug level and absent at Info.
func sdkDebugLines(t *testing.T, out []byte, level slog.Level, msg string) {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("non-JSON line on stderr: %q", sc.Text())
			continue
		}
		if strings.Contains(rec["msg"].(string), msg) {
			n++
			if rec["level"] != "DEBUG" || rec["component"] != "aws-sdk" {
				t.Errorf("SDK line %v: want level DEBUG, component aws-sdk", rec)
			}
		}
	}
	if level == slog.LevelDebug && n == 0 {
		t.Errorf("no SDK line with %q at Debug level; output:\n%s", msg, out)
	}
	if level == slog.LevelInfo && n != 0 {
		t.Errorf("%d SDK lines with %q at Info level", n, msg)
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
