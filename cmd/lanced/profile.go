package main

import (
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// startProfiles starts the profiles the environment asks for and returns
// the function that finishes them (always non-nil):
//
//   - LANCED_CPUPROFILE=file: a CPU profile of the whole command;
//   - LANCED_MEMPROFILE=file: the heap profile taken when the Go heap was
//     at its largest (sampled every 50 ms), so `go tool pprof -inuse_space`
//     shows what held memory at the peak and `-alloc_space` what allocated
//     most up to it.
//
// Profiling is for operators and benchmarks; a file that cannot be created
// leaves that profile off.
func startProfiles() func() {
	var stops []func()
	if path := os.Getenv("LANCED_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
			} else {
				f.Close()
			}
		}
	}
	if path := os.Getenv("LANCED_MEMPROFILE"); path != "" {
		done, finished := make(chan struct{}), make(chan struct{})
		go peakHeapProfile(path, done, finished)
		stops = append(stops, func() { close(done); <-finished })
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// peakHeapProfile writes the heap profile to path whenever the live heap
// is larger than at any earlier sample, until done is closed.
func peakHeapProfile(path string, done <-chan struct{}, finished chan<- struct{}) {
	defer close(finished)
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak {
			peak = v
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}
