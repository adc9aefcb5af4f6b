package scheduler

import (
	"context"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// resultIndex is the node's last look at which table subjects of
// LANCED_RESULTS hold results, taken by pollResults with one stream info
// request for every table (instead of a read per coordinator).
type resultIndex struct {
	mu     sync.Mutex
	valid  bool              // a poll succeeded and none failed since
	counts map[string]uint64 // TableID → results under its subject
}

// mayHave reports whether results may wait under the table's subject:
// the last poll saw some, or there is no good poll to go by.
func (x *resultIndex) mayHave(table string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return !x.valid || x.counts[TableID(table)] > 0
}

// snapshot returns the last poll's counts (nil when it failed).
func (x *resultIndex) snapshot() map[string]uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.valid {
		return nil
	}
	return x.counts
}

// pollResults counts the results under every table's subject and asks
// each coordinator running here that has more results under its subject
// than it holds to read its subject to the end: results are announced on
// core NATS, at most once, so an announcement can be lost, and one can
// arrive before its result is stored. It replaces a periodic read per
// coordinator.
func (n *Node) pollResults(ctx context.Context) {
	info, err := n.q.results.Info(ctx, jetstream.WithSubjectFilter(resultSubjectPrefix+">"))
	n.results.mu.Lock()
	n.results.valid = err == nil
	counts := map[string]uint64{}
	if err == nil {
		for subj, c := range info.State.Subjects {
			if c > 0 {
				counts[strings.TrimPrefix(subj, resultSubjectPrefix)] = c
			}
		}
	}
	n.results.counts = counts
	n.results.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			n.log.Debug("poll results", "err", err)
		}
		return
	}
	var woken []chan struct{}
	n.mu.Lock()
	for id, c := range counts {
		if st := n.byID[id]; st != nil && st.running && c > uint64(st.unsettled) {
			st.probe = true
			woken = append(woken, st.wake)
		}
	}
	n.mu.Unlock()
	for _, w := range woken {
		wake(w)
	}
}
