package scheduler

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/engine/progress"
)

// RunningTask is a task one of this node's workers is executing, with the
// progress its executor reported (rows and bytes of input done and
// expected; see package progress).
type RunningTask struct {
	Task     Task
	Started  time.Time
	Progress progress.Snapshot
}

// running tracks the tasks this node's workers execute.
type running struct {
	mu    sync.Mutex
	tasks map[string]*runningEntry
}

type runningEntry struct {
	task    Task
	started time.Time
	c       *progress.Counter
}

func (r *running) add(t Task) *progress.Counter {
	c := progress.NewCounter()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tasks == nil {
		r.tasks = map[string]*runningEntry{}
	}
	r.tasks[t.Key] = &runningEntry{task: t, started: time.Now(), c: c}
	return c
}

func (r *running) remove(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tasks, key)
}

func (r *running) list() []RunningTask {
	r.mu.Lock()
	out := make([]RunningTask, 0, len(r.tasks))
	for _, e := range r.tasks {
		out = append(out, RunningTask{Task: e.task, Started: e.started, Progress: e.c.Snapshot()})
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Running lists the tasks this node's workers are executing now, oldest
// first.
func (n *Node) Running() []RunningTask { return n.running.list() }

// progressCollector exports the progress of every running task as gauges
// labelled by table, kind and task id; a task's series go away when it
// ends.
type progressCollector struct {
	r                                          *running
	rowsDone, rowsTotal, bytesDone, bytesTotal *prometheus.Desc
}

func newProgressCollector(r *running) *progressCollector {
	labels := []string{"table", "kind", "task_id"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &progressCollector{r: r,
		rowsDone:   d("lanced_task_rows_done", "Input rows a running task has processed (series exist while the task runs)."),
		rowsTotal:  d("lanced_task_rows_total", "Input rows a running task reads in all."),
		bytesDone:  d("lanced_task_bytes_done", "Input bytes a running task has processed."),
		bytesTotal: d("lanced_task_bytes_total", "Input bytes a running task reads in all (0: not recorded in the manifest)."),
	}
}

func (p *progressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.rowsDone
	ch <- p.rowsTotal
	ch <- p.bytesDone
	ch <- p.bytesTotal
}

func (p *progressCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range p.r.list() {
		l := []string{rt.Task.Table, rt.Task.Kind, rt.Task.Key}
		s := rt.Progress
		ch <- prometheus.MustNewConstMetric(p.rowsDone, prometheus.GaugeValue, float64(s.ItemsDone), l...)
		ch <- prometheus.MustNewConstMetric(p.rowsTotal, prometheus.GaugeValue, float64(s.ItemsTotal), l...)
		ch <- prometheus.MustNewConstMetric(p.bytesDone, prometheus.GaugeValue, float64(s.BytesDone), l...)
		ch <- prometheus.MustNewConstMetric(p.bytesTotal, prometheus.GaugeValue, float64(s.BytesTotal), l...)
	}
}

// progressAttrs are a task's progress as log attributes.
func progressAttrs(s progress.Snapshot) []any {
	a := []any{"rows_done", s.ItemsDone, "rows_total", s.ItemsTotal, "bytes_done", s.BytesDone, "bytes_total", s.BytesTotal}
	if eta, ok := s.ETA(); ok {
		a = append(a, "eta", eta)
	}
	return a
}
