package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/internal/watch"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run the daemon (watch tables, plan, queue and execute maintenance; status page, metrics and health on --http)",
		usage:   "lanced run [--config FILE] [--tables ROOT]... [--policy DIR] [flags]",
		run:     runDaemon,
	})
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

type runFlags struct {
	config, stateDir, policies, http, natsURL, natsListen, logLevel, logFormat, nodeID string
	tables                                                                             listFlag
	workers                                                                            int
	workload                                                                           string
	checkConfig                                                                        bool
	taskDelay                                                                          time.Duration
	progressEvery                                                                      time.Duration
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, *flag.FlagSet, error) {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "HCL config file (e.g. /etc/lanced/lanced.hcl); flags override it (default: none, built-in defaults)")
	fs.Var(&f.tables, "tables", "table root: a directory of *.lance tables or a table URI, local paths relative to the working directory (repeatable, comma-separated)")
	fs.StringVar(&f.stateDir, "state-dir", "", "state directory (JetStream store, reports) (default $STATE_DIRECTORY or ./.lanced-state)")
	fs.StringVar(&f.policies, "policy", "", "policy directory (*.hcl) (default: none, Lance's defaults and each table's config)")
	fs.StringVar(&f.policies, "policies", "", "old spelling of --policy")
	hideFlag("policies")
	fs.StringVar(&f.http, "http", "", `HTTP listen address for the status page (/), /metrics, /healthz, /readyz; "off" disables (default 127.0.0.1:9464)`)
	fs.StringVar(&f.natsURL, "nats-url", "", "join this NATS cluster instead of running the embedded server")
	fs.StringVar(&f.natsListen, "nats-listen", "", "let other nodes connect to the embedded NATS at host:port (default: no port, in-process only)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (default info)")
	fs.StringVar(&f.logFormat, "log-format", "", "json or text (default json)")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's id in leases and results (default host-pid)")
	fs.IntVar(&f.workers, "workers", -1, "tasks executed at once on this node; 0: coordinate only (default: the config file's workers, else 2)")
	fs.StringVar(&f.workload, "workload", "maintain", `maintain: plan, rewrite, repack and commit; inspect: only read each table's latest manifest and write a report to <state_dir>/reports (observe-only)`)
	fs.BoolVar(&f.checkConfig, "check-config", false, "validate the config file and policies, then exit")
	fs.Var(durationFlag{&f.taskDelay}, "debug-task-delay", "testing aid: each task waits this long before working")
	hideFlag("debug-task-delay")
	fs.Var(durationFlag{&f.progressEvery}, "debug-progress-every", `testing aid: how often a running task logs "task in progress" (default 30s)`)
	hideFlag("debug-progress-every")
	fs.Usage = func() { printUsage(stderr, commands["run"], fs) }
	if err := parseFlags(fs, args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if set(fs, "workers") && f.workers < 0 {
		return nil, fs, fmt.Errorf("--workers %d: want 0 (coordinate only) or more", f.workers)
	}
	if f.workload != "maintain" && f.workload != "inspect" {
		return nil, fs, fmt.Errorf("--workload %q: want maintain or inspect", f.workload)
	}
	return &f, fs, nil
}

// resolveRunConfig merges the config file (if any) and the flags.
func resolveRunConfig(f *runFlags) (runConfig, *hclparse.Parser, hcl.Diagnostics) {
	cfg := defaultRunConfig()
	var p *hclparse.Parser
	var diags hcl.Diagnostics
	if f.config != "" {
		cfg, p, diags = loadConfigFile(f.config)
		if diags.HasErrors() {
			return cfg, p, diags
		}
	}
	flagErr := func(summary, detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail})
	}
	if len(f.tables) > 0 {
		cfg.Tables = nil
		for _, t := range f.tables {
			u, err := normalizeTableRoot(".", t)
			if err != nil {
				flagErr("Invalid --tables", fmt.Sprintf("%q: %v", t, err))
				continue
			}
			if !strings.Contains(t, "://") {
				if abs, err := absFromCwd(t); err == nil {
					u = "file://" + abs
				}
			}
			cfg.Tables = append(cfg.Tables, u)
		}
	}
	if f.stateDir != "" {
		if abs, err := absFromCwd(f.stateDir); err == nil {
			cfg.StateDir = abs
		}
	}
	if f.policies != "" {
		abs, err := absFromCwd(f.policies)
		if err != nil {
			flagErr("Invalid --policies", err.Error())
		} else if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			flagErr("Policy directory not found", fmt.Sprintf("--policies %q is not a readable directory", f.policies))
		}
		cfg.Policies = abs
	}
	switch f.http {
	case "":
	case "off":
		cfg.HTTP = ""
	default:
		cfg.HTTP = f.http
	}
	if f.natsURL != "" {
		cfg.NATS.URL, cfg.NATS.Embedded = f.natsURL, false
	}
	if f.natsListen != "" {
		if !cfg.NATS.Embedded {
			flagErr("Conflicting NATS flags", "--nats-listen needs the embedded server; drop --nats-url")
		}
		cfg.NATS.Listen = f.natsListen
	}
	if f.logLevel != "" {
		cfg.LogLevel = f.logLevel
	}
	if f.logFormat != "" {
		cfg.LogFmt = f.logFormat
	}
	if f.workers >= 0 {
		cfg.Workers = f.workers
	}
	if err := cfg.finish(); err != nil {
		flagErr("Incomplete configuration", err.Error())
	}
	return cfg, p, diags
}

func absFromCwd(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + strings.TrimPrefix(p, "./"), nil
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := logOptions(lv)
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func loadPolicies(dir string) (*policy.Reloader, *policy.Set, hcl.Diagnostics) {
	if dir == "" {
		s, diags := policy.NewSet(nil)
		return nil, s, diags
	}
	r, diags := policy.NewReloader(dir)
	if r == nil {
		return nil, nil, diags
	}
	return r, r.Current(), diags
}

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, _, err := parseRunFlags(args, stderr)
	if err != nil {
		var exit exitError
		if errors.Is(err, flag.ErrHelp) || errors.As(err, &exit) {
			return err
		}
		fmt.Fprintf(stderr, "lanced run: %v\n", err)
		return exitError{2}
	}
	cfg, _, diags := resolveRunConfig(f)
	if diags.HasErrors() {
		writeDiags(stderr, "lanced run", diags)
		return exitError{1}
	}
	reloader, pset, pdiags := loadPolicies(cfg.Policies)
	if pdiags.HasErrors() {
		writeDiags(stderr, cfg.Policies, pdiags)
		return exitError{1}
	}
	if f.checkConfig {
		fmt.Fprintf(stdout, "config ok: %d table root(s), %d source(s), state %s, nats %s, policies %s\n",
			len(cfg.Tables), len(cfg.Sources), cfg.StateDir, natsDesc(cfg.NATS), orNone(cfg.Policies))
		return nil
	}
	log := newLogger(stdout, cfg.LogLevel, cfg.LogFmt)
	d := &daemon{cfg: cfg, flags: f, log: log, reloader: reloader}
	d.policies.Store(pset)
	return d.run(ctx)
}

func natsDesc(n natsConfig) string {
	if n.Embedded {
		if n.Listen != "" {
			return "embedded, listening on " + n.Listen
		}
		return "embedded"
	}
	return redactURL(n.URL)
}

func orNone(s string) string {
	if s == "" {
		return "(none: Lance defaults)"
	}
	return s
}

// daemon is one `lanced run` process.
type daemon struct {
	cfg      runConfig
	flags    *runFlags
	log      *slog.Logger
	reloader *policy.Reloader
	policies atomicSet
}

type atomicSet struct {
	mu sync.RWMutex
	s  *policy.Set
}

func (a *atomicSet) Store(s *policy.Set) { a.mu.Lock(); a.s = s; a.mu.Unlock() }
func (a *atomicSet) Load() *policy.Set {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.s
}

// currentPolicies is the policy set in force, with the config file's
// events block (if any) as every table's default debounce and max_delay.
func (d *daemon) currentPolicies() *policy.Set {
	s := d.policies.Load()
	if d.reloader != nil {
		s = d.reloader.Current()
	}
	if d.cfg.EventsSet {
		s = s.WithEvents(policy.EventDefaults{Debounce: d.cfg.Debounce, MaxDelay: d.cfg.MaxDelay, Where: "events block of " + d.flags.config})
	}
	return s
}

// tableTiming is one table's debounce, max_delay and maintenance windows
// as its effective policy says (the schedule block, else the config
// file's events block, else lanced's defaults).
func (d *daemon) tableTiming(table string) watch.Timing {
	sch := d.currentPolicies().Resolve(table, nil).Schedule
	tm := watch.Timing{Debounce: time.Duration(sch.Debounce.Value), MaxDelay: time.Duration(sch.MaxDelay.Value)}
	if ws := sch.Windows.Value; len(ws) > 0 {
		tm.NextOpen = func(t time.Time) time.Time { return policy.NextOpen(ws, t) }
	}
	return tm
}

func (d *daemon) run(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return fmt.Errorf("create state dir %s: %w", cfg.StateDir, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	nodeID := d.flags.nodeID
	if nodeID == "" {
		host, _ := os.Hostname()
		nodeID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	baseLog := log
	log = log.With("node", nodeID)
	log.Info("lanced starting", "version", version, "workload", d.flags.workload, "state_dir", cfg.StateDir, "tables", cfg.Tables,
		"nats", natsDesc(cfg.NATS), "workers", cfg.Workers, "policies", orNone(cfg.Policies))

	var ns *server.Server
	if cfg.NATS.Embedded {
		var err error
		if ns, err = startEmbeddedNATS(cfg.StateDir, cfg.NATS, log); err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	}
	nc, err := connectNATS(ctx, cfg.NATS, ns, "lanced "+nodeID, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	roots, err := watch.ParseRoots(cfg.Tables...)
	if err != nil {
		return fmt.Errorf("table roots: %w", err)
	}
	// The status page sees every log record (timeline, errors) and table.
	st := newDaemonStatus(d, nodeID, reg, nc, roots.OpenURI)
	log = slog.New(st.Handler(log.Handler()))
	baseLog = slog.New(st.Handler(baseLog.Handler()))
	planner, exec, committer, closeWorkload, err := d.workload(nodeID, log, reg, nc, roots)
	if err != nil {
		return err
	}
	defer closeWorkload()
	if cfg.Workers == 0 {
		// Coordinate only: the scheduler reads Workers 0 as its default,
		// a node without an executor runs no worker.
		exec = nil
	}
	q := cfg.Queue
	node, err := scheduler.New(ctx, nc, scheduler.Config{
		NodeID: nodeID, Workers: cfg.Workers,
		AckWait: q.AckWait, MaxDeliver: q.MaxDeliver, LeaseTTL: q.LeaseTTL, DrainTimeout: q.DrainTimeout,
		TableInFlight: q.TableInFlight, MaxQueueDepth: q.MaxQueueDepth, CommitBatchTasks: q.CommitBatchTasks,
		CommitMaxWait: q.CommitMaxWait, Replicas: q.Replicas,
		Classify: engineClassify, Logger: baseLog, Registerer: reg, Holds: hold.Tables{Open: roots.OpenURI},
		ProgressEvery: d.flags.progressEvery, KeepHomeRanges: true,
	}, planner, exec, committer)
	if err != nil {
		return err
	}
	st.SetRunning(runningTasks(node))

	stopPolicies, stopHUP := d.watchPolicies(log)
	defer stopPolicies()
	defer stopHUP()

	// Watch: sources → coalescer → scheduler.SubmitBatch (the tables due
	// at one tick in one message).
	wm := watch.NewMetrics(reg)

	wopts := watch.Options{Roots: roots, Logger: log, Metrics: wm}
	co := watch.NewCoalescer(watch.CoalescerConfig{
		Debounce: cfg.Debounce, MaxDelay: cfg.MaxDelay, AutoDone: true, Logger: log, Metrics: wm,
		Timing: d.tableTiming, Batch: node.SubmitBatch,
	}, func(ctx context.Context, ref format.VersionRef) error {
		return node.Submit(ctx, ref.Table, ref.Version)
	})
	sources, err := d.sources(roots, wopts, nc, st)
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- node.Run(runCtx) }()
	go st.Run(runCtx)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchers := runWatch(watchCtx, co, sources, st, log)

	ready := func() error {
		switch {
		case !nc.IsConnected():
			return errors.New("nats not connected")
		case !node.Ready():
			return errors.New("scheduler not running")
		case d.currentPolicies() == nil:
			return errors.New("policies not loaded")
		}
		return nil
	}
	st.setReady(ready)
	hs, err := startHTTP(cfg.HTTP, reg, nc, st, log)
	if err != nil {
		stopWatch()
		stopRun()
		return err
	}

	if waitStartup(ctx, st.Ready) {
		notifySystemd(runCtx, ready, log)
		log.Info("lanced running")
	}

	return running{nodeDone: nodeDone, stopWatch: stopWatch, watchers: watchers, stopRun: stopRun,
		stopPolicies: stopPolicies, hs: hs}.wait(ctx, cfg.Queue.DrainTimeout, log)
}

// running is what a started daemon stops, in order: the event sources,
// the scheduler (drained), the policy watch, the HTTP server.
type running struct {
	nodeDone     chan error
	stopWatch    func()
	watchers     *sync.WaitGroup
	stopRun      func()
	stopPolicies func()
	hs           *healthServer
}

// wait runs until ctx ends or the scheduler fails, then stops everything,
// draining the scheduler for up to drain (plus a grace period).
func (r running) wait(ctx context.Context, drain time.Duration, log *slog.Logger) error {
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutdown requested", "drain_timeout", drain)
	case runErr = <-r.nodeDone:
		r.nodeDone <- runErr
		log.Error("scheduler stopped unexpectedly", "err", runErr)
	}
	_, _ = sdNotify("STOPPING=1")
	r.stopWatch()
	wdone := make(chan struct{})
	go func() { r.watchers.Wait(); close(wdone) }()
	select {
	case <-wdone:
	case <-time.After(10 * time.Second):
		log.Warn("event sources did not stop in time; draining anyway")
	}
	r.stopRun()
	select {
	case err := <-r.nodeDone:
		if err != nil && runErr == nil {
			runErr = err
		}
	case <-time.After(drain + 30*time.Second):
		log.Error("scheduler drain timed out")
	}
	r.stopPolicies()
	if r.hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.hs.Shutdown(sctx)
		cancel()
	}
	log.Info("lanced stopped")
	return runErr
}

// runWatch runs the coalescer and every event source (each ref seen by
// the status page first) until ctx ends; the WaitGroup waits for them.
func runWatch(ctx context.Context, co *watch.Coalescer, sources []watch.Source, st *daemonStatus, log *slog.Logger) *sync.WaitGroup {
	var watchers sync.WaitGroup
	add := func(ctx context.Context, ref format.VersionRef) error {
		st.Seen(ref.Table, ref.Version)
		return co.Add(ctx, ref)
	}
	watchers.Go(func() { _ = co.Run(ctx) })
	for _, s := range sources {
		watchers.Go(func() {
			if err := s.Run(ctx, add); err != nil && ctx.Err() == nil {
				log.Error("event source stopped", "err", err)
			}
		})
	}
	return &watchers
}

// startHTTP serves /healthz, /readyz, /metrics and the status page on addr
// (nil when addr is empty).
func startHTTP(addr string, reg *prometheus.Registry, nc *nats.Conn, st *daemonStatus, log *slog.Logger) (*healthServer, error) {
	if addr == "" {
		return nil, nil
	}
	hs, err := newHealthServer(addr, reg, func() error {
		if nc.IsClosed() {
			return errors.New("nats connection closed")
		}
		return nil
	}, st.Ready, log, st.Register)
	if err != nil {
		return nil, err
	}
	hs.Start()
	log.Info("http listening", "addr", hs.Addr())
	return hs, nil
}

// workload builds the planner, executor and committer of --workload; the
// returned func stops what it started.
func (d *daemon) workload(nodeID string, log *slog.Logger, reg *prometheus.Registry, nc *nats.Conn, roots *watch.Roots) (scheduler.Planner, scheduler.Executor, scheduler.Committer, func(), error) {
	if d.flags.workload == "inspect" {
		w := &inspectWorkload{stateDir: d.cfg.StateDir, node: func() string { return nodeID }, policies: d.currentPolicies, delay: d.flags.taskDelay, open: roots.OpenURI}
		return w, w, w, func() {}, nil
	}
	w := &maintainWorkload{policies: d.currentPolicies, log: log, open: roots.OpenURI, reg: reg, delay: d.flags.taskDelay,
		quarantined: prometheus.NewCounter(prometheus.CounterOpts{Name: "lanced_fragments_quarantined_total",
			Help: "Fragments found corrupt and quarantined (left out of maintenance until they change)."})}
	if err := reg.Register(w.quarantined); err != nil {
		return nil, nil, nil, nil, err
	}
	var err error
	if w.journal, w.cleanup, err = d.cleanupParts(nc, reg, log, roots.OpenURI); err != nil {
		return nil, nil, nil, nil, err
	}
	return w, w, w, w.cleanup.Close, nil
}

// watchPolicies reloads the policies on fsnotify and SIGHUP (a bad edit
// keeps the old set) until stop is called; stopHUP gives SIGHUP back.
func (d *daemon) watchPolicies(log *slog.Logger) (stop, stopHUP func()) {
	policyCtx, stopPolicies := context.WithCancel(context.Background())
	if d.reloader != nil {
		d.reloader.OnReload = func(diags hcl.Diagnostics, applied bool) { d.logReload(diags, applied) }
		go func() {
			if err := d.reloader.Watch(policyCtx, 500*time.Millisecond); err != nil {
				log.Error("watch policies", "err", err)
			}
		}()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-policyCtx.Done():
				return
			case <-hup:
				if d.reloader == nil {
					log.Info("sighup without a policy directory: nothing to reload")
					continue
				}
				diags, applied := d.reloader.Reload()
				d.logReload(diags, applied)
			}
		}
	}()
	return stopPolicies, func() { signal.Stop(hup) }
}

// sources builds the configured event sources.
func (d *daemon) sources(roots *watch.Roots, wopts watch.Options, nc *nats.Conn, st *daemonStatus) ([]watch.Source, error) {
	var sources []watch.Source
	for _, sc := range d.cfg.Sources {
		switch sc.Kind {
		case "poll":
			var canon []string
			for _, r := range roots.List() {
				canon = append(canon, r.URI())
			}
			st.expectRoots(canon)
			src, err := watch.NewPollSource(watch.PollConfig{URIs: d.cfg.Tables, Interval: sc.Interval, OnSweep: st.onSweep}, wopts)
			if err != nil {
				return nil, fmt.Errorf("poll source: %w", err)
			}
			sources = append(sources, src)
		case "pubsub":
			sources = append(sources, watch.NewPubSubSource(sc.URL, wopts))
		case "nats":
			src, err := watch.NewNATSSource(nc, watch.NATSConfig{Subject: sc.Subject, Stream: sc.Stream}, wopts)
			if err != nil {
				return nil, fmt.Errorf("nats source %s: %w", sc.Subject, err)
			}
			sources = append(sources, src)
		}
	}
	return sources, nil
}

// waitStartup waits until startupReady says the daemon takes work (every
// root swept once) or 30s passed; false when stop (the signal context)
// ended first, so a signal during start-up stops the daemon at once.
func waitStartup(stop context.Context, startupReady func() error) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for deadline := time.Now().Add(30 * time.Second); startupReady() != nil && time.Now().Before(deadline); {
		select {
		case <-stop.Done():
			return false
		case <-t.C:
		}
	}
	return stop.Err() == nil
}

// notifySystemd sends READY=1 and then WATCHDOG=1 while ready, until ctx
// ends.
func notifySystemd(ctx context.Context, ready func() error, log *slog.Logger) {
	if sent, err := sdNotify("READY=1\nSTATUS=maintaining tables"); err != nil {
		log.Warn("sd_notify", "err", err)
	} else if sent {
		log.Info("notified systemd", "state", "READY=1")
	}
	if iv := watchdogInterval(); iv > 0 {
		go func() {
			t := time.NewTicker(iv)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if ready() == nil {
						_, _ = sdNotify("WATCHDOG=1")
					}
				}
			}
		}()
	}
}

func (d *daemon) logReload(diags hcl.Diagnostics, applied bool) {
	if applied {
		d.log.Info("policies reloaded", "dir", d.cfg.Policies, "warnings", len(diags))
		return
	}
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		loc := ""
		if dg.Subject != nil {
			loc = fmt.Sprintf("%s:%d:%d", dg.Subject.Filename, dg.Subject.Start.Line, dg.Subject.Start.Column)
		}
		d.log.Error("policy reload rejected, keeping previous policies", "at", loc, "err", dg.Summary+": "+dg.Detail)
	}
}
