// Package heapwatch measures how much heap a piece of work holds at its
// peak, for memory tests and benchmarks: it samples runtime.MemStats while
// the work runs, after a GC before it starts.
package heapwatch

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Peak runs fn while a goroutine reads the runtime's memory statistics
// every interval, and returns the largest value of stat seen above its
// value before fn (0 if it never rose). stat picks the figure, e.g.
// HeapAlloc (live and not yet collected objects) or HeapInuse (spans in
// use).
func Peak(fn func(), interval time.Duration, stat func(*runtime.MemStats) uint64) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := stat(&ms)
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var s runtime.MemStats
		for {
			runtime.ReadMemStats(&s)
			if v := stat(&s); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return peak.Load() - min(peak.Load(), base)
}

// HeapAlloc and HeapInuse are the usual stats for Peak.
func HeapAlloc(s *runtime.MemStats) uint64 { return s.HeapAlloc }
func HeapInuse(s *runtime.MemStats) uint64 { return s.HeapInuse }
