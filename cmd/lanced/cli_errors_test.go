package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCLIErrorsSayWhatToDo: the mistakes a new user makes first (a table
// path that does not exist, an empty URI, a bad flag value, a --policy
// directory that does not exist, a --scope compact does not know, with
// --dry-run too, a --config file that does not exist) each fail with one message that names
// the thing and what to check, printed once, with a non-zero exit status
// (2 for a usage error) and no raw system error.
func TestCLIErrorsSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "events.lance")
	pol := filepath.Join(dir, "nopolicies")
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"stats", missing}, 1, []string{"directory " + missing + " does not exist: check the path"}},
		{[]string{"scan", missing, "--limit", "1"}, 1, []string{"directory " + missing + " does not exist: check the path"}},
		{[]string{"cleanup", missing, "--dry-run"}, 1, []string{"directory " + missing + " does not exist: check the path"}},
		{[]string{"stats", ""}, 1, []string{"empty URI: give a local path"}},
		{[]string{"cleanup", missing, "--older-than", "3x"}, 2, []string{`invalid value "3x" for flag -older-than`, "usage: lanced cleanup URI"}},
		{[]string{"stats", missing, "--version", "abc"}, 2, []string{`invalid value "abc" for flag -version`, "usage: lanced stats URI"}},
		{[]string{"policy", "check", "--bogus", pol}, 2, []string{"flag provided but not defined: -bogus", "usage: lanced policy check DIR"}},
		{[]string{"run", "--workers", "x"}, 2, []string{`invalid value "x" for flag -workers`, "usage: lanced run"}},
		{[]string{"run", "--workers", "-1"}, 2, []string{"--workers -1: want 0 (coordinate only) or more"}},
		{[]string{"compact", missing, "--scope", "bogus", "--dry-run"}, 1, []string{`--scope "bogus": want all, rewrite, repack or index`}},
		{[]string{"compact", missing, "--workers", "0"}, 1, []string{"--workers 0: want 1 or more tasks at once"}},
		{[]string{"policy", "explain", missing, "--config", filepath.Join(dir, "none.hcl")}, 1, []string{
			filepath.Join(dir, "none.hcl") + ": error: Cannot read config file", "no such file or directory: check the --config path"}},
		{[]string{"plan", missing, "--policy", pol}, 1, []string{"open " + pol + ": no such file or directory: check the path (a directory of *.hcl policy files)",
			"policy directory " + pol + " has errors"}},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := runMain(c.args, &out, &errb)
		msg := strings.Join(strings.Fields(errb.String()), " ") // diagnostics wrap at 100 columns
		if code != c.code {
			t.Errorf("%q: exit %d, want %d: %s", c.args, code, c.code, errb.String())
		}
		for _, w := range c.want {
			if n := strings.Count(msg, w); n != 1 {
				t.Errorf("%q: %q appears %d times, want once, in:\n%s", c.args, w, n, msg)
			}
		}
		if strings.Contains(msg, "stat ") || strings.Contains(msg, "open .:") || strings.Contains(msg, "<nil>") || strings.Contains(msg, "panic") {
			t.Errorf("%q: raw error in:\n%s", c.args, msg)
		}
	}
}

// TestConnectNATSUnreachableSaysSo: an external NATS that does not answer
// is retried (it may start after this node), logged as not reachable with
// what to check while it is, and a stop while waiting returns an error that
// names the URL and the setting instead of "context canceled".
func TestConnectNATSUnreachableSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close() // a closed port: connection refused
	old := natsWaitWarn
	natsWaitWarn = 200 * time.Millisecond
	defer func() { natsWaitWarn = old }()

	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	began := time.Now()
	nc, err := connectNATS(ctx, natsConfig{URL: url}, nil, "test", log)
	if err == nil {
		nc.Close()
		t.Fatal("connected to a closed port")
	}
	if took := time.Since(began); took < time.Second || took > 5*time.Second {
		t.Errorf("returned after %v; want it to keep trying until the context ends (1.5s)", took)
	}
	for _, w := range []string{"connect nats " + url, "without an answer", "--nats-url"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "context") {
		t.Errorf("error %q speaks of the context", err)
	}
	if n := strings.Count(logs.String(), `"msg":"nats not reachable yet, still trying"`); n < 2 || n > 4 {
		t.Errorf("%d not-reachable warnings in 1.5s with the first after 0.2s, want 2-4 (doubling):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"url":"`+url+`"`) || !strings.Contains(logs.String(), "--nats-url") {
		t.Errorf("warning lacks the url or the advice:\n%s", logs.String())
	}
}

// TestCompactDryRunHonoursScope: compact --dry-run plans with its --scope
// (it planned with the policy's scope, whatever --scope said): on a table
// of small appended fragments the rewrite is planned under the default
// scope and under --scope rewrite, and not under --scope repack.
func TestCompactDryRunHonoursScope(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "appends", t.TempDir())
	rewrites := func(extra ...string) int {
		t.Helper()
		var p struct {
			Rewrites []json.RawMessage `json:"rewrites"`
		}
		out := runCLI(t, append([]string{"compact", path, "--dry-run", "--json"}, extra...)...)
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v: %v\n%s", extra, err, out)
		}
		return len(p.Rewrites)
	}
	if n := rewrites(); n == 0 {
		t.Fatal("no rewrite planned on small appended fragments")
	}
	if n := rewrites("--scope", "rewrite"); n == 0 {
		t.Fatal("--scope rewrite: no rewrite planned")
	}
	if n := rewrites("--scope", "repack"); n != 0 {
		t.Fatalf("--scope repack: %d rewrite(s) planned", n)
	}
}

// TestHTTPListenErrorsSayWhatToDo: an --http address another process
// holds (a second lanced on the default address) or that is not HOST:PORT
// fails with what to do instead of the bare listen error.
func TestHTTPListenErrorsSayWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for addr, want := range map[string]string{
		ln.Addr().String(): "http listen " + ln.Addr().String() + ": address already in use (another lanced?): stop that process, or give this one another address with --http HOST:PORT",
		"nonsense":         "http listen nonsense: listen tcp: address nonsense: missing port in address: give --http HOST:PORT",
	} {
		h, err := newHealthServer(addr, nil, nil, nil, slog.Default())
		if err == nil {
			h.ln.Close()
			t.Fatalf("%s: listening", addr)
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--http off") {
			t.Errorf("%s: %q, want %q ... --http off", addr, err, want)
		}
	}
}
