package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// refuseUnknownKeys answers every request signed with an access key other
// than "lanced-test" as S3 does (unsigned requests are served): 403 InvalidAccessKeyId (gofakes3 checks no
// signatures itself).
func refuseUnknownKeys(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" && !strings.Contains(a, "Credential=lanced-test/") {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>` +
				`<Message>The AWS Access Key Id you provided does not exist in our records.</Message><RequestId>r1</RequestId></Error>`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// isolateCloudEnv points the AWS and Google credential chains at nothing on
// this machine (no config files, no instance metadata).
func isolateCloudEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
		"AWS_DEFAULT_REGION", "GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("CLOUDSDK_CONFIG", filepath.Join(home, "gcloud"))
}

// TestStoreErrorsSayWhatToDo: a misconfigured S3 or GCS store (wrong or
// missing credentials, no region, unreachable endpoint, missing bucket)
// fails every command with one line that names the table once, without its
// query string, and says which setting to fix; no SDK text.
func TestStoreErrorsSayWhatToDo(t *testing.T) {
	isolateCloudEnv(t)
	s3 := storetest.StartS3WithHandler(t, refuseUnknownKeys)
	s3q := func(bucket string, extra ...string) string {
		q := url.Values{"endpoint": {s3.Endpoint}, "region": {"us-east-1"}, "use_path_style": {"true"}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return "s3://" + bucket + "/db/t.lance?" + q.Encode()
	}
	gcsDenied := storetest.StartGCSWith(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":{"code":403,"message":"caller does not have storage.objects.list access"}}`))
		})
	})
	gcs := storetest.StartGCS(t)
	badKey := badGoogleKey(t)

	cases := []struct {
		name, uri string
		env       map[string]string
		want      []string
	}{
		{"s3 wrong key", s3q("lance"), map[string]string{"AWS_ACCESS_KEY_ID": "WRONG", "AWS_SECRET_ACCESS_KEY": "x"},
			[]string{"credentials refused (InvalidAccessKeyId)", "AWS_ACCESS_KEY_ID"}},
		{"s3 no credentials", s3q("lance"), nil, []string{"no AWS credentials found", "AWS_ACCESS_KEY_ID", "anonymous=true"}},
		{"s3 no bucket", s3q("nobucket", "anonymous", "true"), nil, []string{`bucket "nobucket" does not exist`}},
		{"s3 unreachable", "s3://lance/db/t.lance?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_style=true&anonymous=true",
			nil, []string{"cannot reach http://127.0.0.1:1 (connection refused)", "endpoint="}},
		{"s3 unknown host", "s3://lance/db/t.lance?endpoint=http://no-such-host.invalid:9000&region=us-east-1&use_path_style=true&anonymous=true",
			nil, []string{"cannot reach http://no-such-host.invalid:9000", "endpoint="}},
		{"gcs unreachable", "gs://lance/db/t.lance?endpoint=http://127.0.0.1:1&anonymous=true",
			nil, []string{"cannot reach http://127.0.0.1:1 (connection refused)", "endpoint="}},
		{"s3 no region", "s3://lake/events.lance", map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
			[]string{"no valid AWS region", "AWS_REGION", "region="}},
		{"gcs no credentials", "gs://lake/events.lance", nil, []string{"no Google credentials found", "GOOGLE_APPLICATION_CREDENTIALS"}},
		{"gcs credentials file missing", "gs://lake/events.lance", map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"},
			[]string{"GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/key.json is not a readable credentials file", "service-account key file"}},
		{"gcs credentials refused", "gs://lance/db/t.lance?endpoint=" + url.QueryEscape(gcs.Endpoint),
			map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": badKey}, []string{"Google credentials do not work", "GOOGLE_APPLICATION_CREDENTIALS"}},
		{"gcs access denied", gcsDenied.URI("db/t.lance"), nil, []string{`access denied to bucket "lance" (HTTP 403)`, "GOOGLE_APPLICATION_CREDENTIALS"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			canon := c.uri
			if i := strings.IndexByte(canon, '?'); i >= 0 {
				canon = canon[:i]
			}
			for _, args := range [][]string{{"stats", c.uri}, {"policy", "explain", c.uri}, {"plan", c.uri}} {
				var out, errb bytes.Buffer
				began := time.Now()
				if code := runMain(args, &out, &errb); code == 0 {
					t.Fatalf("%v: exit 0", args)
				}
				// A closed port or a name that does not resolve is not
				// retried (it took ~45s of store and SDK retries before).
				if took := time.Since(began); strings.Contains(c.name, "unreachable") && took > 10*time.Second {
					t.Errorf("%v: took %v to report an unreachable endpoint", args, took)
				}
				msg := strings.TrimSpace(errb.String())
				if strings.Count(msg, "\n") != 0 {
					t.Errorf("%v: not one line:\n%s", args, msg)
				}
				if strings.Count(msg, canon) != 1 || strings.Contains(msg, "?") || strings.Contains(msg, "%3A") {
					t.Errorf("%v: want %s once and no query string: %s", args, canon, msg)
				}
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("%v: %q missing from: %s", args, w, msg)
					}
				}
				for _, raw := range []string{"operation error", "RequestID", "api error", "blob (code=", "https response error", "googleapi:"} {
					if strings.Contains(msg, raw) {
						t.Errorf("%v: SDK text %q in: %s", args, raw, msg)
					}
				}
			}
		})
	}
}

// badGoogleKey writes a well-formed service-account key whose token
// endpoint (a local server) refuses it, as Google does for a revoked key.
func badGoogleKey(t *testing.T) string {
	t.Helper()
	tok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`))
	}))
	t.Cleanup(tok.Close)
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	key, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "lanced@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tok.URL,
	})
	path := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
