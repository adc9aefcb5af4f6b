package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonKeepsIndexCaughtUpUnderRealLanceWriter runs `lanced run`
// (embedded NATS, poll source every second, debounce 100ms) over a table
// real Lance built with an IVF_PQ on vec and a BTree on id, while a
// real-Lance writer appends a batch of rows about every second. Unindexed
// rows are sampled through real Lance's indexStats over the run. Every
// sample of each index must be within the bound plus the rows appended in
// the settle window before it (what the daemon has had no time yet to see:
// poll, debounce, catch-up, commit); after the writer stops, each index
// must come within the bound itself. The figures (unindexed rows over
// time) are in the test log. Two policies:
//   - max_unindexed_rows = 300, 60 rows a second: bound 300;
//   - no index bound (the default), three appends of 500 rows a second
//     (several small unindexed fragments per plan, which the rewrite bins
//     with the last rewrite's unindexed output): the rewrite of new
//     fragments comes first, but once an index has more than
//     plan.DefaultCatchUpFirstRows unindexed rows that are more than
//     plan.DefaultCatchUpFirstFraction of the live rows its unindexed
//     fragments are caught up first, so the bound is the larger of the
//     two; after the writer stops every row is indexed (no bound: any
//     unindexed row is caught up).
//
// 40 s of writing each by default; LANCED_SOAK=1 writes for 5 minutes.
func TestDaemonKeepsIndexCaughtUpUnderRealLanceWriter(t *testing.T) {
	oracle.Require(t)
	t.Run("max_unindexed_rows", func(t *testing.T) {
		daemonUnderRealLanceWriter(t, 300, 60, 1, func(int64) int64 { return 300 })
	})
	t.Run("default", func(t *testing.T) {
		daemonUnderRealLanceWriter(t, 0, 500, 3, func(rows int64) int64 {
			return max(plan.DefaultCatchUpFirstRows, int64(plan.DefaultCatchUpFirstFraction*float64(rows)))
		})
	})
}

// daemonUnderRealLanceWriter is one run of the test above: maxRows is the
// policy's index.max_unindexed_rows (0: no index policy), batch the rows
// per append, perTick the appends (commits) each second, bound the
// unindexed rows allowed for a table of that many live rows.
func daemonUnderRealLanceWriter(t *testing.T, maxRows, batch, perTick int, bound func(rows int64) int64) {
	settle := 12 * time.Second
	writing := 40 * time.Second
	if os.Getenv("LANCED_SOAK") == "1" {
		writing = 5 * time.Minute
	}
	root := t.TempDir()
	path := indexedTableWithPolicy(t, root, maxRows)
	cfgPath := writeTestDaemonConfig(t, root, "")
	appendFile(t, cfgPath, "log { level = \"debug\" }\n")
	logs, stop := startInProcessDaemon(t, "--config", cfgPath)
	defer stop()
	logDaemonOnFailure(t, logs)

	ctx, cancel := context.WithTimeout(context.Background(), writing)
	defer cancel()
	start := time.Now()
	w := startLanceAppender(ctx, path, batch, perTick)
	type sample struct {
		at                   time.Duration
		rows, vec, id, allow int64
		vecSegs              int
	}
	var samples []sample
	check := func(final bool) sample {
		r := oracle.Inspect(t, path, 0)
		now := time.Now()
		v, b := r.Index(t, "vec_idx"), r.Index(t, "id_idx")
		s := sample{at: now.Sub(start), rows: r.Rows, vec: v.UnindexedRows, id: b.UnindexedRows, vecSegs: int(v.Segments), allow: bound(r.Rows) + w.rowsIn(now.Add(-settle), now)}
		if final {
			s.allow = bound(r.Rows)
			if maxRows == 0 {
				s.allow = 0
			}
		}
		samples = append(samples, s)
		t.Logf("t=%5.1fs rows %6d  vec_idx unindexed %4d (%d segments, allowed %4d)  id_idx unindexed %4d", s.at.Seconds(), s.rows, s.vec, s.vecSegs, s.allow, s.id)
		return s
	}
	var over []sample
	for ctx.Err() == nil {
		if s := check(false); s.vec > s.allow || s.id > s.allow {
			over = append(over, s)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	for err := range w.err {
		t.Fatalf("real-Lance writer: %v", err)
	}
	// After the writer stops, the daemon has settle (three settle windows
	// with no bound: a rewrite, then the catch-up of its output) to come
	// within the final bound.
	deadline := time.Now().Add(settle)
	if maxRows == 0 {
		deadline = time.Now().Add(3 * settle)
	}
	var final sample
	for {
		time.Sleep(2 * time.Second)
		if final = check(true); (final.vec <= final.allow && final.id <= final.allow) || time.Now().After(deadline) {
			break
		}
	}
	stop()

	catchUps := logCommits(t, logs.lines())
	var peak int64
	for _, s := range samples {
		peak = max(peak, s.vec)
	}
	n := w.count()
	t.Logf("writer: %d x %d appends of %d rows in %s; %d samples, vec_idx unindexed peak %d, final %d (final bound %d); %d catch-up commits", n, perTick, batch, writing, len(samples), peak, final.vec, final.allow, catchUps)
	if len(over) > 0 {
		t.Fatalf("vec_idx or id_idx over the bound plus the settle window's appends: %+v", over)
	}
	if final.vec > final.allow || final.id > final.allow {
		t.Fatalf("vec_idx %d, id_idx %d unindexed after the writer stopped (final bound %d)", final.vec, final.id, final.allow)
	}
	if catchUps == 0 || int64(n*batch*perTick) <= bound(final.rows) {
		t.Fatalf("no catch-up committed (%d) or too few appends (%d)", catchUps, n)
	}
}

// indexedTableWithPolicy builds under root/tables a 3000-row real-Lance
// table with an IVF_PQ on vec (vec_idx) and a BTree on id (id_idx), and
// writes root/policies/p.hcl: index.max_unindexed_rows = maxRows, or empty
// defaults for 0. It returns the table's path.
func indexedTableWithPolicy(t *testing.T, root string, maxRows int) string {
	t.Helper()
	path := oracle.Build(t, "sized-1x3000-v32-t0-d0", filepath.Join(root, "tables"))
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
	})
	hcl := "defaults {\n}\n"
	if maxRows > 0 {
		hcl = fmt.Sprintf("defaults {\n  index {\n    max_unindexed_rows = %d\n  }\n}\n", maxRows)
	}
	writePolicy(t, filepath.Join(root, "policies"), hcl)
	return path
}

// lanceAppender is a real-Lance writer appending to a table in the
// background: perTick appends (commits) of batch rows about every second
// until its context ends. err yields its error, if any, and is closed when
// it stops.
type lanceAppender struct {
	err     chan error
	mu      sync.Mutex
	appends []appendedRows
}

// appendedRows is one tick of a lanceAppender: when, how many rows.
type appendedRows struct {
	at   time.Time
	rows int
}

func startLanceAppender(ctx context.Context, path string, batch, perTick int) *lanceAppender {
	w := &lanceAppender{err: make(chan error, 1)}
	go func() {
		defer close(w.err)
		for seed := 100; ctx.Err() == nil; seed++ {
			var ops []oracle.Op
			for k := 0; k < perTick; k++ {
				ops = append(ops, oracle.Op{"op": "add", "rows": batch, "seed": seed*perTick + k})
			}
			if _, err := oracle.RunOpsContext(context.Background(), path, ops); err != nil {
				w.err <- err
				return
			}
			w.mu.Lock()
			w.appends = append(w.appends, appendedRows{time.Now(), batch * perTick})
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

// rowsIn is the rows appended after from and up to to.
func (w *lanceAppender) rowsIn(from, to time.Time) (n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.appends {
		if a.at.After(from) && !a.at.After(to) {
			n += int64(a.rows)
		}
	}
	return n
}

// count is the ticks done so far.
func (w *lanceAppender) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.appends)
}

// appendFile appends text to the file at path.
func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// logDaemonOnFailure logs every daemon log line (planning, tasks,
// results, commits) once the test failed, so a stall shows where the work
// stopped.
func logDaemonOnFailure(t *testing.T, logs *syncBuffer) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, l := range logs.lines() {
			t.Logf("daemon: %v", l)
		}
	})
}

// logCommits logs the versions the daemon's log lines say it committed,
// fails the test on every ERROR line, and returns how many of the commits
// were catch-ups (create_index).
func logCommits(t *testing.T, lines []map[string]any) int {
	t.Helper()
	catchUps := 0
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		kind, _ := l["kind"].(string)
		if msg == "version committed" {
			t.Logf("%v: version %v committed: %s, read version %v, %v task(s)", l["time"], l["version"], kind, l["read_version"], l["tasks"])
			if kind == "create_index" {
				catchUps++
			}
		}
		if l["level"] == "ERROR" {
			t.Errorf("daemon log: %v", l)
		}
	}
	return catchUps
}
