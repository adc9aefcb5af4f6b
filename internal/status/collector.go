package status

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lanced-dev/lanced/internal/engine/hold"
)

// Config wires a Collector to the daemon.
type Config struct {
	Node    string
	Version string
	// Open maps a canonical table URI to the URI to open it with.
	Open func(table string) string
	// SmallRows returns the row count below which a fragment of table
	// counts as small (its target_rows_per_fragment); nil: DefaultSmallRows.
	SmallRows func(table string, cfg map[string]string) uint64
	// Gatherer is read for the queue figures (the scheduler's metrics).
	Gatherer prometheus.Gatherer
	// Leases lists the coordinator leases (nil: none shown).
	Leases func(ctx context.Context) ([]Lease, error)
	// Ready is the daemon's readiness check (nil: always ready).
	Ready func() error
	// Running lists the tasks this node executes now, with their progress
	// (nil: none shown; SetRunning sets it later).
	Running func() []Task
	// AdminToken enables the page's mutating actions and is then required
	// by them; empty leaves the page read-only.
	AdminToken string
	// Interval between refreshes of every known table. Default 30s.
	Interval time.Duration
	// HoldInterval between background re-reads of every known table's hold
	// (a hold placed or released with `lanced holds` shows within it; page
	// loads read no hold). Default 5s.
	HoldInterval time.Duration
	Logger       *slog.Logger
}

// Lease is one table coordinator lease.
type Lease struct {
	Table   string    `json:"table"`
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

// Event is one entry of the maintenance timeline or the error list.
type Event struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"` // commit, writer, task, conflict, cleanup, held, error
	Table string    `json:"table,omitempty"`
	Msg   string    `json:"msg"`
	// Detail is the record's other attributes, rendered key=value.
	Detail string `json:"detail,omitempty"`
}

// Queue sums the scheduler's queue gauges and counters.
type Queue struct {
	Pending     float64 `json:"pending"`
	Running     float64 `json:"running"`
	DeadLetters float64 `json:"dead_letters"`
	LeasesHeld  float64 `json:"leases_held"`
}

// Task is one task this node executes now and how far it has come: rows
// and bytes of input done of the totals (see package progress).
type Task struct {
	Table      string    `json:"table"`
	ID         string    `json:"task_id"`
	Kind       string    `json:"kind"`
	Started    time.Time `json:"started"`
	RowsDone   uint64    `json:"rows_done"`
	RowsTotal  uint64    `json:"rows_total"`
	BytesDone  uint64    `json:"bytes_done"`
	BytesTotal uint64    `json:"bytes_total"`
	// Percent done (by bytes when a byte total is known, else rows).
	Percent float64 `json:"percent"`
	// ETA is the estimated time left ("" until some work is done).
	ETA string `json:"eta,omitempty"`
}

// Root is one configured table root and its last sweep.
type Root struct {
	URI       string    `json:"uri"`
	Tables    int       `json:"tables"`
	Swept     time.Time `json:"swept,omitzero"`
	Err       string    `json:"error,omitempty"`
	Succeeded bool      `json:"succeeded"`
}

// Snapshot is everything the page and `lanced status` show.
type Snapshot struct {
	Node      string    `json:"node"`
	Version   string    `json:"version"`
	Generated time.Time `json:"generated"`
	Ready     string    `json:"ready"`
	Roots     []Root    `json:"roots"`
	Tables    []Table   `json:"tables"`
	Queue     Queue     `json:"queue"`
	Running   []Task    `json:"running"`
	Leases    []Lease   `json:"leases"`
	Timeline  []Event   `json:"timeline"`
	Errors    []Event   `json:"errors"`
	// Admin reports whether mutating actions are enabled.
	Admin bool `json:"admin_actions"`
}

// Held lists the snapshot's held tables.
func (s Snapshot) Held() []Table {
	var out []Table
	for _, t := range s.Tables {
		if t.Hold != nil {
			out = append(out, t)
		}
	}
	return out
}

const maxEvents = 500

// Collector keeps the status of every table the daemon knows.
type Collector struct {
	cfg Config

	mu        sync.Mutex
	tables    map[string]*Table
	seen      map[string]uint64 // newest version announced by a source
	roots     map[string]*Root
	lastMaint map[string]time.Time
	timeline  []Event
	errors    []Event
	kick      chan string
	// getHold reads one table's hold (hold.Tables.Get).
	getHold func(ctx context.Context, table string) (*hold.Record, error)
}

// New returns a Collector; call Run to refresh tables in the background.
func New(cfg Config) *Collector {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.HoldInterval <= 0 {
		cfg.HoldInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, tables: map[string]*Table{}, seen: map[string]uint64{}, roots: map[string]*Root{},
		lastMaint: map[string]time.Time{}, kick: make(chan string, 256), getHold: hold.Tables{}.Get}
}

// SetRunning sets the source of the running tasks shown (the scheduler
// node, which is made after the collector).
func (c *Collector) SetRunning(f func() []Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.Running = f
}

// Seen records that a source announced version of table; a new table or
// version is refreshed soon.
func (c *Collector) Seen(table string, version uint64) {
	c.mu.Lock()
	prev, known := c.seen[table]
	if version > prev {
		c.seen[table] = version
	}
	c.mu.Unlock()
	if !known || version > prev {
		c.Kick(table)
	}
}

// Kick asks for table to be refreshed soon.
func (c *Collector) Kick(table string) {
	select {
	case c.kick <- table:
	default:
	}
}

// SweptRoot records one poll sweep of a root.
func (c *Collector) SweptRoot(uri string, tables int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.roots[uri]
	if r == nil {
		r = &Root{URI: uri}
		c.roots[uri] = r
	}
	r.Swept = time.Now().UTC()
	if err != nil {
		r.Err = err.Error()
		return
	}
	r.Err, r.Tables, r.Succeeded = "", tables, true
}

// AddRoot registers a configured root before its first sweep.
func (c *Collector) AddRoot(uri string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots[uri] == nil {
		c.roots[uri] = &Root{URI: uri}
	}
}

// Run refreshes kicked tables at once and every table each Interval until
// ctx is done.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	ht := time.NewTicker(c.cfg.HoldInterval)
	defer ht.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case table := <-c.kick:
			c.Refresh(ctx, table)
		case <-ht.C:
			c.refreshHolds(ctx)
		case <-t.C:
			c.mu.Lock()
			names := make([]string, 0, len(c.seen))
			for n := range c.seen {
				names = append(names, n)
			}
			c.mu.Unlock()
			sort.Strings(names)
			for _, n := range names {
				if ctx.Err() != nil {
					return
				}
				c.Refresh(ctx, n)
			}
		}
	}
}

// openURI is the URI to open table (a canonical table URI) with.
func (c *Collector) openURI(table string) string {
	if c.cfg.Open != nil {
		return c.cfg.Open(table)
	}
	return table
}

// Refresh reads table's status from the table.
func (c *Collector) Refresh(ctx context.Context, table string) Table {
	open := c.openURI(table)
	var small func(map[string]string) uint64
	if c.cfg.SmallRows != nil {
		small = func(cfg map[string]string) uint64 { return c.cfg.SmallRows(table, cfg) }
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	t, err := ReadTable(rctx, table, open, small)
	cancel()
	if err != nil {
		t.Err = err.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.tables[table]; prev != nil && err == nil && t.Version > prev.Version && t.WrittenBy != "lanced" {
		c.addEvent(Event{Time: t.Committed, Kind: "writer", Table: table, Msg: "version written by " + dashIfEmpty(t.WrittenBy),
			Detail: "version=" + itoa(t.Version)})
	}
	if err != nil {
		if prev := c.tables[table]; prev != nil {
			keep := *prev
			keep.Err, keep.Refreshed = t.Err, t.Refreshed
			if !t.HoldChecked.IsZero() {
				keep.Hold, keep.HoldChecked = t.Hold, t.HoldChecked
			}
			t = keep
		}
	}
	t.LastMaintained = c.lastMaint[table]
	c.tables[table] = &t
	return t
}

func (c *Collector) addEvent(e Event) {
	c.timeline = append(c.timeline, e)
	if len(c.timeline) > maxEvents {
		c.timeline = slices.Delete(c.timeline, 0, len(c.timeline)-maxEvents)
	}
}

func (c *Collector) addError(e Event) {
	c.errors = append(c.errors, e)
	if len(c.errors) > 100 {
		c.errors = slices.Delete(c.errors, 0, len(c.errors)-100)
	}
}

// Snapshot returns the current status.
func (c *Collector) Snapshot(ctx context.Context) Snapshot {
	s := Snapshot{Node: c.cfg.Node, Version: c.cfg.Version, Generated: time.Now().UTC(), Ready: "ok", Admin: c.cfg.AdminToken != ""}
	if c.cfg.Ready != nil {
		if err := c.cfg.Ready(); err != nil {
			s.Ready = err.Error()
		}
	}
	c.mu.Lock()
	for _, r := range c.roots {
		s.Roots = append(s.Roots, *r)
	}
	for _, t := range c.tables {
		s.Tables = append(s.Tables, *t)
	}
	s.Timeline = slices.Clone(c.timeline)
	s.Errors = slices.Clone(c.errors)
	c.mu.Unlock()
	sort.Slice(s.Roots, func(i, j int) bool { return s.Roots[i].URI < s.Roots[j].URI })
	sort.Slice(s.Tables, func(i, j int) bool { return s.Tables[i].URI < s.Tables[j].URI })
	slices.Reverse(s.Timeline)
	slices.Reverse(s.Errors)
	if c.cfg.Gatherer != nil {
		s.Queue = queueFrom(c.cfg.Gatherer)
	}
	c.mu.Lock()
	running := c.cfg.Running
	c.mu.Unlock()
	if running != nil {
		s.Running = running()
	}
	if s.Running == nil {
		s.Running = []Task{}
	}
	if c.cfg.Leases != nil {
		if ls, err := c.cfg.Leases(ctx); err == nil {
			s.Leases = ls
		}
	}
	if s.Leases == nil {
		s.Leases = []Lease{}
	}
	return s
}

// refreshHolds re-reads the hold of every known table whose hold state is
// older than HoldInterval (Refresh reads it too).
func (c *Collector) refreshHolds(ctx context.Context) {
	c.mu.Lock()
	var names []string
	for n, t := range c.tables {
		if time.Since(t.HoldChecked) >= c.cfg.HoldInterval {
			names = append(names, n)
		}
	}
	c.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		if ctx.Err() != nil {
			return
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := c.getHold(hctx, c.openURI(n))
		cancel()
		if err != nil {
			continue
		}
		c.mu.Lock()
		if cur := c.tables[n]; cur != nil {
			cur.Hold, cur.HoldChecked = h, time.Now()
		}
		c.mu.Unlock()
	}
}

func queueFrom(g prometheus.Gatherer) Queue {
	var q Queue
	mfs, err := g.Gather()
	if err != nil {
		return q
	}
	sum := func(mf *dto.MetricFamily) float64 {
		var v float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				v += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v += m.GetCounter().GetValue()
			}
		}
		return v
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "lanced_scheduler_queue_depth":
			q.Pending = sum(mf)
		case "lanced_scheduler_tasks_in_flight":
			q.Running = sum(mf)
		case "lanced_scheduler_dead_letters_total":
			q.DeadLetters = sum(mf)
		case "lanced_scheduler_leases_held":
			q.LeasesHeld = sum(mf)
		}
	}
	return q
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
