// Package progress is how the engine reports how far a long piece of work
// has come: a compaction task counts the rows and bytes of input it has
// processed, a cleanup the files and bytes it has deleted. The engine
// reports through a Reporter carried by the context; callers (the CLI's
// progress bar, the daemon's log lines, metrics and status page) read a
// Counter. The engine never renders anything itself.
package progress

import (
	"context"
	"sync/atomic"
	"time"
)

// Reporter receives progress. Expect adds to the work expected, Add to the
// work done; both may be called from several goroutines.
type Reporter interface {
	Expect(items, bytes int64)
	Add(items, bytes int64)
}

type ctxKey struct{}

// With returns ctx carrying r; the engine's Expect and Add calls on the
// returned context reach r.
func With(ctx context.Context, r Reporter) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// Expect adds to the work expected by ctx's Reporter, if any.
func Expect(ctx context.Context, items, bytes int64) {
	if r, ok := ctx.Value(ctxKey{}).(Reporter); ok && (items != 0 || bytes != 0) {
		r.Expect(items, bytes)
	}
}

// Add adds to the work done of ctx's Reporter, if any.
func Add(ctx context.Context, items, bytes int64) {
	if r, ok := ctx.Value(ctxKey{}).(Reporter); ok && (items != 0 || bytes != 0) {
		r.Add(items, bytes)
	}
}

// Counter is a Reporter that keeps the counts for others to read.
type Counter struct {
	start                 time.Time
	itemsDone, itemsTotal atomic.Int64
	bytesDone, bytesTotal atomic.Int64
}

// NewCounter returns a Counter whose elapsed time starts now.
func NewCounter() *Counter { return &Counter{start: time.Now()} }

func (c *Counter) Expect(items, bytes int64) {
	c.itemsTotal.Add(items)
	c.bytesTotal.Add(bytes)
}

func (c *Counter) Add(items, bytes int64) {
	c.itemsDone.Add(items)
	c.bytesDone.Add(bytes)
}

// Snapshot is a Counter's state at one moment.
type Snapshot struct {
	ItemsDone  int64         `json:"done"`
	ItemsTotal int64         `json:"total"`
	BytesDone  int64         `json:"bytes_done"`
	BytesTotal int64         `json:"bytes_total"`
	Elapsed    time.Duration `json:"-"`
}

// Snapshot reads the counts.
func (c *Counter) Snapshot() Snapshot {
	return Snapshot{ItemsDone: c.itemsDone.Load(), ItemsTotal: c.itemsTotal.Load(),
		BytesDone: c.bytesDone.Load(), BytesTotal: c.bytesTotal.Load(), Elapsed: time.Since(c.start)}
}

// Fraction is the share of the work done, in [0, 1]: by bytes when a byte
// total is known, else by items; 0 when nothing is expected.
func (s Snapshot) Fraction() float64 {
	done, total := s.BytesDone, s.BytesTotal
	if total <= 0 {
		done, total = s.ItemsDone, s.ItemsTotal
	}
	if total <= 0 {
		return 0
	}
	return min(1, max(0, float64(done)/float64(total)))
}

// ETA estimates the time left at the rate so far; ok is false until some
// work is done.
func (s Snapshot) ETA() (d time.Duration, ok bool) {
	f := s.Fraction()
	if f <= 0 || s.Elapsed <= 0 {
		return 0, false
	}
	return time.Duration(float64(s.Elapsed) * (1 - f) / f).Round(time.Second), true
}
