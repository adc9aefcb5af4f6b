// Package heapwatch measures how much heap a piece of work holds at its
// peak, for memory tests and benchmarks: it samples runtime.MemStats while
// the work runs, after a GC before it starts.
package heapwatch

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
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

// PeakRSS runs fn and returns the process's peak resident set size while
// it ran and its resident set size before (Linux: the high-water mark
// VmHWM of /proc/self/status, reset through /proc/self/clear_refs before
// fn). ok is false where that is not available.
func PeakRSS(fn func()) (peak, before uint64, ok bool) {
	runtime.GC()
	debug.FreeOSMemory()
	if os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) != nil {
		fn()
		return 0, 0, false
	}
	before, ok = procStatus("VmRSS:")
	fn()
	peak, ok2 := procStatus("VmHWM:")
	return peak, before, ok && ok2
}

// procStatus reads a "kB" figure of /proc/self/status in bytes.
func procStatus(key string) (uint64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
