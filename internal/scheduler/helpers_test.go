package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// fastConfig keeps timers short enough for tests.
func fastConfig(t testing.TB, id string) Config {
	return Config{
		NodeID:        id,
		Workers:       2,
		AckWait:       time.Second,
		MaxDeliver:    4,
		RetryBase:     100 * time.Millisecond,
		RetryMax:      time.Second,
		DrainTimeout:  2 * time.Second,
		LeaseTTL:      1500 * time.Millisecond,
		CommitMaxWait: 300 * time.Millisecond,
		FetchWait:     200 * time.Millisecond,
		Logger:        testLogger(t).With("test_node", id),
		Registerer:    prometheus.NewRegistry(),
	}
}

// fileExecutor is a real executor: every task writes an output file named
// by its key under dir (content: the payload and the worker), the way an
// engine task writes data files. block, when set, holds executions until
// it is closed or the task's context ends.
type fileExecutor struct {
	dir     string
	node    string
	delay   time.Duration
	block   chan struct{}
	started chan string
	fail    func(Task) error

	mu   sync.Mutex
	runs map[string]int
}

func newFileExecutor(dir, node string) *fileExecutor {
	return &fileExecutor{dir: dir, node: node, runs: map[string]int{}, started: make(chan string, 100)}
}

func keyFile(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:8])
}

func (e *fileExecutor) Execute(ctx context.Context, t Task) (Result, error) {
	e.mu.Lock()
	e.runs[t.Key]++
	e.mu.Unlock()
	select {
	case e.started <- t.Key:
	default:
	}
	if e.fail != nil {
		if err := e.fail(t); err != nil {
			return Result{}, err
		}
	}
	if e.block != nil {
		select {
		case <-e.block:
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		}
	}
	if e.delay > 0 {
		select {
		case <-time.After(e.delay):
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		}
	}
	path := filepath.Join(e.dir, keyFile(t.Key))
	body := fmt.Sprintf("%s\n%s\n", t.Payload, e.node)
	tmp := path + "." + e.node + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return Result{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return Result{}, err
	}
	return Result{Payload: []byte(path), BytesWritten: int64(len(body))}, nil
}

// outputs lists the task keys' files the executors wrote, with the node.
func outputs(t testing.TB, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		out[lines[0]] = lines[len(lines)-1]
	}
	return out
}

// logCommitter is a real committer: every batch appends one line to the
// table's log file (its "versions"); it checks each result's output exists.
type logCommitter struct {
	dir string
	mu  sync.Mutex
	// batches per table, in commit order
	batches map[string][][]string
	active  map[string]int
	overlap bool
}

func newLogCommitter(dir string) *logCommitter {
	return &logCommitter{dir: dir, batches: map[string][][]string{}, active: map[string]int{}}
}

func (c *logCommitter) Commit(ctx context.Context, table string, results []Result) (CommitReport, error) {
	c.mu.Lock()
	c.active[table]++
	if c.active[table] > 1 {
		c.overlap = true
	}
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.active[table]--; c.mu.Unlock() }()
	var keys []string
	for _, r := range results {
		if _, err := os.Stat(string(r.Payload)); err != nil {
			return CommitReport{}, fmt.Errorf("%w: output of %s: %v", ErrIncompatible, r.Task.Key, err)
		}
		keys = append(keys, r.Task.Key)
	}
	sort.Strings(keys)
	f, err := os.OpenFile(filepath.Join(c.dir, TableID(table)+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return CommitReport{}, err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, strings.Join(keys, " ")); err != nil {
		return CommitReport{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches[table] = append(c.batches[table], keys)
	return CommitReport{Version: uint64(len(c.batches[table]))}, nil
}

func (c *logCommitter) committed(table string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []string
	for _, b := range c.batches[table] {
		all = append(all, b...)
	}
	sort.Strings(all)
	return all
}

// listPlanner plans a fixed number of tasks per table and version, and
// records how many nodes plan one table at the same time.
type listPlanner struct {
	tasks int
	batch int
	mu    sync.Mutex
	calls map[string]int
	busy  map[string]int
	both  bool
	hold  time.Duration
	err   error
	// failures is how many of the next Plan calls fail with a transient
	// store error before planning succeeds.
	failures int
	// version is the read version planned (0: 1).
	version uint64
}

func newListPlanner(tasks int) *listPlanner {
	return &listPlanner{tasks: tasks, calls: map[string]int{}, busy: map[string]int{}}
}

func (p *listPlanner) Plan(ctx context.Context, table string, inFlight []string) (Plan, error) {
	p.mu.Lock()
	p.calls[table]++
	p.busy[table]++
	if p.busy[table] > 1 {
		p.both = true
	}
	fail := p.failures > 0
	if fail {
		p.failures--
	}
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.busy[table]--; p.mu.Unlock() }()
	if p.hold > 0 {
		time.Sleep(p.hold)
	}
	if p.err != nil {
		return Plan{}, p.err
	}
	if fail {
		return Plan{}, fmt.Errorf("list %s: %w", table, errThrottled)
	}
	var pl Plan
	p.mu.Lock()
	pl.ReadVersion = max(p.version, 1)
	p.mu.Unlock()
	pl.CommitBatchTasks = p.batch
	for i := range p.tasks {
		key := fmt.Sprintf("%s@%d/rewrite/%d", table, pl.ReadVersion, i)
		pl.Tasks = append(pl.Tasks, Task{Kind: "rewrite", Key: key, Table: table, ReadVersion: pl.ReadVersion, Payload: []byte(key)})
	}
	return pl, nil
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

// startNode starts a node and waits until it is ready; it fails the test
// if Run returns an error, and stops the node when the test ends.
func startNode(t testing.TB, nc *nats.Conn, cfg Config, p Planner, e Executor, c Committer) (*Node, context.CancelFunc, chan struct{}) {
	t.Helper()
	return startTracedNode(t, nc, cfg, nil, p, e, c)
}

// startTracedNode is startNode with the node's trace (Node.trace) set
// before it runs.
func startTracedNode(t testing.TB, nc *nats.Conn, cfg Config, trace func(node, table, stage string), p Planner, e Executor, c Committer) (*Node, context.CancelFunc, chan struct{}) {
	t.Helper()
	n, err := New(context.Background(), nc, cfg, p, e, c)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	n.trace = trace
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		if err := n.Run(ctx); err != nil {
			t.Errorf("run %s: %v", n.ID(), err)
		}
		close(done)
	}()
	waitFor(t, 5*time.Second, "node ready", n.Ready)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("node %s did not stop", n.ID())
		}
	})
	return n, cancel, done
}

var errBoom = errors.New("boom")

// metricValue is the value of a gauge or a counter.
func metricValue(t testing.TB, g prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// runServer and connect are natstest.Server and natstest.Connect.
func runServer(t testing.TB) *server.Server { t.Helper(); return natstest.Server(t) }

func connect(t testing.TB, s *server.Server) *nats.Conn { t.Helper(); return natstest.Connect(t, s) }

func (p *listPlanner) callCount(table string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[table]
}
