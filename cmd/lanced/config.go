package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/lanced-dev/lanced/internal/duration"
	"github.com/lanced-dev/lanced/internal/policy"
)

// runConfig is the resolved configuration of `lanced run`: every default
// applied, every path absolute, every duration parsed.
type runConfig struct {
	StateDir string
	// Tables are table roots as given (URIs, query kept for store.Open):
	// a table (…/x.lance) or a directory of tables.
	Tables   []string
	Policies string // "" = no policy directory: Lance's defaults apply
	Workers  int
	NATS     natsConfig
	Sources  []sourceConfig
	Debounce time.Duration
	MaxDelay time.Duration
	// EventsSet says the config file has an events block: its debounce
	// and max_delay are every table's defaults (a policy's schedule block
	// wins).
	EventsSet bool
	Queue     queueConfig
	HTTP      string // listen address, "" = no HTTP server
	LogLevel  string // debug|info|warn|error
	LogFmt    string // json|text
}

type natsConfig struct {
	Embedded bool
	Listen   string // embedded: also listen for other nodes here (host:port)
	URL      string // external cluster (comma-separated URLs)
	// How this node authenticates (at most one): a JWT .creds file, an
	// nkey seed file, or a user with a password file. With the embedded
	// server they are also what its listener accepts.
	Credentials  string
	NKeySeedFile string
	User         string
	PasswordFile string
	// AuthorizedNKeys are other nodes' public user nkeys the embedded
	// listener accepts besides this node's own.
	AuthorizedNKeys []string
	// Insecure lets the embedded listener accept anyone (logged as a
	// warning at start).
	Insecure bool
	TLS      *tlsConfig
}

// tlsConfig: for a client connection, CAFile verifies the servers and
// CertFile/KeyFile are the client certificate (mutual TLS); for the
// embedded listener, CertFile/KeyFile are the server certificate and, with
// VerifyClients, clients must present a certificate signed by CAFile.
type tlsConfig struct {
	CAFile, CertFile, KeyFile string
	VerifyClients             bool
}

type sourceConfig struct {
	Kind     string // poll | pubsub | nats
	URL      string // pubsub subscription URL
	Subject  string // nats
	Stream   string // nats (JetStream mode)
	Interval time.Duration
}

type queueConfig struct {
	AckWait, LeaseTTL, DrainTimeout, CommitMaxWait time.Duration
	MaxDeliver, TableInFlight, MaxQueueDepth       int
	CommitBatchTasks, Replicas                     int
}

// defaultRunConfig is what `lanced run --tables DIR` uses with no file.
func defaultRunConfig() runConfig {
	state := os.Getenv("STATE_DIRECTORY") // set by systemd's StateDirectory=
	if i := strings.IndexByte(state, ':'); i >= 0 {
		state = state[:i]
	}
	if state == "" {
		state = ".lanced-state"
	}
	if abs, err := filepath.Abs(state); err == nil {
		state = abs
	}
	return runConfig{
		StateDir: state,
		Workers:  2,
		NATS:     natsConfig{Embedded: true},
		Debounce: policy.DefaultDebounce,
		MaxDelay: policy.DefaultMaxDelay,
		Queue: queueConfig{
			AckWait: 60 * time.Second, LeaseTTL: 30 * time.Second, DrainTimeout: 30 * time.Second,
			CommitMaxWait: 10 * time.Second, MaxDeliver: 5, TableInFlight: 4, MaxQueueDepth: 1000,
			CommitBatchTasks: 8, Replicas: 1,
		},
		HTTP:     "127.0.0.1:9464",
		LogLevel: "info",
		LogFmt:   "json",
	}
}

// The HCL shape of the config file. Optional scalars are pointers so that
// an absent attribute keeps the default.
type fileConfig struct {
	StateDir *string  `hcl:"state_dir,optional"`
	Tables   []string `hcl:"tables,optional"`
	Policies *string  `hcl:"policies,optional"`
	// Policy is the same setting spelled as the --policy flag.
	Policy  *string       `hcl:"policy,optional"`
	Workers *int          `hcl:"workers,optional"`
	NATS    *natsBlock    `hcl:"nats,block"`
	Sources []sourceBlock `hcl:"source,block"`
	Events  *eventsBlock  `hcl:"events,block"`
	Queue   *queueBlock   `hcl:"queue,block"`
	HTTP    *httpBlock    `hcl:"http,block"`
	Log     *logBlock     `hcl:"log,block"`
	Body    hcl.Body      `hcl:",body"`
}

type natsBlock struct {
	Embedded        *bool     `hcl:"embedded,optional"`
	Listen          *string   `hcl:"listen,optional"`
	URL             *string   `hcl:"url,optional"`
	Credentials     *string   `hcl:"credentials,optional"`
	NKeySeedFile    *string   `hcl:"nkey_seed_file,optional"`
	User            *string   `hcl:"user,optional"`
	PasswordFile    *string   `hcl:"password_file,optional"`
	AuthorizedNKeys []string  `hcl:"authorized_nkeys,optional"`
	Insecure        *bool     `hcl:"insecure,optional"`
	TLS             *tlsBlock `hcl:"tls,block"`
	Body            hcl.Body  `hcl:",body"`
}

type tlsBlock struct {
	CAFile        *string  `hcl:"ca_file,optional"`
	CertFile      *string  `hcl:"cert_file,optional"`
	KeyFile       *string  `hcl:"key_file,optional"`
	VerifyClients *bool    `hcl:"verify_clients,optional"`
	Body          hcl.Body `hcl:",body"`
}

type sourceBlock struct {
	Kind     string   `hcl:"kind,label"`
	URL      *string  `hcl:"url,optional"`
	Subject  *string  `hcl:"subject,optional"`
	Stream   *string  `hcl:"stream,optional"`
	Interval *string  `hcl:"interval,optional"`
	Body     hcl.Body `hcl:",body"`
}

type eventsBlock struct {
	Debounce *string  `hcl:"debounce,optional"`
	MaxDelay *string  `hcl:"max_delay,optional"`
	Body     hcl.Body `hcl:",body"`
}

type queueBlock struct {
	AckWait          *string  `hcl:"ack_wait,optional"`
	MaxDeliver       *int     `hcl:"max_deliver,optional"`
	LeaseTTL         *string  `hcl:"lease_ttl,optional"`
	TableInFlight    *int     `hcl:"table_in_flight,optional"`
	MaxQueueDepth    *int     `hcl:"max_queue_depth,optional"`
	CommitBatchTasks *int     `hcl:"commit_batch_tasks,optional"`
	CommitMaxWait    *string  `hcl:"commit_max_wait,optional"`
	DrainTimeout     *string  `hcl:"drain_timeout,optional"`
	Replicas         *int     `hcl:"replicas,optional"`
	Body             hcl.Body `hcl:",body"`
}

type httpBlock struct {
	Listen *string  `hcl:"listen,optional"`
	Body   hcl.Body `hcl:",body"`
}

type logBlock struct {
	Level  *string  `hcl:"level,optional"`
	Format *string  `hcl:"format,optional"`
	Body   hcl.Body `hcl:",body"`
}

// loadConfigFile parses and validates path on top of the defaults. All
// problems are returned together, each pointing at file:line:col; the
// parser is returned for rendering snippets.
func loadConfigFile(path string) (runConfig, *hclparse.Parser, hcl.Diagnostics) {
	cfg := defaultRunConfig()
	p := hclparse.NewParser()
	src, err := os.ReadFile(path)
	if err != nil {
		return cfg, p, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read config file", Detail: err.Error() + ": check the --config path"}}
	}
	f, diags := p.ParseHCL(src, path)
	if diags.HasErrors() {
		return cfg, p, diags
	}
	// The attributes that decode are checked even when others do not
	// (a misspelled name): every error is reported in one run.
	var fc fileConfig
	diags = append(diags, gohcl.DecodeBody(f.Body, nil, &fc)...)
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	diags = append(diags, applyFile(&cfg, &fc, dir)...)
	return cfg, p, diags
}

// attrRange is the source range of attribute name in body (native syntax),
// or the body's range when it is absent.
func attrRange(body hcl.Body, name string) *hcl.Range {
	if sb, ok := body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			r := a.Expr.Range()
			return &r
		}
		r := sb.SrcRange
		return &r
	}
	r := body.MissingItemRange()
	return &r
}

func diagAt(body hcl.Body, attr, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: attrRange(body, attr)}
}

func parseDur(diags *hcl.Diagnostics, body hcl.Body, attr string, s *string, dst *time.Duration) {
	if s == nil {
		return
	}
	d, err := duration.Parse(*s)
	if err != nil || d <= 0 {
		*diags = append(*diags, diagAt(body, attr, "Invalid duration",
			fmt.Sprintf("%s = %q: want a positive duration such as \"30s\", \"5m\", \"1h\", \"1d\" or \"2w\".", attr, *s)))
		return
	}
	*dst = d
}

func positive(diags *hcl.Diagnostics, body hcl.Body, attr string, v *int, dst *int, allowZero bool) {
	if v == nil {
		return
	}
	if *v < 0 || (*v == 0 && !allowZero) {
		*diags = append(*diags, diagAt(body, attr, "Invalid number", fmt.Sprintf("%s = %d: must be positive.", attr, *v)))
		return
	}
	*dst = *v
}

func absPath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// normalizeTableRoot turns a path into a file:// URI (relative paths are
// taken relative to dir) and checks a URI's scheme.
func normalizeTableRoot(dir, root string) (string, error) {
	if !strings.Contains(root, "://") {
		p := absPath(dir, root)
		return "file://" + filepath.ToSlash(filepath.Clean(p)), nil
	}
	u, err := url.Parse(root)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "file", "s3", "gs", "mem":
		return strings.TrimRight(root, "/"), nil
	}
	return "", fmt.Errorf("scheme %q: want a path, file://, s3:// or gs://", u.Scheme)
}

func applyFile(cfg *runConfig, fc *fileConfig, dir string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	body := fc.Body
	if fc.StateDir != nil {
		if *fc.StateDir == "" {
			diags = append(diags, diagAt(body, "state_dir", "Empty state_dir", "state_dir holds the JetStream store; it cannot be empty."))
		}
		cfg.StateDir = absPath(dir, *fc.StateDir)
	}
	for _, t := range fc.Tables {
		u, err := normalizeTableRoot(dir, t)
		if err != nil {
			diags = append(diags, diagAt(body, "tables", "Invalid table root", fmt.Sprintf("%q: %v", t, err)))
			continue
		}
		cfg.Tables = append(cfg.Tables, u)
	}
	if fc.Policy != nil {
		if fc.Policies != nil {
			diags = append(diags, diagAt(body, "policy", "Duplicate policy directory", "policy and policies are one setting; keep one."))
		}
		fc.Policies = fc.Policy
	}
	if fc.Policies != nil {
		cfg.Policies = absPath(dir, *fc.Policies)
		if st, err := os.Stat(cfg.Policies); err != nil || !st.IsDir() {
			diags = append(diags, diagAt(body, "policies", "Policy directory not found",
				fmt.Sprintf("policies = %q: not a readable directory.", *fc.Policies)))
		}
	}
	positive(&diags, body, "workers", fc.Workers, &cfg.Workers, true)

	if fc.NATS != nil {
		diags = append(diags, applyNATS(cfg, fc.NATS, dir)...)
	}

	diags = append(diags, applySources(cfg, fc.Sources)...)

	if b := fc.Events; b != nil {
		cfg.EventsSet = true
		parseDur(&diags, b.Body, "debounce", b.Debounce, &cfg.Debounce)
		parseDur(&diags, b.Body, "max_delay", b.MaxDelay, &cfg.MaxDelay)
		if cfg.MaxDelay < cfg.Debounce {
			diags = append(diags, diagAt(b.Body, "max_delay", "max_delay below debounce",
				fmt.Sprintf("max_delay (%s) must be at least debounce (%s).", cfg.MaxDelay, cfg.Debounce)))
		}
	}
	if fc.Queue != nil {
		diags = append(diags, applyQueue(&cfg.Queue, fc.Queue)...)
	}
	if b := fc.HTTP; b != nil && b.Listen != nil {
		cfg.HTTP = *b.Listen
		if cfg.HTTP != "" {
			if _, _, err := net.SplitHostPort(cfg.HTTP); err != nil {
				diags = append(diags, diagAt(b.Body, "listen", "Invalid listen address", fmt.Sprintf("%q: %v (want host:port; \"\" disables HTTP)", cfg.HTTP, err)))
			}
		}
	}
	if b := fc.Log; b != nil {
		if b.Level != nil {
			cfg.LogLevel = *b.Level
			if !slices.Contains([]string{"debug", "info", "warn", "error"}, cfg.LogLevel) {
				diags = append(diags, diagAt(b.Body, "level", "Invalid log level", fmt.Sprintf("%q: want debug, info, warn or error.", cfg.LogLevel)))
			}
		}
		if b.Format != nil {
			cfg.LogFmt = *b.Format
			if cfg.LogFmt != "json" && cfg.LogFmt != "text" {
				diags = append(diags, diagAt(b.Body, "format", "Invalid log format", fmt.Sprintf("%q: want json or text.", cfg.LogFmt)))
			}
		}
	}
	return diags
}

// applyNATS reads the nats block.
func applyNATS(cfg *runConfig, b *natsBlock, dir string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	if b.Embedded != nil {
		cfg.NATS.Embedded = *b.Embedded
	}
	if b.URL != nil {
		cfg.NATS.URL = *b.URL
		if b.Embedded == nil {
			cfg.NATS.Embedded = false
		}
	}
	if cfg.NATS.Embedded && cfg.NATS.URL != "" {
		diags = append(diags, diagAt(b.Body, "url", "Conflicting NATS settings",
			"Set either embedded = true (this process runs the server) or url (connect to a cluster), not both."))
	}
	if !cfg.NATS.Embedded && cfg.NATS.URL == "" {
		diags = append(diags, diagAt(b.Body, "embedded", "No NATS server",
			"With embedded = false, url must name the NATS cluster to join."))
	}
	if b.Listen != nil {
		if !cfg.NATS.Embedded {
			diags = append(diags, diagAt(b.Body, "listen", "listen needs the embedded server", "listen opens the embedded server to other nodes; it has no meaning with url."))
		} else if _, _, err := net.SplitHostPort(*b.Listen); err != nil {
			diags = append(diags, diagAt(b.Body, "listen", "Invalid listen address", fmt.Sprintf("%q: %v (want host:port)", *b.Listen, err)))
		}
		cfg.NATS.Listen = *b.Listen
	}
	n := &cfg.NATS
	setPath(&n.Credentials, dir, b.Credentials)
	setPath(&n.NKeySeedFile, dir, b.NKeySeedFile)
	if b.User != nil {
		n.User = *b.User
	}
	setPath(&n.PasswordFile, dir, b.PasswordFile)
	if (n.User == "") != (n.PasswordFile == "") {
		diags = append(diags, diagAt(b.Body, "user", "Incomplete NATS user", "user and password_file go together (the file holds the password)."))
	}
	methods := 0
	for _, set := range []bool{n.Credentials != "", n.NKeySeedFile != "", n.User != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		diags = append(diags, diagAt(b.Body, "credentials", "Conflicting NATS credentials",
			"Use one of credentials (a .creds file), nkey_seed_file, or user with password_file."))
	}
	if n.Embedded && n.Credentials != "" {
		diags = append(diags, diagAt(b.Body, "credentials", "credentials need a NATS cluster",
			"A .creds file (JWT) authenticates to an operator-mode cluster given by url; the embedded server takes nkey_seed_file or user with password_file."))
	}
	for _, k := range b.AuthorizedNKeys {
		if !validUserNKey(k) {
			diags = append(diags, diagAt(b.Body, "authorized_nkeys", "Invalid nkey",
				fmt.Sprintf("%q is not a public user nkey (a 56-character key starting with U).", k)))
		}
	}
	n.AuthorizedNKeys = b.AuthorizedNKeys
	if len(n.AuthorizedNKeys) > 0 && n.NKeySeedFile == "" {
		diags = append(diags, diagAt(b.Body, "authorized_nkeys", "authorized_nkeys needs nkey_seed_file",
			"The embedded server then accepts only nkeys; this node connects to it with its own seed (nkey_seed_file)."))
	}
	if b.Insecure != nil {
		n.Insecure = *b.Insecure
	}
	if b.TLS != nil {
		cfg.NATS.TLS = applyTLS(&diags, b.TLS, dir)
	}
	return diags
}

// setPath sets *dst to v resolved against dir when v is set.
func setPath(dst *string, dir string, v *string) {
	if v != nil {
		*dst = absPath(dir, *v)
	}
}

// applyTLS reads the nats block's tls block.
func applyTLS(diags *hcl.Diagnostics, t *tlsBlock, dir string) *tlsConfig {
	tc := &tlsConfig{}
	setPath(&tc.CAFile, dir, t.CAFile)
	setPath(&tc.CertFile, dir, t.CertFile)
	setPath(&tc.KeyFile, dir, t.KeyFile)
	if t.VerifyClients != nil {
		tc.VerifyClients = *t.VerifyClients
		if tc.VerifyClients && tc.CAFile == "" {
			*diags = append(*diags, diagAt(t.Body, "verify_clients", "verify_clients needs ca_file", "Client certificates are verified against ca_file."))
		}
	}
	if (tc.CertFile == "") != (tc.KeyFile == "") {
		*diags = append(*diags, diagAt(t.Body, "cert_file", "Incomplete TLS client certificate", "cert_file and key_file go together."))
	}
	return tc
}

// applySources reads the source blocks.
func applySources(cfg *runConfig, blocks []sourceBlock) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, sb := range blocks {
		sc := sourceConfig{Kind: sb.Kind}
		switch sb.Kind {
		case "poll":
			sc.Interval = time.Minute
			parseDur(&diags, sb.Body, "interval", sb.Interval, &sc.Interval)
		case "pubsub":
			if sb.URL == nil || *sb.URL == "" {
				diags = append(diags, diagAt(sb.Body, "url", "Missing subscription URL",
					`A pubsub source needs url, e.g. "awssqs://sqs.us-east-1.amazonaws.com/123456789012/lanced?region=us-east-1" or "gcppubsub://projects/p/subscriptions/s".`))
			} else {
				sc.URL = *sb.URL
			}
		case "nats":
			if sb.Subject == nil || *sb.Subject == "" {
				diags = append(diags, diagAt(sb.Body, "subject", "Missing NATS subject", "A nats source needs subject, e.g. \"s3.events.>\"."))
			} else {
				sc.Subject = *sb.Subject
			}
			if sb.Stream != nil {
				sc.Stream = *sb.Stream
			}
		default:
			r := sb.Body.MissingItemRange()
			if syn, ok := sb.Body.(*hclsyntax.Body); ok {
				r = syn.SrcRange
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unknown source kind",
				Detail: fmt.Sprintf("source %q: want \"poll\", \"pubsub\" or \"nats\".", sb.Kind), Subject: &r})
			continue
		}
		for attr, set := range map[string]bool{"url": sb.URL != nil, "subject": sb.Subject != nil, "stream": sb.Stream != nil, "interval": sb.Interval != nil} {
			if set && !slices.Contains(sourceAttrs[sb.Kind], attr) {
				diags = append(diags, diagAt(sb.Body, attr, "Unsupported argument",
					fmt.Sprintf("%s does not apply to a %q source.", attr, sb.Kind)))
			}
		}
		cfg.Sources = append(cfg.Sources, sc)
	}

	return diags
}

// applyQueue reads the queue block.
func applyQueue(q *queueConfig, b *queueBlock) hcl.Diagnostics {
	var diags hcl.Diagnostics
	parseDur(&diags, b.Body, "ack_wait", b.AckWait, &q.AckWait)
	parseDur(&diags, b.Body, "lease_ttl", b.LeaseTTL, &q.LeaseTTL)
	parseDur(&diags, b.Body, "drain_timeout", b.DrainTimeout, &q.DrainTimeout)
	parseDur(&diags, b.Body, "commit_max_wait", b.CommitMaxWait, &q.CommitMaxWait)
	positive(&diags, b.Body, "max_deliver", b.MaxDeliver, &q.MaxDeliver, false)
	positive(&diags, b.Body, "table_in_flight", b.TableInFlight, &q.TableInFlight, false)
	positive(&diags, b.Body, "max_queue_depth", b.MaxQueueDepth, &q.MaxQueueDepth, false)
	positive(&diags, b.Body, "commit_batch_tasks", b.CommitBatchTasks, &q.CommitBatchTasks, false)
	positive(&diags, b.Body, "replicas", b.Replicas, &q.Replicas, false)
	if q.Replicas > 5 {
		diags = append(diags, diagAt(b.Body, "replicas", "Too many replicas", "JetStream allows at most 5 replicas."))
	}
	if q.AckWait < time.Second {
		diags = append(diags, diagAt(b.Body, "ack_wait", "ack_wait too short", "ack_wait must be at least 1s."))
	}
	if q.LeaseTTL < 3*time.Second {
		diags = append(diags, diagAt(b.Body, "lease_ttl", "lease_ttl too short", "lease_ttl must be at least 3s."))
	}
	return diags
}

var sourceAttrs = map[string][]string{
	"poll":   {"interval"},
	"pubsub": {"url"},
	"nats":   {"subject", "stream"},
}

// finish applies the rules that need the whole configuration (after flags
// were merged): a poll source on the table roots when no source was given.
func (c *runConfig) finish() error {
	if len(c.Tables) == 0 {
		return fmt.Errorf("no table roots: set tables in the config file or pass --tables")
	}
	if len(c.Sources) == 0 {
		c.Sources = []sourceConfig{{Kind: "poll", Interval: time.Minute}}
	}
	if c.StateDir == "" {
		return fmt.Errorf("no state directory")
	}
	return c.NATS.checkListener()
}

// checkListener refuses to open the embedded server to the network without
// authentication unless insecure is set.
func (n *natsConfig) checkListener() error {
	if !n.Embedded || n.Listen == "" {
		return nil
	}
	if n.TLS != nil && n.TLS.VerifyClients && n.TLS.CertFile == "" {
		return fmt.Errorf("nats: verify_clients needs the embedded server's own certificate (tls cert_file and key_file)")
	}
	if n.User != "" || n.NKeySeedFile != "" || (n.TLS != nil && n.TLS.VerifyClients) || n.Insecure {
		return nil
	}
	return fmt.Errorf("nats: listen %s opens the embedded NATS server to the network without authentication; "+
		"set user and password_file, nkey_seed_file (and authorized_nkeys for the other nodes) or tls with verify_clients, "+
		"or insecure = true to accept anyone", n.Listen)
}

// writeDiags writes each diagnostic once: a grep-able "file:line:col:
// severity: summary" line (where when it has no position), then its detail
// indented; it returns the counts of errors and warnings.
func writeDiags(w io.Writer, where string, diags hcl.Diagnostics) (errs, warns int) {
	for _, d := range diags {
		sev := "warning"
		if d.Severity == hcl.DiagError {
			errs++
			sev = "error"
		} else {
			warns++
		}
		loc := where
		if d.Subject != nil {
			loc = fmt.Sprintf("%s:%d:%d", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", loc, sev, d.Summary)
		if d.Detail != "" {
			fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(d.Detail, "\n", "\n    "))
		}
	}
	return errs, warns
}
