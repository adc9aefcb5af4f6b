package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lanced-dev/lanced/testenv/natstest"
)

// givingUpCommitter gives up the first batch of every table the way the
// engine gives up the slices of a task whose siblings have no result: the
// results are not committed (their outputs are deleted) and the table is
// planned again at the same read version; later batches are committed by
// the logCommitter.
type givingUpCommitter struct {
	*logCommitter
	mu      sync.Mutex
	givenUp map[string][]string
}

func (c *givingUpCommitter) Commit(ctx context.Context, table string, results []Result) (CommitReport, error) {
	c.mu.Lock()
	first := c.givenUp[table] == nil
	if first {
		for _, r := range results {
			c.givenUp[table] = append(c.givenUp[table], r.Task.Key)
		}
	}
	keys := c.givenUp[table]
	c.mu.Unlock()
	if first {
		return CommitReport{Replan: true, Dropped: keys}, nil
	}
	return c.logCommitter.Commit(ctx, table, results)
}

// TestTaskGivenUpIsRunAgainWhenReplanned: a task whose result was given
// up at commit is planned again with the same key (same table, read
// version and fragments) well inside the task stream's duplicate window
// (10 minutes); the new copy must run and its result be committed, not be
// dropped as a duplicate of the copy that ended.
func TestTaskGivenUpIsRunAgainWhenReplanned(t *testing.T) {
	s := natstest.Server(t)
	out, logs := t.TempDir(), t.TempDir()
	committer := &givingUpCommitter{logCommitter: newLogCommitter(logs), givenUp: map[string][]string{}}
	cfg := fastConfig(t, "a")
	if cfg.DedupWindow != 0 {
		t.Fatalf("the test needs the default duplicate window, not %s", cfg.DedupWindow)
	}
	const tb = "file:///tables/given-up.lance"
	// Each committed once (committed lists every committed key).
	_, ex, want := runUntilRunAgain(t, s, cfg, committer, committer.committed, out, tb)
	committer.mu.Lock()
	givenUp := slices.Sorted(slices.Values(committer.givenUp[tb]))
	committer.mu.Unlock()
	if !slices.Equal(givenUp, want) {
		t.Fatalf("given up %v, want %v", givenUp, want)
	}
	ranTwice(t, ex, want)
}

// runUntilRunAgain starts a node with a planner of two tasks, the
// committer c (which gives up the first batch) and an executor writing
// under out, announces table tb at version 1 and waits until both tasks
// ran again and were committed (committed lists the committed keys). It
// returns the node, its executor and the tasks' keys.
func runUntilRunAgain(t *testing.T, s *server.Server, cfg Config, c Committer, committed func(string) []string, out, tb string) (*Node, *fileExecutor, []string) {
	t.Helper()
	ex := newFileExecutor(out, "a")
	n, _, _ := startNode(t, natstest.Connect(t, s), cfg, newListPlanner(2), ex, c)
	if err := n.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	want := []string{tb + "@1/rewrite/0", tb + "@1/rewrite/1"}
	waitFor(t, 30*time.Second, "the given-up tasks run again and committed", func() bool {
		return slices.Equal(committed(tb), want)
	})
	return n, ex, want
}

// ranTwice checks that each task of keys ran twice on ex: the attempt
// given up and the next one, once.
func ranTwice(t *testing.T, ex *fileExecutor, keys []string) {
	t.Helper()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for _, k := range keys {
		if ex.runs[k] != 2 {
			t.Errorf("task %s ran %d times, want 2 (the attempt given up and the next one, once)", k, ex.runs[k])
		}
	}
}
