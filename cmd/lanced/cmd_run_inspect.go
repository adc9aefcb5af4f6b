package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/internal/store"
)

// The "inspect" workload is what `lanced run` queues until the engine's
// rewrite/repack executor is wired in: per announced table version, one
// task that reads the table's latest manifest through internal/store,
// checks it is readable, computes its layout stats and writes a report to
// <state_dir>/reports/<table id>.json. It exercises the whole pipeline
// (events → lease → plan → queue → worker → result → commit) with real
// reads, and holds a table whose manifest is corrupt.

const kindInspect = "inspect"

type inspectTask struct {
	Table   string `json:"table"`
	Version uint64 `json:"version"`
	Key     string `json:"manifest_key"`
}

type inspectReport struct {
	Table     string              `json:"table"`
	Version   uint64              `json:"version"`
	Worker    string              `json:"worker"`
	Inspected time.Time           `json:"inspected"`
	Policy    bool                `json:"policy_enabled"`
	Stats     format.LayoutTotals `json:"totals"`
	Fragments int                 `json:"fragments"`
}

type inspectWorkload struct {
	stateDir string
	node     func() string
	policies func() *policy.Set
	delay    time.Duration // --debug-task-delay: lets tests kill a worker mid-task
	open     func(table string) string
}

func (w *inspectWorkload) Plan(ctx context.Context, name string, inFlight []string) (scheduler.Plan, error) {
	b, err := store.Open(ctx, w.open(name))
	if err != nil {
		return scheduler.Plan{}, fmt.Errorf("open table %s: %w", name, err)
	}
	defer b.Close()
	vi, err := table.At(b).LatestInfo(ctx)
	if err != nil {
		return scheduler.Plan{}, err
	}
	v, key := vi.Version, vi.Key
	eff := w.policies().Resolve(name, nil)
	if !eff.Enabled.Value {
		return scheduler.Plan{ReadVersion: v}, nil
	}
	payload, _ := json.Marshal(inspectTask{Table: name, Version: v, Key: key})
	return scheduler.Plan{ReadVersion: v, Tasks: []scheduler.Task{{
		Kind: kindInspect, Key: fmt.Sprintf("%s@%d/%s", name, v, kindInspect),
		Table: name, ReadVersion: v, Payload: payload,
	}}}, nil
}

func (w *inspectWorkload) Execute(ctx context.Context, t scheduler.Task) (scheduler.Result, error) {
	if t.Kind != kindInspect {
		return scheduler.Result{}, fmt.Errorf("task kind %q: %w", t.Kind, scheduler.ErrInvalidTask)
	}
	var it inspectTask
	if err := json.Unmarshal(t.Payload, &it); err != nil || it.Key == "" {
		return scheduler.Result{}, fmt.Errorf("inspect task %s: %w", t.Key, scheduler.ErrInvalidTask)
	}
	if w.delay > 0 {
		select {
		case <-time.After(w.delay):
		case <-ctx.Done():
			return scheduler.Result{}, context.Cause(ctx)
		}
	}
	b, err := store.Open(ctx, w.open(it.Table))
	if err != nil {
		return scheduler.Result{}, fmt.Errorf("open table %s: %w", it.Table, err)
	}
	defer b.Close()
	data, err := b.Get(ctx, it.Key)
	if err != nil {
		return scheduler.Result{}, fmt.Errorf("read manifest %s: %w", it.Key, err)
	}
	m, err := format.DecodeManifestFile(it.Key, data)
	if err != nil {
		return scheduler.Result{}, err
	}
	if err := format.CheckReadable(m.PB); err != nil {
		return scheduler.Result{}, fmt.Errorf("table %s: %w", it.Table, err)
	}
	stats := format.ComputeLayoutStats(m.PB)
	rep := inspectReport{
		Table: it.Table, Version: m.Version(), Worker: w.node(), Inspected: time.Now().UTC(),
		Policy: w.policies().Resolve(it.Table, m.PB.GetConfig()).Enabled.Value,
		Stats:  stats.Totals, Fragments: stats.Totals.Fragments,
	}
	out, _ := json.MarshalIndent(rep, "", "  ")
	dir := filepath.Join(w.stateDir, "reports")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return scheduler.Result{}, fmt.Errorf("create reports dir: %w", err)
	}
	path := filepath.Join(dir, scheduler.TableID(it.Table)+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o640); err != nil {
		return scheduler.Result{}, fmt.Errorf("write report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return scheduler.Result{}, fmt.Errorf("write report: %w", err)
	}
	res, _ := json.Marshal(rep)
	return scheduler.Result{Payload: res, BytesRead: int64(len(data)), BytesWritten: int64(len(out))}, nil
}

// Commit records the newest inspected version as maintained.
func (w *inspectWorkload) Commit(_ context.Context, _ string, results []scheduler.Result) (scheduler.CommitReport, error) {
	var rep scheduler.CommitReport
	for _, r := range results {
		var ir inspectReport
		if err := json.Unmarshal(r.Payload, &ir); err != nil {
			return rep, fmt.Errorf("result of %s: %w", r.Task.Key, scheduler.ErrInvalidTask)
		}
		rep.Version = max(rep.Version, ir.Version)
	}
	return rep, nil
}
