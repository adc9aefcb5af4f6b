package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/internal/status"
)

// daemonStatus wires the status page (internal/status) into `lanced run`:
// the collector, the roots' first sweeps (readiness) and lanced_build_info.
type daemonStatus struct {
	*status.Collector
	mu      sync.Mutex
	pending map[string]bool // poll roots not yet swept successfully
	ready   func() error    // the daemon's own readiness, set once known
}

func newDaemonStatus(d *daemon, nodeID string, reg *prometheus.Registry, nc *nats.Conn, open func(string) string) *daemonStatus {
	ds := &daemonStatus{pending: map[string]bool{}}
	bi := readBuildInfo()
	ds.Collector = status.New(status.Config{
		Node: nodeID, Version: bi.Version, Open: open, Gatherer: reg, Leases: natsLeases(nc),
		SmallRows: func(table string, cfg map[string]string) uint64 {
			return uint64(d.currentPolicies().Resolve(table, cfg).Compaction.TargetRowsPerFragment.Value)
		},
		Ready:      ds.Ready,
		AdminToken: os.Getenv("LANCED_ADMIN_TOKEN"),
		Logger:     d.log,
	})
	reg.MustRegister(ds.Collector)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lanced_build_info",
		Help: "Always 1; the labels say which lanced build runs.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion,
			"node": nodeID},
	}, func() float64 { return 1 }))
	return ds
}

// expectRoots makes readiness wait for one successful sweep of each root.
func (ds *daemonStatus) expectRoots(roots []string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, r := range roots {
		ds.pending[r] = true
		ds.AddRoot(r)
	}
}

// onSweep is the poll source's sweep hook.
func (ds *daemonStatus) onSweep(root string, tables int, err error) {
	ds.SweptRoot(root, tables, err)
	if err == nil {
		ds.mu.Lock()
		delete(ds.pending, root)
		ds.mu.Unlock()
	}
}

// Ready fails until the daemon is ready and every root was swept once.
func (ds *daemonStatus) Ready() error {
	ds.mu.Lock()
	ready := ds.ready
	var waiting []string
	for r := range ds.pending {
		waiting = append(waiting, r)
	}
	ds.mu.Unlock()
	if ready != nil {
		if err := ready(); err != nil {
			return err
		}
	}
	if len(waiting) > 0 {
		sort.Strings(waiting)
		return fmt.Errorf("root(s) not swept successfully yet: %s", strings.Join(waiting, ", "))
	}
	return nil
}

func (ds *daemonStatus) setReady(f func() error) {
	ds.mu.Lock()
	ds.ready = f
	ds.mu.Unlock()
}

// natsLeases reads the coordinator leases from the scheduler's KV bucket.
func natsLeases(nc *nats.Conn) func(ctx context.Context) ([]status.Lease, error) {
	return func(ctx context.Context) ([]status.Lease, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, scheduler.LeaseBucket)
		if err != nil {
			return nil, err
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		var out []status.Lease
		for k := range keys.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				continue
			}
			// A range lease lists the tables its holder coordinated at
			// its last renewal.
			var rec struct {
				Holder  string              `json:"holder"`
				Expires int64               `json:"expires_unix_nano"`
				Tables  map[string][]string `json:"tables"`
			}
			if json.Unmarshal(e.Value(), &rec) != nil || rec.Holder == "" {
				continue
			}
			for table := range rec.Tables {
				out = append(out, status.Lease{Table: table, Holder: rec.Holder, Expires: time.Unix(0, rec.Expires).UTC()})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
		return out, nil
	}
}

// runningTasks maps the scheduler node's running tasks to the status
// page's.
func runningTasks(node *scheduler.Node) func() []status.Task {
	return func() []status.Task {
		var out []status.Task
		for _, rt := range node.Running() {
			p := rt.Progress
			t := status.Task{Table: rt.Task.Table, ID: rt.Task.Key, Kind: rt.Task.Kind, Started: rt.Started,
				RowsDone: uint64(p.ItemsDone), RowsTotal: uint64(p.ItemsTotal), BytesDone: uint64(p.BytesDone),
				BytesTotal: uint64(p.BytesTotal), Percent: 100 * p.Fraction()}
			if eta, ok := p.ETA(); ok {
				t.ETA = eta.String()
			}
			out = append(out, t)
		}
		return out
	}
}
