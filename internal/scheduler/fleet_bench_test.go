package scheduler

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/watch"
	"github.com/lanced-dev/lanced/testenv/natstest"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runCluster starts n clustered in-process nats-servers with JetStream and
// waits until JetStream has a meta leader.
func runCluster(tb testing.TB, n int) []*server.Server {
	tb.Helper()
	routePorts := make([]int, n)
	var routes []*url.URL
	for i := range routePorts {
		routePorts[i] = freePort(tb)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", routePorts[i])})
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "fleet", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			tb.Fatal(err)
		}
		go s.Start()
		servers[i] = s
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	for _, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			tb.Fatal("nats-server not ready")
		}
	}
	nc := natstest.Connect(tb, servers[0])
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return servers
		}
		if time.Now().After(deadline) {
			tb.Fatalf("jetstream cluster not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fleetPlanner plans one task per evaluation and records when each table
// was planned; no table is read (the benchmark measures the scheduling
// path, not planning).
// The records are kept in fleetShards shards by table, each under its own
// lock: under one lock the 48 planners of the three nodes waited for each
// other (0.3-1.8 s summed in a cold burst's execution trace), which a
// planner that reads tables does not.
type fleetPlanner struct {
	shards [fleetShards]planShard
	plans  atomic.Int64
	round  atomic.Int64
}

type planShard struct {
	mu      sync.Mutex
	planned map[string]time.Time   // table → first plan since the last reset
	times   map[string][]time.Time // table → every plan since the last reset
}

// fleetShards is how many shards the benchmark's records are kept in.
const fleetShards = 64

func fleetShard(table string) int { return int(crc32.ChecksumIEEE([]byte(table)) % fleetShards) }

func newFleetPlanner() *fleetPlanner {
	p := &fleetPlanner{}
	for i := range p.shards {
		p.shards[i] = planShard{planned: map[string]time.Time{}, times: map[string][]time.Time{}}
	}
	return p
}

// shard returns the table's shard, locked.
func (p *fleetPlanner) shard(table string) *planShard {
	sh := &p.shards[fleetShard(table)]
	sh.mu.Lock()
	return sh
}

// reset forgets every plan.
func (p *fleetPlanner) reset() {
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		clear(sh.planned)
		clear(sh.times)
		sh.mu.Unlock()
	}
}

func (p *fleetPlanner) Plan(_ context.Context, table string, inFlight []string) (Plan, error) {
	now := time.Now()
	p.plans.Add(1)
	sh := p.shard(table)
	if _, ok := sh.planned[table]; !ok {
		sh.planned[table] = now
	}
	sh.times[table] = append(sh.times[table], now)
	sh.mu.Unlock()
	r := p.round.Load()
	key := fmt.Sprintf("%s@%d", table, r)
	if slices.Contains(inFlight, key) {
		return Plan{ReadVersion: uint64(r)}, nil
	}
	return Plan{ReadVersion: uint64(r), Tasks: []Task{{Kind: "rewrite", Key: key, Table: table, ReadVersion: uint64(r)}}}, nil
}

type fleetExec struct{ done atomic.Int64 }

func (e *fleetExec) Execute(_ context.Context, t Task) (Result, error) {
	e.done.Add(1)
	return Result{}, nil
}

type fleetCommitter struct{ tasks atomic.Int64 }

func (c *fleetCommitter) Commit(_ context.Context, _ string, results []Result) (CommitReport, error) {
	c.tasks.Add(int64(len(results)))
	return CommitReport{Version: 1}, nil
}

// BenchmarkFleet drives a simulated fleet through the daemon's event path
// on a three-node JetStream cluster (R3): events → per-node coalescer
// (debounce) → Submit (poke) → lease → plan → task queue → workers →
// results → commit. Tables are names only (the planner reads nothing), so
// it measures the scheduling path. Each round sends a burst of
// events/rounds events spread over all tables and all three nodes' coalescers
// (as a shared notification queue would), then waits until every table
// was planned. Reported: ingest rate of the coalescers, event-to-plan
// latency after the debounce window (p50, p99, max: per table, from the
// end of its debounce window — its last event at the coalescer that
// announces it first, plus the debounce — to its first plan of the
// burst), tasks/s, heap per table and the JetStream store size; each
// round logs where the time goes (stageClock.breakdown). The nodes keep
// home ranges (Config.KeepHomeRanges) and the first burst starts once
// every range is held; LANCED_FLEET_HOME=0 runs them without. Run with:
//
//	go test -run '^$' -bench BenchmarkFleet -benchtime 1x ./internal/scheduler/
//
// LANCED_FLEET_CPU=<prefix> writes a CPU profile of each burst (from its
// first event until every table was planned) to <prefix>.<round>, and
// LANCED_FLEET_TRACE=<prefix> an execution trace of the first (cold) and
// third (warm) bursts (go tool trace; -pprof=sync shows where goroutines
// waited for locks and channels).
func BenchmarkFleet(b *testing.B) {
	if testing.Short() {
		b.Skip("fleet benchmark")
	}
	// LANCED_FLEET_TABLES and LANCED_FLEET_REPLICAS scale it down or
	// compare replication; events stay at 100 per table.
	tables, replicas := envInt("LANCED_FLEET_TABLES", 2000), envInt("LANCED_FLEET_REPLICAS", 3)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := startFleet(b, replicas)
	defer f.stop()
	names := make([]string, tables)
	for i := range names {
		names[i] = fmt.Sprintf("s3://lake/warehouse/t%04d.lance", i)
	}
	for b.Loop() {
		cpu0, load0 := processCPU(), loadAvg()
		start := time.Now()
		lat, ingest := f.bursts(b, names)
		planned := time.Since(start)
		for !fleetSettled(f.ctx, f.nodes, f.ex, f.cm) && time.Since(start) < 5*time.Minute {
			time.Sleep(10 * time.Millisecond)
		}
		elapsed := time.Since(start)
		slices.Sort(lat)
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		var storeBytes uint64
		for _, s := range f.servers {
			if st, err := s.Varz(nil); err == nil {
				storeBytes = max(storeBytes, uint64(st.JetStream.Stats.Store))
			}
		}
		events := 100 * tables
		b.ReportMetric(float64(events)/ingest.Seconds()/3, "events/s/node")
		b.ReportMetric(pct(0.5), "p50_ms")
		b.ReportMetric(pct(0.99), "p99_ms")
		b.ReportMetric(pct(1), "max_ms")
		b.ReportMetric(float64(f.cm.tasks.Load())/elapsed.Seconds(), "tasks/s")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(tables)/3, "heap_B/table/node")
		b.ReportMetric(float64(storeBytes), "js_store_B")
		// The process's CPU time over the run, as a share of one core:
		// on a loaded machine the latency tail is the scheduler's wait
		// for a core, not the path.
		b.ReportMetric((processCPU()-cpu0).Seconds()/elapsed.Seconds(), "cores_used")
		b.Logf("load average %s at the start, %s at the end", load0, loadAvg())
		b.Logf("%d tables, %d events in %d bursts: planned in %s, %d tasks committed in %s, %d plans",
			tables, events, fleetRounds, planned.Round(time.Millisecond), f.cm.tasks.Load(), elapsed.Round(time.Millisecond), f.pl.plans.Load())
	}
}

// fleetLogger logs as the daemon does by default: at info level, to
// stderr (with -v; LANCED_FLEET_DEBUG=1 logs at debug level), else
// nowhere.
func fleetLogger() *slog.Logger {
	switch {
	case !testing.Verbose():
		return slog.New(slog.DiscardHandler)
	case os.Getenv("LANCED_FLEET_DEBUG") == "1":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

const (
	fleetRounds   = 5
	fleetDebounce = 200 * time.Millisecond
)

// fleet is the benchmark's cluster: three servers, a node and a
// coalescer on each, one planner, executor and committer shared.
type fleet struct {
	servers    []*server.Server
	nodes      []*Node
	coalescers []*watch.Coalescer
	pl         *fleetPlanner
	ex         *fleetExec
	cm         *fleetCommitter
	clock      *stageClock
	ctx        context.Context
	cancel     context.CancelFunc
	runs       sync.WaitGroup
}

// startFleet starts the cluster and waits until every node is ready.
func startFleet(b *testing.B, replicas int) *fleet {
	f := &fleet{
		servers: runCluster(b, 3),
		pl:      newFleetPlanner(),
		ex:      &fleetExec{}, cm: &fleetCommitter{},
		clock:      &stageClock{published: map[string][]time.Time{}},
		coalescers: make([]*watch.Coalescer, 3), nodes: make([]*Node, 3),
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	// LANCED_FLEET_HOME=0 runs the nodes without home ranges: the first
	// burst then takes every range's lease on demand.
	home := os.Getenv("LANCED_FLEET_HOME") != "0"
	for i, s := range f.servers {
		nc := natstest.Connect(b, s)
		node, err := New(f.ctx, nc, Config{
			NodeID: fmt.Sprintf("n%d", i), Workers: 4, Replicas: replicas,
			AckWait: 10 * time.Second, LeaseTTL: 20 * time.Second, CommitMaxWait: 50 * time.Millisecond,
			MaxQueueDepth: 100_000, DrainTimeout: 2 * time.Second, Logger: fleetLogger(),
			KeepHomeRanges: home,
		}, f.pl, f.ex, f.cm)
		if err != nil {
			b.Fatal(err)
		}
		node.trace = f.clock.record
		f.nodes[i] = node
		f.runs.Go(func() { _ = node.Run(f.ctx) })
		cc := watch.CoalescerConfig{Debounce: fleetDebounce, MaxDelay: 10 * time.Second, AutoDone: true}
		// LANCED_FLEET_POKES=1 announces every table in its own message
		// (Submit), as before batched announcements (SubmitBatch).
		if os.Getenv("LANCED_FLEET_POKES") != "1" {
			cc.Batch = func(ctx context.Context, refs []format.VersionRef) error {
				for _, r := range refs {
					f.clock.publish(r.Table)
				}
				return node.SubmitBatch(ctx, refs)
			}
		}
		co := watch.NewCoalescer(cc, func(ctx context.Context, ref format.VersionRef) error {
			f.clock.publish(ref.Table)
			return node.Submit(ctx, ref.Table, ref.Version)
		})
		f.coalescers[i] = co
		f.runs.Go(func() { _ = co.Run(f.ctx) })
	}
	for _, n := range f.nodes {
		for !n.Ready() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if home {
		// The first burst comes once the nodes took their home ranges,
		// as it would on a fleet that has run for a few seconds.
		start := time.Now()
		for held := 0; held < leaseRanges; {
			if time.Since(start) > time.Minute {
				b.Fatalf("%d of %d ranges held a minute after start", held, leaseRanges)
			}
			time.Sleep(10 * time.Millisecond)
			held = 0
			for _, n := range f.nodes {
				n.mu.Lock()
				for _, rs := range n.ranges {
					if rs.lease != nil {
						held++
					}
				}
				n.mu.Unlock()
			}
		}
		b.Logf("home ranges held %s after the nodes were ready", time.Since(start).Round(time.Millisecond))
	}
	return f
}

func (f *fleet) stop() {
	f.cancel()
	f.runs.Wait()
}

// bursts runs the rounds: each a burst of events over every table, then
// a wait until every table was planned after its debounce window. It
// returns every table's latency of every round and the time spent
// sending events.
func (f *fleet) bursts(b *testing.B, names []string) (lat []time.Duration, ingest time.Duration) {
	// LANCED_FLEET_SETTLE=1 starts each burst once the previous burst's
	// tasks are committed; by default bursts follow each other as soon as
	// every table was planned (work of the previous burst still running).
	settle := os.Getenv("LANCED_FLEET_SETTLE") == "1"
	start := time.Now()
	version := uint64(0)
	perTable := 100 / fleetRounds
	for r := range fleetRounds {
		if settle {
			// Bursts apart: the previous burst's tasks are committed.
			for !fleetSettled(f.ctx, f.nodes, f.ex, f.cm) && time.Since(start) < 5*time.Minute {
				time.Sleep(10 * time.Millisecond)
			}
		}
		f.pl.round.Store(int64(r + 1))
		f.pl.reset()
		f.clock.reset()
		var tr, cp *os.File
		if p := os.Getenv("LANCED_FLEET_TRACE"); p != "" && (r == 0 || r == 2) {
			tr, _ = os.Create(fmt.Sprintf("%s.%d", p, r))
			_ = trace.Start(tr)
		}
		if p := os.Getenv("LANCED_FLEET_CPU"); p != "" {
			cp, _ = os.Create(fmt.Sprintf("%s.%d", p, r))
			_ = pprof.StartCPUProfile(cp)
		}
		sent := time.Now()
		dues := f.burst(names, version, perTable)
		lastEvent := time.Now()
		ingest += lastEvent.Sub(sent)
		version += uint64(perTable)
		round := f.waitPlanned(b, r, names, dues)
		if tr != nil {
			trace.Stop()
			tr.Close()
		}
		if cp != nil {
			pprof.StopCPUProfile()
			cp.Close()
		}
		b.Logf("round %d: %d events sent in %s, all planned %s after the last; after debounce p50 %s p99 %s",
			r, perTable*len(names), lastEvent.Sub(sent).Round(time.Millisecond), time.Since(lastEvent).Round(time.Millisecond),
			round[len(round)/2].Round(time.Millisecond), round[len(round)*99/100].Round(time.Millisecond))
		b.Logf("round %d stages: %s", r, f.clock.breakdown(names, dues))
		lat = append(lat, round...)
	}
	return lat, ingest
}

// burst sends perTable versions of every table after version, in
// table-interleaved order, round-robin over the nodes' coalescers, and
// returns when each table's debounce window ends: debounce after its last
// event at the first coalescer whose quiet period runs out (the coalescer
// that announces it first).
func (f *fleet) burst(names []string, version uint64, perTable int) []time.Time {
	// lastAdd[c][i]: when coalescer c last got an event of table i.
	var lastAdd [3][]time.Time
	for c := range lastAdd {
		lastAdd[c] = make([]time.Time, len(names))
	}
	k := 0
	for v := range perTable {
		for i, tb := range names {
			_ = f.coalescers[k%3].Add(f.ctx, format.VersionRef{Table: tb, Version: version + uint64(v) + 1})
			lastAdd[k%3][i] = time.Now()
			k++
		}
	}
	dues := make([]time.Time, len(names))
	for i := range names {
		for c := range lastAdd {
			if at := lastAdd[c][i]; !at.IsZero() && (dues[i].IsZero() || at.Before(dues[i])) {
				dues[i] = at
			}
		}
		dues[i] = dues[i].Add(fleetDebounce)
	}
	return dues
}

// waitPlanned waits until every table was planned at or after the end of
// its debounce window and returns the latencies, sorted. Plans before it
// come from the burst before (each table is announced by every coalescer
// that got events of it, the last ones later) and are not counted.
func (f *fleet) waitPlanned(b *testing.B, r int, names []string, dues []time.Time) []time.Duration {
	pl := f.pl
	// planAfter is the table's first plan at or after its due time and
	// whether it was planned before it.
	planAfter := func(i int) (at time.Time, planned, early bool) {
		sh := pl.shard(names[i])
		defer sh.mu.Unlock()
		early = sh.planned[names[i]].Before(dues[i])
		for _, at := range sh.times[names[i]] {
			if !at.Before(dues[i]) {
				return at, true, early
			}
		}
		return time.Time{}, false, early
	}
	deadline := time.Now().Add(2 * time.Minute)
	// Each poll looks only at the tables not seen planned yet, taking the
	// lock of a table's shard for it alone: one lock held across a scan
	// of every table kept the planners of all three nodes waiting (in a
	// cold burst's execution trace, 0.86 s summed).
	seen := make([]bool, len(names))
	n := 0
	for {
		for i := range names {
			if seen[i] {
				continue
			}
			if _, ok, _ := planAfter(i); ok {
				seen[i] = true
				n++
			}
		}
		if n == len(names) {
			break
		}
		if time.Now().After(deadline) {
			b.Logf("round %d: unplanned: %s", r, fleetState(pl, f.nodes, names, 5))
			b.Fatalf("round %d: %d of %d tables planned after 2m", r, n, len(names))
		}
		time.Sleep(5 * time.Millisecond)
	}
	var round []time.Duration
	early := 0
	for i := range names {
		at, _, before := planAfter(i)
		if before {
			early++
		}
		round = append(round, at.Sub(dues[i]))
	}
	if early > 0 {
		b.Logf("round %d: %d tables also planned before their debounce window ended (not counted)", r, early)
	}
	slices.Sort(round)
	return round
}

// fleetSettled reports whether every task executed was committed and no
// task is queued, pending or in flight on any node. (Counting planned
// tasks would not do: a range handed to another node drops the planned
// tasks not yet published, and the receiver plans the table again under
// the current burst's key.)
func fleetSettled(ctx context.Context, nodes []*Node, ex *fleetExec, cm *fleetCommitter) bool {
	if cm.tasks.Load() < ex.done.Load() {
		return false
	}
	for _, n := range nodes {
		n.mu.Lock()
		busy := false
		for _, st := range n.tables {
			if len(st.pending) > 0 || len(st.inflight) > 0 {
				busy = true
				break
			}
		}
		n.mu.Unlock()
		if busy {
			return false
		}
	}
	d, err := nodes[0].q.depth(ctx)
	return err == nil && d == 0 && cm.tasks.Load() >= ex.done.Load()
}

// processCPU is the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// stageClock records, per node and table, every time a table passed a
// stage of the announcement-to-plan path in the current burst (poke,
// lease, leased, plan), and per table when coalescers handed it to
// Submit (published). Each node records under its own lock (the nodes
// call record under their own locks; one clock-wide lock made them wait
// for each other).
type stageClock struct {
	mu        sync.Mutex
	published map[string][]time.Time // table → every hand-off to Submit
	nodes     sync.Map               // node → *nodeClock
}

// nodeClock is one node's records, in fleetShards shards by table, each
// under its own lock (under one lock per node its planners waited for each
// other: 1.0 s summed in a cold burst's execution trace).
type nodeClock [fleetShards]clockShard

type clockShard struct {
	mu sync.Mutex
	at map[string]map[string][]time.Time // table → stage → times
}

func (c *stageClock) node(id string) *nodeClock {
	if nc, ok := c.nodes.Load(id); ok {
		return nc.(*nodeClock)
	}
	nc := &nodeClock{}
	for i := range nc {
		nc[i].at = map[string]map[string][]time.Time{}
	}
	v, _ := c.nodes.LoadOrStore(id, nc)
	return v.(*nodeClock)
}

func (c *stageClock) record(node, table, stage string) {
	now := time.Now()
	sh := &c.node(node)[fleetShard(table)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.at[table]
	if m == nil {
		m = map[string][]time.Time{}
		sh.at[table] = m
	}
	m[stage] = append(m[stage], now)
}

// publish records a hand-off of table to Submit.
func (c *stageClock) publish(table string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.published[table] = append(c.published[table], now)
}

func (c *stageClock) reset() {
	c.mu.Lock()
	clear(c.published)
	c.mu.Unlock()
	c.nodes.Range(func(_, v any) bool {
		nc := v.(*nodeClock)
		for i := range nc {
			nc[i].mu.Lock()
			clear(nc[i].at)
			nc[i].mu.Unlock()
		}
		return true
	})
}

// snapshot returns a copy of every node's records keyed {node, table}
// (the nodes go on recording while it is read).
func (c *stageClock) snapshot() map[[2]string]map[string][]time.Time {
	out := map[[2]string]map[string][]time.Time{}
	c.nodes.Range(func(k, v any) bool {
		nc := v.(*nodeClock)
		for i := range nc {
			sh := &nc[i]
			sh.mu.Lock()
			for t, m := range sh.at {
				cp := make(map[string][]time.Time, len(m))
				for stage, times := range m {
					cp[stage] = slices.Clone(times)
				}
				out[[2]string{k.(string), t}] = cp
			}
			sh.mu.Unlock()
		}
		return true
	})
	return out
}

// firstFrom is the first of times at or after t; lastUntil the last at
// or before t (zero if none).
func firstFrom(times []time.Time, t time.Time) time.Time {
	if i := slices.IndexFunc(times, func(at time.Time) bool { return !at.Before(t) }); i >= 0 {
		return times[i]
	}
	return time.Time{}
}

func lastUntil(times []time.Time, t time.Time) time.Time {
	var out time.Time
	for _, at := range times {
		if !at.After(t) {
			out = at
		}
	}
	return out
}

// breakdown splits each table's debounce-end-to-plan time, on each node
// that planned it after its window ended (its first such plan), into:
// timer (the window's end to the first coalescer handing it to Submit at
// or after it: the coalescer's timer and loop), deliver (that to the
// first announcement of it noted on the node after it; deliver is split
// into transit, to the arrival of the lanced.pokes message naming it,
// and note, that to its being noted, when it came in one) and plan (that
// poke to the planner's call); plan is split further into queue (poke to
// lease attempt), lease (the attempt's round trips) and start (lease to
// plan) when the table's coordinator started after the poke, and wake
// (poke to plan) when it already ran. It returns the number of range
// lease writes the nodes attempted (lease writes) and one p50/p99 per
// stage.
func (c *stageClock) breakdown(names []string, dues []time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.snapshot()
	due := make(map[string]time.Time, len(names))
	for i, t := range names {
		due[t] = dues[i]
	}
	stages := map[string][]time.Duration{}
	add := func(name string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			stages[name] = append(stages[name], max(0, to.Sub(from)))
		}
	}
	for k, m := range at {
		table := k[1]
		plan := firstFrom(m["plan"], due[table])
		if plan.IsZero() {
			continue
		}
		pub := firstFrom(c.published[table], due[table])
		poke := firstFrom(m["poke"], pub)
		if pub.IsZero() || poke.After(plan) {
			poke = lastUntil(m["poke"], plan)
		}
		add("timer", due[table], pub)
		add("deliver", pub, poke)
		if recv := lastUntil(m["recv"], poke); !recv.IsZero() && !pub.IsZero() && !recv.Before(pub) {
			add("transit", pub, recv)
			add("note", recv, poke)
		}
		add("plan", poke, plan)
		if leased := lastUntil(m["leased"], plan); !leased.IsZero() && !leased.Before(poke) {
			lease := lastUntil(m["lease"], leased)
			add("queue", poke, lease)
			add("lease", lease, leased)
			add("start", leased, plan)
		} else {
			add("wake", poke, plan)
		}
	}
	acquires := 0
	for k, m := range at {
		if strings.HasPrefix(k[1], "range-") {
			acquires += len(m["acquire"])
		}
	}
	out := []string{fmt.Sprintf("lease writes %d", acquires)}
	for _, name := range []string{"timer", "deliver", "transit", "note", "plan", "queue", "lease", "start", "wake"} {
		d := stages[name]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		out = append(out, fmt.Sprintf("%s n=%d p50 %s p99 %s", name, len(d),
			d[len(d)/2].Round(time.Millisecond), d[len(d)*99/100].Round(time.Millisecond)))
	}
	return strings.Join(out, "; ")
}

// fleetState describes up to max unplanned tables as each node sees them.
func fleetState(pl *fleetPlanner, nodes []*Node, names []string, max int) string {
	var out []string
	for _, t := range names {
		sh := pl.shard(t)
		_, ok := sh.planned[t]
		sh.mu.Unlock()
		if ok {
			continue
		}
		desc := t
		for _, n := range nodes {
			n.mu.Lock()
			st := n.tables[t]
			if st == nil {
				desc += fmt.Sprintf(" [%s: unknown]", n.ID())
			} else {
				desc += fmt.Sprintf(" [%s: running %v dirty %v pending %d inflight %d]", n.ID(), st.running, st.dirty, len(st.pending), len(st.inflight))
			}
			n.mu.Unlock()
			n.view.mu.Lock()
			if r, ok := n.view.recs[rangeKey(rangeOf(t))]; ok {
				desc += fmt.Sprintf(" view: %s until %s", r.Holder, time.Unix(0, r.Expires).Format("15:04:05.000"))
			}
			n.view.mu.Unlock()
		}
		out = append(out, desc)
		if len(out) == max {
			break
		}
	}
	return strings.Join(out, "; ")
}
