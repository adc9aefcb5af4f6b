package status

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/store"
)

// TestPageLoadsReadNoHolds: snapshots (page loads, /api/status) read no
// hold object; the collector re-reads holds in the background, so a hold
// placed on the table by another process shows within HoldInterval.
func TestPageLoadsReadNoHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	uri := "file://" + dir
	c := New(Config{HoldInterval: 50 * time.Millisecond, Interval: time.Hour})
	var reads atomic.Int64
	c.getHold = func(ctx context.Context, table string) (*hold.Record, error) {
		reads.Add(1)
		return hold.Tables{}.Get(ctx, table)
	}
	c.mu.Lock()
	c.tables[uri] = &Table{URI: uri}
	c.mu.Unlock()
	for range 50 {
		if s := c.Snapshot(ctx); len(s.Tables) != 1 || s.Tables[0].Hold != nil {
			t.Fatalf("snapshot %+v", s.Tables)
		}
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("50 snapshots read %d holds, want 0", n)
	}

	b, err := store.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := hold.Place(ctx, b, hold.Record{Reason: "test hold", By: "test"}); err != nil {
		t.Fatal(err)
	}
	go c.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := c.Snapshot(ctx)
		if h := s.Tables[0].Hold; h != nil && h.Reason == "test hold" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("hold placed on the table not shown by the background refresh")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reads.Load() == 0 {
		t.Fatal("no background hold read")
	}
}
