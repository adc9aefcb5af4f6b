package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/testenv/natstest"
)

// TestSubmitBatchAnnouncesEveryTable: tables announced together in one
// lanced.pokes message are planned by whichever node takes their ranges;
// tables whose range the announcing node holds are noted there without a
// message, and planned again.
func TestSubmitBatchAnnouncesEveryTable(t *testing.T) {
	planner, committer := newListPlanner(1), newLogCommitter(t.TempDir())
	s, out := natstest.Server(t), t.TempDir()
	var nodes []*Node
	for _, id := range []string{"a", "b"} {
		cfg := fastConfig(t, id)
		cfg.LeaseLinger = time.Minute // ranges stay held between the announcements
		n, _, _ := startNode(t, natstest.Connect(t, s), cfg, planner, newFileExecutor(out, id), committer)
		nodes = append(nodes, n)
	}
	var refs []format.VersionRef
	for i := range 20 {
		refs = append(refs, format.VersionRef{Table: fmt.Sprintf("file:///tables/batch%02d.lance", i), Version: 1})
	}
	var messages atomic.Int64
	watcher := natstest.Connect(t, s)
	sub, err := watcher.Subscribe(pokeBatchSubject, func(*nats.Msg) { messages.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].SubmitBatch(context.Background(), refs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every announced table planned and its task committed", func() bool {
		for _, r := range refs {
			if len(committer.committed(r.Table)) != 1 {
				return false
			}
		}
		return true
	})
	if got := messages.Load(); got != 1 {
		t.Fatalf("%d lanced.pokes messages for one batch of 20 tables no node held, want 1", got)
	}
	// The tables whose range the announcing node holds: noted there, no
	// message, planned again.
	var holder *Node
	var mine []format.VersionRef
	calls := map[string]int{}
	for _, n := range nodes {
		for _, r := range refs {
			n.mu.Lock()
			rs := n.ranges[rangeOf(r.Table)]
			held := rs != nil && rs.lease != nil
			n.mu.Unlock()
			if held && (holder == nil || holder == n) {
				holder = n
				mine = append(mine, format.VersionRef{Table: r.Table, Version: 2})
				calls[r.Table] = planner.callCount(r.Table)
			}
		}
	}
	if len(mine) == 0 {
		t.Fatal("no node holds a range of the 20 tables")
	}
	if err := holder.SubmitBatch(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the holder's tables planned again", func() bool {
		for _, r := range mine {
			if planner.callCount(r.Table) == calls[r.Table] {
				return false
			}
		}
		return true
	})
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := messages.Load(); got != 1 {
		t.Fatalf("%d lanced.pokes messages after announcing only tables the announcing node holds, want still 1", got)
	}
}
