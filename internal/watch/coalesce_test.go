package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
)

// recorder is an out sink that records evaluations with their (fake) time.
type recorder struct {
	mu    sync.Mutex
	evals []eval
	fail  int // fail this many calls first
}

type eval struct {
	ref format.VersionRef
	at  time.Time
}

func (r *recorder) sink(_ context.Context, ref format.VersionRef) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		return errors.New("queue unavailable")
	}
	r.evals = append(r.evals, eval{ref, time.Now()})
	return nil
}

func (r *recorder) get() []eval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eval(nil), r.evals...)
}

func startCoalescer(t *testing.T, cfg CoalescerConfig, rec *recorder) (*Coalescer, context.CancelFunc) {
	t.Helper()
	c := NewCoalescer(cfg, rec.sink)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return c, func() { cancel(); <-done }
}

// TestCoalescerPerTableTiming: a table's own debounce and max_delay
// (Timing) replace the defaults, a version announced again does not extend
// the quiet period, and a closed maintenance window holds the evaluation
// until it opens.
func TestCoalescerPerTableTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		start := time.Now()
		opens := start.Add(time.Hour)
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: time.Second, MaxDelay: 10 * time.Second, AutoDone: true,
			Timing: func(table string) Timing {
				switch table {
				case "s3://b/slow.lance":
					return Timing{Debounce: 7 * time.Second, MaxDelay: time.Minute}
				case "s3://b/night.lance":
					return Timing{NextOpen: func(t time.Time) time.Time {
						if t.Before(opens) {
							return opens
						}
						return t
					}}
				}
				return Timing{}
			}}, rec)
		defer stop()
		ctx := context.Background()
		for _, tb := range []string{"s3://b/default.lance", "s3://b/slow.lance", "s3://b/night.lance"} {
			_ = c.Add(ctx, ref(tb, 1))
		}
		// The same version again (a poll sweep) each second: no news.
		for i := 0; i < 5; i++ {
			time.Sleep(time.Second)
			_ = c.Add(ctx, ref("s3://b/slow.lance", 1))
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		at := map[string]time.Duration{}
		for _, e := range rec.get() {
			at[e.ref.Table] = e.at.Sub(start)
		}
		if at["s3://b/default.lance"] != time.Second || at["s3://b/slow.lance"] != 7*time.Second || at["s3://b/night.lance"] != time.Hour {
			t.Fatalf("evaluated after %v; want default 1s, slow 7s (its own debounce), night 1h (its window)", at)
		}
	})
}

func TestCoalescerBurstBecomesOneEvaluation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: time.Second, MaxDelay: 10 * time.Second, AutoDone: true}, rec)
		defer stop()
		ctx := context.Background()
		start := time.Now()
		for v := uint64(1); v <= 10; v++ {
			if err := c.Add(ctx, ref("s3://b/t.lance", v)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// An out-of-order older version in the same burst does not lower it.
		_ = c.Add(ctx, ref("s3://b/t.lance", 4))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := rec.get()
		if len(got) != 1 || got[0].ref.Version != 10 {
			t.Fatalf("evaluations = %v, want one at version 10", got)
		}
		// The last new version came at start+0.9s (the older one at 1s is
		// no news and does not extend the quiet period); due one debounce
		// later.
		if d := got[0].at.Sub(start); d != 1900*time.Millisecond {
			t.Fatalf("evaluated after %v, want 1.9s", d)
		}
	})
}

func TestCoalescerMaxDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: time.Second, MaxDelay: 5 * time.Second, AutoDone: true}, rec)
		defer stop()
		start := time.Now()
		// An event every 400ms for 20s: the debounce never closes. (The
		// spacing keeps events off the due instants, so the order of two
		// goroutines waking at one fake instant does not matter.)
		for i := range 50 {
			_ = c.Add(context.Background(), ref("s3://b/t.lance", uint64(i+1)))
			time.Sleep(400 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		got := rec.get()
		// Bursts start at 0, 5.2, 10.4, 15.6 (first event after each
		// evaluation) and close MaxDelay later; the last one also closes
		// by debounce at 19.6+1.
		ms := time.Millisecond
		want := []time.Duration{5000 * ms, 10200 * ms, 15400 * ms, 20600 * ms}
		if len(got) != len(want) {
			t.Fatalf("got %d evaluations %v, want at %v", len(got), got, want)
		}
		for i, e := range got {
			if d := e.at.Sub(start); d != want[i] {
				t.Errorf("evaluation %d at %v, want %v", i, d, want[i])
			}
		}
		if got[len(got)-1].ref.Version != 50 {
			t.Errorf("last evaluation at version %d, want 50", got[len(got)-1].ref.Version)
		}
	})
}

func TestCoalescerBusyTableWaitsForDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: time.Second, MaxDelay: 3 * time.Second}, rec)
		defer stop()
		ctx := context.Background()
		_ = c.Add(ctx, ref("s3://b/t.lance", 1))
		_ = c.Add(ctx, ref("s3://b/u.lance", 1))
		time.Sleep(1500 * time.Millisecond)
		if got := rec.get(); len(got) != 2 {
			t.Fatalf("evaluations = %v, want t and u", got)
		}
		// t is busy: events for it are held, however long the run takes.
		for v := uint64(2); v <= 5; v++ {
			_ = c.Add(ctx, ref("s3://b/t.lance", v))
			time.Sleep(2 * time.Second)
		}
		synctest.Wait()
		if got := rec.get(); len(got) != 2 {
			t.Fatalf("busy table evaluated again before Done: %v", got)
		}
		doneAt := time.Now()
		c.Done("s3://b/t.lance")
		synctest.Wait()
		got := rec.get()
		if len(got) != 3 || got[2].ref != ref("s3://b/t.lance", 5) || !got[2].at.Equal(doneAt) {
			t.Fatalf("after Done: %v, want t@5 at once", got)
		}
		// u is idle after Done; a redelivery of its evaluated version is
		// not news.
		c.Done("s3://b/u.lance")
		_ = c.Add(ctx, ref("s3://b/u.lance", 1))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := rec.get(); len(got) != 3 {
			t.Fatalf("redelivered version re-evaluated: %v", got)
		}
	})
}

func TestCoalescerRetriesRefusedEvaluation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{fail: 2}
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: time.Second, MaxDelay: time.Second, AutoDone: true}, rec)
		defer stop()
		start := time.Now()
		_ = c.Add(context.Background(), ref("s3://b/t.lance", 7))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := rec.get()
		if len(got) != 1 || got[0].ref.Version != 7 || got[0].at.Sub(start) != 3*time.Second {
			t.Fatalf("evaluations = %v, want t@7 at 3s (two refusals, one debounce each)", got)
		}
	})
}

// floodEvents feeds n events for tables tables over span (fake time),
// round robin, with increasing versions per table.
func floodEvents(ctx context.Context, add Sink, n, tables int, span time.Duration) error {
	const steps = 1000
	perStep := n / steps
	sent := 0
	for step := range steps {
		for i := range perStep {
			k := step*perStep + i
			r := format.VersionRef{Table: fmt.Sprintf("s3://lake/t/%03d.lance", k%tables), Version: uint64(k/tables + 1)}
			if err := add(ctx, r); err != nil {
				return err
			}
			sent++
		}
		time.Sleep(span / steps)
	}
	return nil
}

// TestCoalescerFlood: 100,000 events for 100 tables over 10s become at most
// one evaluation per table per debounce window, each table's last
// evaluation carries its newest version, and no table is evaluated twice
// within one debounce window.
func TestCoalescerFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			events   = 100_000
			tables   = 100
			span     = 10 * time.Second
			debounce = time.Second
		)
		rec := &recorder{}
		c, stop := startCoalescer(t, CoalescerConfig{Debounce: debounce, MaxDelay: 2 * time.Second, AutoDone: true}, rec)
		defer stop()
		start := time.Now()
		if err := floodEvents(context.Background(), c.Add, events, tables, span); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		elapsed := time.Since(start)
		got := rec.get()
		windows := int(elapsed/debounce) + 1
		if len(got) > tables*windows {
			t.Fatalf("%d evaluations for %d tables over %d windows", len(got), tables, windows)
		}
		last := map[string]eval{}
		for _, e := range got {
			if p, ok := last[e.ref.Table]; ok && e.at.Sub(p.at) < debounce {
				t.Fatalf("%s evaluated at %v and again at %v", e.ref.Table, p.at.Sub(start), e.at.Sub(start))
			}
			last[e.ref.Table] = e
		}
		if len(last) != tables {
			t.Fatalf("%d tables evaluated, want %d", len(last), tables)
		}
		for table, e := range last {
			if e.ref.Version != events/tables {
				t.Fatalf("%s last evaluated at version %d, want %d", table, e.ref.Version, events/tables)
			}
		}
		t.Logf("%d events -> %d evaluations (%d tables, %v)", events, len(got), tables, elapsed)
	})
}

// TestCoalescerBatchHandsOnATickInOneCall: with Batch, the tables due at
// one tick reach the consumer in one call, a refused call retries them
// all after the debounce, and AutoDone lets the next burst through.
func TestCoalescerBatchHandsOnATickInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls [][]format.VersionRef
		fail := 1
		cfg := CoalescerConfig{Debounce: time.Second, MaxDelay: 10 * time.Second, AutoDone: true,
			Batch: func(_ context.Context, refs []format.VersionRef) error {
				mu.Lock()
				defer mu.Unlock()
				if fail > 0 {
					fail--
					return errors.New("queue unavailable")
				}
				calls = append(calls, append([]format.VersionRef(nil), refs...))
				return nil
			}}
		rec := &recorder{}
		c, stop := startCoalescer(t, cfg, rec)
		defer stop()
		ctx := context.Background()
		tables := []string{"s3://b/a.lance", "s3://b/b.lance", "s3://b/c.lance"}
		for _, tb := range tables {
			_ = c.Add(ctx, ref(tb, 1))
		}
		time.Sleep(5 * time.Second) // refused once, handed on a debounce later
		synctest.Wait()
		for _, tb := range tables {
			_ = c.Add(ctx, ref(tb, 2))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(rec.get()) != 0 {
			t.Fatalf("out called %v with Batch set", rec.get())
		}
		if len(calls) != 2 || len(calls[0]) != 3 || len(calls[1]) != 3 {
			t.Fatalf("batch calls %v, want two of three tables (versions 1, then 2)", calls)
		}
		for i, call := range calls {
			for _, r := range call {
				if r.Version != uint64(i+1) {
					t.Fatalf("call %d: %v, want version %d", i, call, i+1)
				}
			}
		}
	})
}
