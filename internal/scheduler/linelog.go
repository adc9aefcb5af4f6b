package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// lineLog writes the info lines of the node's busiest paths (a table
// planned, a coordinator started: a cold burst over thousands of tables
// makes thousands of each at once) from one goroutine. Logged directly,
// each planner waited for the log handler's lock, held across a write to
// the log's file; on a machine short of cores its holder waits for a core
// and every planner behind it (in a cold burst's execution trace the
// planners spent 4-7 s in total waiting there, most of the time they
// were blocked). A line is stamped when it is logged, and lines are
// written in the order they were logged; at most lineLogQueue lines wait
// (a caller that finds the queue full waits for room), and while the
// writer does not run a line is written by its caller as before.
type lineLog struct {
	log     *slog.Logger
	mu      sync.Mutex
	room    sync.Cond // signalled when the writer took the queued lines
	lines   []slog.Record
	running bool
	signal  chan struct{}
}

// lineLogQueue bounds the lines waiting for the writer.
const lineLogQueue = 4096

func newLineLog(log *slog.Logger) *lineLog {
	l := &lineLog{log: log, signal: make(chan struct{}, 1)}
	l.room.L = &l.mu
	return l
}

// info logs msg with args at info level.
func (l *lineLog) info(msg string, args ...any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, msg, 0)
	r.Add(args...)
	l.mu.Lock()
	for l.running && len(l.lines) >= lineLogQueue {
		l.room.Wait()
	}
	if !l.running {
		l.mu.Unlock()
		_ = l.log.Handler().Handle(ctx, r)
		return
	}
	l.lines = append(l.lines, r)
	l.mu.Unlock()
	wake(l.signal)
}

// run writes the queued lines until stop is closed, then the lines
// queued by then; lines logged after it returns are written by their
// callers.
func (l *lineLog) run(stop <-chan struct{}) {
	l.mu.Lock()
	l.running = true
	l.mu.Unlock()
	var batch []slog.Record
	write := func() {
		for i := range batch {
			_ = l.log.Handler().Handle(context.Background(), batch[i])
			batch[i] = slog.Record{}
		}
	}
	for {
		select {
		case <-l.signal:
			l.mu.Lock()
			batch, l.lines = l.lines, batch[:0]
			l.room.Broadcast()
			l.mu.Unlock()
			write()
		case <-stop:
			// The last lines are written before a caller may write
			// its own (running is false once the lock is released).
			l.mu.Lock()
			batch, l.lines = l.lines, nil
			write()
			l.running = false
			l.room.Broadcast()
			l.mu.Unlock()
			return
		}
	}
}
