package watch

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/minheap"
)

// CoalescerConfig configures a Coalescer.
type CoalescerConfig struct {
	// Debounce is the quiet period: a table is evaluated once no event for
	// it arrived for this long (default 5s).
	Debounce time.Duration
	// MaxDelay bounds the wait: a table is evaluated at most this long
	// after the first event of a burst, even if events keep coming
	// (default 60s; raised to Debounce if smaller).
	MaxDelay time.Duration
	// AutoDone marks a table done as soon as the out sink returns, for
	// consumers that finish their work inside the sink call. Otherwise the
	// consumer calls Done when the table's run ends.
	AutoDone bool
	// Now is the clock (default time.Now). Timers are real timers; tests
	// run under testing/synctest.
	Now func() time.Time
	// Timing, if set, gives one table's own debounce, max_delay and
	// maintenance windows (its policy's schedule); zero durations fall
	// back to Debounce and MaxDelay. It is called once per burst, when a
	// table's first pending event arrives.
	Timing func(table string) Timing
	// Batch, if set, receives every evaluation that became due at one
	// tick in one call, instead of one out call each (a consumer that
	// announces them over the network sends one message, not one per
	// table). An error retries them all.
	Batch func(ctx context.Context, refs []format.VersionRef) error
	// Logger and Metrics as in Options.
	Logger  *slog.Logger
	Metrics *Metrics
}

// Timing is one table's scheduling: the quiet period, the longest wait,
// and when it may be maintained.
type Timing struct {
	Debounce, MaxDelay time.Duration
	// NextOpen returns the first time at or after t when the table may be
	// maintained (nil: any time).
	NextOpen func(t time.Time) time.Time
}

// Coalescer turns a stream of table versions into evaluations: per table, a
// burst of events becomes one call of the out sink after Debounce (never
// later than MaxDelay after the first event), carrying the highest version
// seen. A table handed to out is busy until Done(table): events arriving
// meanwhile are held and become one more evaluation when the run ends, so
// one table is never evaluated twice at once.
//
// Add is a Sink; put it behind every source. Run delivers to out.
type Coalescer struct {
	cfg CoalescerConfig
	out Sink

	mu     sync.Mutex
	tables map[string]*tableState
	due    minheap.Heap[dueEntry]
	wake   chan struct{}
}

type tableState struct {
	version  uint64    // highest version of the pending burst
	emitted  uint64    // version of the last evaluation handed out
	first    time.Time // first event of the pending burst
	last     time.Time // latest event of the pending burst
	pending  bool
	busy     bool
	inHeap   bool
	heapTime time.Time
	waitsFor time.Time // the window opening last logged
	timing   Timing    // the table's own timing, resolved when the pending burst began
}

// NewCoalescer returns a coalescer delivering to out.
func NewCoalescer(cfg CoalescerConfig, out Sink) *Coalescer {
	if cfg.Debounce <= 0 {
		cfg.Debounce = 5 * time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 60 * time.Second
	}
	if cfg.MaxDelay < cfg.Debounce {
		cfg.MaxDelay = cfg.Debounce
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Metrics = orNewMetrics(cfg.Metrics)
	return &Coalescer{
		cfg:    cfg,
		out:    out,
		tables: map[string]*tableState{},
		due:    minheap.New(func(a, b dueEntry) bool { return a.at.Before(b.at) }),
		wake:   make(chan struct{}, 1),
	}
}

// dueAt is when a pending table becomes due: Debounce after its last
// event, at most MaxDelay after the first (the table's own when Timing
// gives them), and not before its maintenance window opens.
func (c *Coalescer) dueAt(table string, st *tableState) time.Time {
	deb, maxDelay := c.cfg.Debounce, c.cfg.MaxDelay
	tm := st.timing
	if tm.Debounce > 0 {
		deb = tm.Debounce
	}
	if tm.MaxDelay > 0 {
		maxDelay = max(tm.MaxDelay, deb)
	}
	d := st.last.Add(deb)
	if m := st.first.Add(maxDelay); m.Before(d) {
		d = m
	}
	if tm.NextOpen != nil {
		open := tm.NextOpen(d)
		if open.IsZero() {
			open = d.Add(24 * time.Hour) // no window opens within a week: look again tomorrow
		}
		if open.After(d) && !open.Equal(st.waitsFor) {
			st.waitsFor = open
			c.cfg.Logger.Info("table waits for its maintenance window", "table", table, "opens_at", open.UTC().Format(time.RFC3339))
		}
		d = open
	}
	return d
}

// beginBurst marks st pending from now with version and resolves the
// table's timing once for the burst (a policy lookup per event would sit
// on the event path under c.mu; a reloaded policy applies from the next
// burst).
func (c *Coalescer) beginBurst(table string, st *tableState, now time.Time, version uint64) {
	st.pending = true
	st.first = now
	st.version = version
	st.timing = Timing{}
	if c.cfg.Timing != nil {
		st.timing = c.cfg.Timing(table)
	}
	c.cfg.Metrics.pendingTables.Inc()
}

// Add records one event. It never blocks on the consumer and returns nil
// unless ctx is done, so a source acknowledges its message once the event
// is recorded here.
func (c *Coalescer) Add(ctx context.Context, ref format.VersionRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.cfg.Metrics.coalesced.Inc()
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.tables[ref.Table]
	if st == nil {
		st = &tableState{}
		c.tables[ref.Table] = st
	}
	if !st.pending {
		// A redelivery (or a poll sweep) of the version already evaluated
		// is not news.
		if ref.Version == st.emitted {
			return nil
		}
		c.beginBurst(ref.Table, st, now, ref.Version)
	} else if ref.Version > st.version {
		st.version = ref.Version
	} else {
		// The pending version announced again (a poll sweep, a
		// redelivery): not a new event, the quiet period goes on.
		return nil
	}
	st.last = now
	if !st.busy {
		c.schedule(ref.Table, st, c.dueAt(ref.Table, st))
	}
	return nil
}

// schedule puts the table on the heap at t unless it is there already with
// an earlier time (the pop re-checks the real due time).
func (c *Coalescer) schedule(table string, st *tableState, t time.Time) {
	if st.inHeap && !t.Before(st.heapTime) {
		return
	}
	st.inHeap = true
	st.heapTime = t
	c.due.Push(dueEntry{at: t, table: table})
	if c.due.Peek().table == table {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// Done ends the run of table: later events evaluate it again, and events
// that arrived during the run are delivered once their window closes
// (at once if it already has).
func (c *Coalescer) Done(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.tables[table]
	if st == nil || !st.busy {
		return
	}
	st.busy = false
	c.cfg.Metrics.busyTables.Dec()
	if st.pending {
		c.schedule(table, st, c.dueAt(table, st))
	}
}

// Run delivers due tables to out until ctx is done. If out fails, the table
// is retried after Debounce.
func (c *Coalescer) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		refs, next := c.popDue()
		if c.cfg.Batch != nil && len(refs) > 0 {
			c.cfg.Metrics.evaluations.Add(float64(len(refs)))
			err := c.cfg.Batch(ctx, refs)
			if ctx.Err() != nil {
				return nil
			}
			for _, ref := range refs {
				c.handedOn(ref, err)
			}
			continue // Batch may have taken a while: re-check the clock
		}
		for _, ref := range refs {
			c.cfg.Metrics.evaluations.Inc()
			err := c.out(ctx, ref)
			if ctx.Err() != nil {
				return nil
			}
			c.handedOn(ref, err)
		}
		if len(refs) > 0 {
			continue // out may have taken a while: re-check the clock
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(c.cfg.Now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			// Since Go 1.23 Stop leaves no stale tick behind.
			timer.Stop()
		case <-timer.C:
		}
	}
}

// handedOn settles an evaluation the consumer was given: retried when it
// refused it (err), done at once with AutoDone.
func (c *Coalescer) handedOn(ref format.VersionRef, err error) {
	if err != nil {
		c.cfg.Logger.Warn("table evaluation not handed on; retrying", "table", ref.Table, "version", ref.Version, "err", err)
		c.retry(ref)
		return
	}
	if c.cfg.AutoDone {
		c.Done(ref.Table)
	}
}

// popDue takes every due, idle table off the heap, marks it busy and
// returns its evaluation, plus the time of the next heap entry.
func (c *Coalescer) popDue() ([]format.VersionRef, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	var refs []format.VersionRef
	for c.due.Len() > 0 && !c.due.Peek().at.After(now) {
		e := c.due.Pop()
		st := c.tables[e.table]
		st.inHeap = false
		if !st.pending || st.busy {
			continue // Done re-schedules a busy table
		}
		if d := c.dueAt(e.table, st); d.After(now) {
			c.schedule(e.table, st, d)
			continue
		}
		st.pending = false
		st.busy = true
		st.emitted = st.version
		c.cfg.Metrics.pendingTables.Dec()
		c.cfg.Metrics.busyTables.Inc()
		refs = append(refs, format.VersionRef{Table: e.table, Version: st.version})
	}
	if c.due.Len() > 0 {
		return refs, c.due.Peek().at
	}
	return refs, time.Time{}
}

// retry re-queues an evaluation the out sink refused.
func (c *Coalescer) retry(ref format.VersionRef) {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.tables[ref.Table]
	st.busy = false
	c.cfg.Metrics.busyTables.Dec()
	st.emitted = 0
	if !st.pending {
		c.beginBurst(ref.Table, st, now, ref.Version)
	} else if ref.Version > st.version {
		st.version = ref.Version
	}
	st.last = now
	c.schedule(ref.Table, st, c.dueAt(ref.Table, st))
}

type dueEntry struct {
	at    time.Time
	table string
}
