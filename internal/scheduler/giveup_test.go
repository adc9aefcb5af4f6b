package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

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
	planner := newListPlanner(2)
	committer := &givingUpCommitter{logCommitter: newLogCommitter(logs), givenUp: map[string][]string{}}
	ex := newFileExecutor(out, "a")
	cfg := fastConfig(t, "a")
	if cfg.DedupWindow != 0 {
		t.Fatalf("the test needs the default duplicate window, not %s", cfg.DedupWindow)
	}
	n, _, _ := startNode(t, natstest.Connect(t, s), cfg, planner, ex, committer)
	const tb = "file:///tables/given-up.lance"
	if err := n.Submit(context.Background(), tb, 1); err != nil {
		t.Fatal(err)
	}
	// Each committed once (committed lists every committed key).
	want := []string{tb + "@1/rewrite/0", tb + "@1/rewrite/1"}
	waitFor(t, 30*time.Second, "the given-up tasks run again and committed", func() bool {
		return slices.Equal(committer.committed(tb), want)
	})
	committer.mu.Lock()
	givenUp := slices.Sorted(slices.Values(committer.givenUp[tb]))
	committer.mu.Unlock()
	if !slices.Equal(givenUp, want) {
		t.Fatalf("given up %v, want %v", givenUp, want)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for _, k := range want {
		if ex.runs[k] != 2 {
			t.Errorf("task %s ran %d times, want 2 (given up once, run again)", k, ex.runs[k])
		}
	}
}
