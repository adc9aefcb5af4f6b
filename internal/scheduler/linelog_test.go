package scheduler

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// bufLines are the lines written to buf so far.
func bufLines(buf *bytes.Buffer) []string {
	return strings.Split(strings.TrimSpace(buf.String()), "\n")
}

// TestLineLogWritesEveryLineInOrder: lines logged before the writer runs
// are written by their callers at once; lines logged while it runs, more
// than it queues (lineLogQueue) from several goroutines, are all written,
// each goroutine's in its order and with the logger's own attributes; a
// line logged after the writer stopped is written at once.
func TestLineLogWritesEveryLineInOrder(t *testing.T) {
	// Every write goes through the handler, which serializes them; the
	// buffer is read by this goroutine after its own write or once the
	// writer returned.
	var w bytes.Buffer
	l := newLineLog(slog.New(slog.NewTextHandler(&w, nil)).With("node", "n1"))
	l.info("before", "i", 0)
	if got := bufLines(&w); len(got) != 1 || !strings.Contains(got[0], "msg=before") {
		t.Fatalf("a line logged before the writer runs is not written at once: %q", got)
	}
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() { l.run(stop) })
	for {
		l.mu.Lock()
		running := l.running
		l.mu.Unlock()
		if running {
			break
		}
	}
	const goroutines, each = 4, lineLogQueue
	var logging sync.WaitGroup
	for g := range goroutines {
		logging.Go(func() {
			for i := range each {
				l.info("line", "g", g, "i", i)
			}
		})
	}
	logging.Wait()
	close(stop)
	writer.Wait()
	l.info("after", "i", 0)
	got := bufLines(&w)
	if len(got) != 2+goroutines*each {
		t.Fatalf("%d lines written, want %d", len(got), 2+goroutines*each)
	}
	next := make([]int, goroutines)
	for _, line := range got[1 : len(got)-1] {
		var g, i int
		if _, err := fmt.Sscanf(line[strings.Index(line, " g="):], " g=%d i=%d", &g, &i); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if !strings.Contains(line, "node=n1") {
			t.Fatalf("line without the logger's attributes: %q", line)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: line %d written where %d was due", g, i, next[g])
		}
		next[g]++
	}
	if !strings.Contains(got[len(got)-1], "msg=after") {
		t.Fatalf("the line logged after the writer stopped is not the last one: %q", got[len(got)-1])
	}
}
