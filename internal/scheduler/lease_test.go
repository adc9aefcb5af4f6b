package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestLeaseIsTakenOverOnlyAfterExpiry(t *testing.T) {
	s := natstest.Server(t)
	node, err := New(context.Background(), natstest.Connect(t, s), fastConfig(t, "setup"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	ttl := 30 * time.Second
	a := &leaser{kv: node.q.leases, node: "a", ttl: ttl, now: clock.Now}
	b := &leaser{kv: node.q.leases, node: "b", ttl: ttl, now: clock.Now}
	ctx := context.Background()
	const rng = 7

	la, _, err := a.acquire(ctx, rng, 0)
	if err != nil || la == nil {
		t.Fatalf("a acquire: %v %v", la, err)
	}
	lb, rec, err := b.acquire(ctx, rng, 0)
	if err != nil || lb != nil || rec == nil || rec.Holder != "a" {
		t.Fatalf("b acquired a held lease: lease=%v rec=%v err=%v", lb, rec, err)
	}
	clock.Add(20 * time.Second)
	if err := a.renew(ctx, la, map[string][]string{"s3://lake/events.lance": {"k1"}}, endedTasks{Redo: map[string]map[string]uint64{"s3://lake/events.lance": {"k0": 12}},
		Abandoned: map[string]map[string]uint64{"s3://lake/events.lance": {"k2": 3}}}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	clock.Add(20 * time.Second) // 40s after acquire, 20s after renewal: still held
	if lb, _, _ := b.acquire(ctx, rng, 0); lb != nil {
		t.Fatal("b took a lease that was renewed and not yet expired")
	}
	clock.Add(11 * time.Second) // past the renewed deadline
	lb, rec, err = b.acquire(ctx, rng, 0)
	if err != nil || lb == nil {
		t.Fatalf("b could not take over an expired lease: %v", err)
	}
	if rec == nil {
		t.Fatal("takeover did not return the previous record")
	}
	if keys := rec.Tables["s3://lake/events.lance"]; rec.Holder != "a" || len(keys) != 1 || keys[0] != "k1" {
		t.Fatalf("takeover did not hand over the previous record: %+v", rec)
	}
	if redo := rec.Redo["s3://lake/events.lance"]; len(redo) != 1 || redo["k0"] != 12 {
		t.Fatalf("takeover did not hand over the keys to queue again: %+v", rec)
	}
	if ab := rec.Abandoned["s3://lake/events.lance"]; len(ab) != 1 || ab["k2"] != 3 {
		t.Fatalf("takeover did not hand over the abandoned keys: %+v", rec)
	}
	if err := a.renew(ctx, la, nil, endedTasks{}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a renewed a lease b took over: %v", err)
	}
	// a's release must not delete b's lease.
	if err := a.release(ctx, la); err != nil {
		t.Fatal(err)
	}
	if lc, _, _ := a.acquire(ctx, rng, 0); lc != nil {
		t.Fatal("a's stale release freed b's lease")
	}
	if err := b.release(ctx, lb); err != nil {
		t.Fatal(err)
	}
	if lc, _, err := a.acquire(ctx, rng, 0); lc == nil || err != nil {
		t.Fatalf("a could not take a released lease: %v", err)
	}
}

func TestLeaseNeverHeldByTwoNodes(t *testing.T) {
	s := natstest.Server(t)
	node, err := New(context.Background(), natstest.Connect(t, s), fastConfig(t, "setup"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rangeOf("file:///tables/contended.lance")
	var holders, maxHolders, acquisitions atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		// Each contender has its own connection, as separate nodes do.
		l := &leaser{kv: node.q.leases, node: fmt.Sprintf("n%d", i), ttl: 2 * time.Second, now: time.Now}
		if i%2 == 1 {
			n2, err := New(context.Background(), natstest.Connect(t, s), fastConfig(t, "x"), nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			l.kv = n2.q.leases
		}
		// Even contenders take released leases through their own watched
		// view's delete-marker revision (one compare-and-set), odd ones
		// through the full path.
		view := &leaseView{recs: map[string]leaseRecord{}, freed: map[string]uint64{}}
		if i%2 == 0 {
			if err := view.watch(ctx, l.kv); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				ls, _, err := l.acquire(ctx, rng, view.freeRevision(rangeKey(rng)))
				if err != nil || ls == nil {
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					continue
				}
				acquisitions.Add(1)
				h := holders.Add(1)
				for {
					m := maxHolders.Load()
					if h <= m || maxHolders.CompareAndSwap(m, h) {
						break
					}
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
				if err := l.renew(ctx, ls, nil, endedTasks{}); err != nil && ctx.Err() == nil {
					t.Errorf("renew of a held lease failed: %v", err)
				}
				holders.Add(-1)
				if err := l.release(context.Background(), ls); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if maxHolders.Load() != 1 {
		t.Fatalf("at most %d nodes held the lease at once, want 1", maxHolders.Load())
	}
	if acquisitions.Load() < 20 {
		t.Fatalf("only %d acquisitions: the lease did not change hands", acquisitions.Load())
	}
}
