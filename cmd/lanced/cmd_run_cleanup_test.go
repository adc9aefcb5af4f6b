package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/internal/scheduler"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func noPolicies(t *testing.T) func() *policy.Set {
	s, diags := policy.NewSet(nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return func() *policy.Set { return s }
}

func pendingEntries(t *testing.T, tableDir string) []journal.PendingEntry {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(tableDir, journal.PendingDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []journal.PendingEntry
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(tableDir, journal.PendingDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var pe journal.PendingEntry
		if err := json.Unmarshal(data, &pe); err != nil {
			t.Fatal(err)
		}
		out = append(out, pe)
	}
	return out
}

// journaledOrphansCleaned requires every orphan (a file under the local
// table path that no version references) to be in a journal entry of a
// task whose id starts with one of taskPrefixes, then runs one cleanup pass that
// treats every daemon's entry as dead (StaleTaskAfter 1ns) and requires
// every orphan gone. A write a kill interrupted is the local store's
// temporary ".<name>.<hex>.lanced.tmp"; the journal holds <name>.
func journaledOrphansCleaned(t *testing.T, path string, orphans []string, taskPrefixes ...string) {
	t.Helper()
	ctx := context.Background()
	bkt, err := store.Open(ctx, "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer bkt.Close()
	entries, err := journal.ListPending(ctx, bkt, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range orphans {
		if base := filepath.Base(k); strings.HasSuffix(base, ".lanced.tmp") && strings.HasPrefix(base, ".") {
			name := strings.TrimSuffix(strings.TrimPrefix(base, "."), ".lanced.tmp")
			k = filepath.ToSlash(filepath.Join(filepath.Dir(k), name[:max(0, strings.LastIndexByte(name, '.'))]))
		}
		if !slices.ContainsFunc(entries, func(e *journal.PendingEntry) bool {
			return slices.Contains(e.Files, k) && slices.ContainsFunc(taskPrefixes, func(p string) bool { return strings.HasPrefix(e.TaskID, p) })
		}) {
			var ids []string
			for _, e := range entries {
				ids = append(ids, fmt.Sprintf("%s %v", e.TaskID, e.Files))
			}
			t.Fatalf("%s: orphan %s is in no journal entry of a %q task: %v", path, k, taskPrefixes, ids)
		}
	}
	opts, err := cleanup.TableCleanupOptions(ctx, bkt)
	if err != nil {
		t.Fatal(err)
	}
	opts.OlderThan, opts.UnverifiedAfter, opts.StaleTaskAfter = 1000*24*time.Hour, 0, time.Nanosecond
	cl, err := cleanup.NewCleaner(nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Run(ctx, bkt, opts, false); err != nil {
		t.Fatal(err)
	}
	for _, k := range orphans {
		if _, err := os.Stat(filepath.Join(path, k)); err == nil {
			t.Fatalf("%s: orphan %s survived cleanup", path, k)
		}
	}
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// A task executed by the daemon's workload records its outputs in the
// journal; when its commit is dropped (real Lance compacted the same
// fragments first) its files and its journal entry are gone, and real
// Lance reads the table unchanged.
func TestDaemonJournalDroppedCommitLeavesNoFile(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	path := oracle.Build(t, "appends", t.TempDir())
	uri := "file://" + path
	want, wantRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	log := slog.New(slog.DiscardHandler)
	w := &maintainWorkload{policies: noPolicies(t), log: log, open: func(s string) string { return s },
		journal: journal.NewKeeper("lanced", "", log)}
	p, err := w.Plan(ctx, uri, nil)
	if err != nil || len(p.Tasks) == 0 {
		t.Fatalf("plan: %d tasks, %v", len(p.Tasks), err)
	}
	var results []scheduler.Result
	var written []string
	for _, task := range p.Tasks {
		r, err := w.Execute(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		r.Task = task
		results = append(results, r)
		er, jid, err := job.DecodeResult(r.Payload)
		if err != nil || jid == "" || !strings.HasPrefix(jid, task.Key+"~") {
			t.Fatalf("result envelope: journal %q, %v", jid, err)
		}
		written = append(written, er.Written()...)
	}
	// Recorded before the commit, owned by this process.
	entries := pendingEntries(t, path)
	if len(entries) != len(results) || len(written) == 0 {
		t.Fatalf("%d journal entries for %d tasks (%d files)", len(entries), len(results), len(written))
	}
	for _, e := range entries {
		if e.Owner != journal.LocalOwner("lanced") || len(e.Files) == 0 {
			t.Fatalf("journal entry %+v", e)
		}
	}
	for _, f := range written {
		if !exists(t, filepath.Join(path, f)) {
			t.Fatalf("output %s missing before commit", f)
		}
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
	rep, err := w.Commit(ctx, uri, results)
	if err == nil && !rep.Replan {
		t.Fatalf("commit over real Lance's compaction: %+v, want the tasks dropped", rep)
	}
	for _, f := range written {
		if exists(t, filepath.Join(path, f)) {
			t.Errorf("output %s of a dropped task still exists", f)
		}
	}
	if e := pendingEntries(t, path); len(e) != 0 {
		t.Errorf("journal entries left: %+v", e)
	}
	got, gotRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	if got != want || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (%s), want %d (%s)", gotRows, got, wantRows, want)
	}
}

// A lanced run killed right after uploading a rewrite output leaves a
// journal entry; the next daemon cleanup of the table (another process on
// this host) removes the dead task's files at once, not after the 7-day
// in-flight window, and real Lance still reads the table.
func TestDaemonCleanupRemovesKilledWorkersFiles(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	path := oracle.Build(t, "appends", tables)
	want, wantRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	cfgPath := filepath.Join(root, "lanced.hcl")
	cfg := `
state_dir = "state"
tables    = ["tables"]
source "poll" { interval = "1s" }
events {
  debounce  = "100ms"
  max_delay = "500ms"
}
http { listen = "" }
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), execMainEnv+"=1", "LANCED_FAILPOINT=rewrite.file")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("lanced run was not killed at the failpoint (err %v):\n%s", err, out.String())
	}
	entries := pendingEntries(t, path)
	if len(entries) == 0 {
		t.Fatalf("no journal entry after the kill")
	}
	var orphans []string
	for _, e := range entries {
		if e.Abandoned || !strings.HasPrefix(e.Owner, "lanced@") {
			t.Fatalf("journal entry %+v", e)
		}
		for _, f := range e.Files {
			if exists(t, filepath.Join(path, f)) {
				orphans = append(orphans, f)
			}
		}
	}
	if len(orphans) == 0 {
		t.Fatalf("the killed task left no file to reclaim: %+v", entries)
	}

	log := slog.New(slog.DiscardHandler)
	cleaner, err := cleanup.NewCleaner(nil, log)
	if err != nil {
		t.Fatal(err)
	}
	jk := journal.NewKeeper("lanced", "", log)
	cr := newCleanupRunner(cleaner, log, noPolicies(t), func(s string) string { return s }, nil, jk)
	defer cr.Close()
	uri := "file://" + path
	cr.RunDue(uri)
	for _, f := range orphans {
		if exists(t, filepath.Join(path, f)) {
			t.Errorf("file %s of the killed task survived the cleanup", f)
		}
	}
	if e := pendingEntries(t, path); len(e) != 0 {
		t.Errorf("journal entries left: %+v", e)
	}
	got, gotRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	if got != want || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (%s), want %d (%s)", gotRows, got, wantRows, want)
	}
}

// The daemon cleans a table after compacting it, with the policy's
// retention: older_than 0 and keep_versions 1 leave only the latest
// version and its files; real Lance reads it whole and keeps writing.
func TestDaemonCleansOldVersionsByPolicy(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	path := oracle.Build(t, "appends", tables)
	want, wantRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	before := oracle.Inspect(t, path, 0)
	policies := filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := `
table "**/appends.lance" {
  cleanup {
    older_than    = "0"
    keep_versions = 1
  }
  schedule { min_interval = "1s" }
}
`
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfgPath := writeTestDaemonConfig(t, root, addr)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, []string{"--config", cfgPath}, &logs, &logs) }()
	cleanedAfterCommit := func() bool {
		var committed float64
		for _, l := range logs.lines() {
			switch l["msg"] {
			case "version committed":
				committed, _ = l["version"].(float64)
			case "table cleaned":
				if v, _ := l["version"].(float64); committed > 0 && v >= committed {
					if n, _ := l["versions_removed"].(float64); n > 0 {
						return true
					}
				}
			}
		}
		return false
	}
	deadline := time.Now().Add(60 * time.Second)
	for !cleanedAfterCommit() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	_, metrics := httpGet("http://" + addr + "/metrics")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("daemon: %v", err)
	}
	if !cleanedAfterCommit() {
		for i, l := range logs.lines() {
			if i < 300 {
				t.Logf("%v", l)
			}
		}
		t.Fatal("no cleanup after the daemon's commit")
	}
	if !strings.Contains(metrics, "lanced_cleanup_versions_removed_total ") || strings.Contains(metrics, "lanced_cleanup_versions_removed_total 0\n") ||
		!strings.Contains(metrics, `lanced_cleanup_runs_total{outcome="ok"}`) {
		t.Errorf("cleanup metrics missing or zero:\n%s", grepLines(metrics, "lanced_cleanup_"))
	}
	after := oracle.Inspect(t, path, 0)
	if len(after.Versions) != 1 || after.Fragments != 1 || after.Version <= before.Version {
		t.Fatalf("after cleanup: versions %v, %d fragments, version %d (before %d)", after.Versions, after.Fragments, after.Version, before.Version)
	}
	data, err := os.ReadDir(filepath.Join(path, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != after.DataFiles {
		t.Errorf("data/ holds %d files, the one kept version references %d", len(data), after.DataFiles)
	}
	got, gotRows := oracle.RowSetDigest(oracle.Scan(t, path, 0, nil))
	if got != want || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (%s), want %d (%s)", gotRows, got, wantRows, want)
	}
	oracle.RunOps(t, path, []oracle.Op{{"op": "add", "rows": 5, "seed": 9}})
	if n := oracle.Inspect(t, path, 0).Rows; n != int64(wantRows)+5 {
		t.Fatalf("after a real-Lance append: %d rows", n)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// With a configured node id, a restarted daemon abandons the entries its
// previous run left (AbandonOwned) and its cleanup removes their files at
// once; entries of other nodes stay until they go stale. A held table is
// not cleaned at all.
func TestDaemonCleanupStableNodeIDAndHolds(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	path := oracle.Build(t, "appends", t.TempDir())
	uri := "file://" + path
	b, err := store.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	leftover := func(owner, name string) string {
		key := "data/" + name + ".lance"
		if err := b.Put(ctx, key, []byte("partial output")); err != nil {
			t.Fatal(err)
		}
		if err := journal.NewTaskJournal(b, owner).RecordPending(ctx, "task-"+name, []string{key}); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(path, key)
	}
	mine := leftover("node-a", "mine")
	theirs := leftover("node-b", "theirs")

	log := slog.New(slog.DiscardHandler)
	cleaner, err := cleanup.NewCleaner(nil, log)
	if err != nil {
		t.Fatal(err)
	}
	held := true
	cr := newCleanupRunner(cleaner, log, noPolicies(t), func(s string) string { return s },
		func(context.Context, string) (bool, error) { return held, nil }, journal.NewKeeper("lanced", "node-a", log))
	defer cr.Close()
	cr.RunDue(uri)
	if !exists(t, mine) || !exists(t, theirs) || len(pendingEntries(t, path)) != 2 {
		t.Fatal("a held table was cleaned")
	}
	held = false
	cr.RunDue(uri)
	if exists(t, mine) {
		t.Error("the previous run's output survived the cleanup")
	}
	if !exists(t, theirs) {
		t.Error("another node's recent output was deleted")
	}
	if e := pendingEntries(t, path); len(e) != 1 || e[0].Owner != "node-b" {
		t.Errorf("journal entries after cleanup: %+v", e)
	}
	if r := oracle.Inspect(t, path, 0); r.Rows != 1200 {
		t.Fatalf("real Lance reads %d rows", r.Rows)
	}
}

// Cleanup runs at most once per schedule.min_interval: a trigger inside the
// interval is deferred to its end, not dropped.
func TestDaemonCleanupIntervalDefersTriggers(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "appends", t.TempDir())
	uri := "file://" + path
	f, diags := policy.Parse([]byte("table \"**\" {\n  schedule { min_interval = \"700ms\" }\n}\n"), "p.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	set, diags := policy.NewSet([]*policy.File{f})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	cleaner, err := cleanup.NewCleaner(nil, log)
	if err != nil {
		t.Fatal(err)
	}
	cr := newCleanupRunner(cleaner, log, func() *policy.Set { return set }, func(s string) string { return s }, nil, journal.NewKeeper("lanced", "", log))
	defer cr.Close()
	runs := func() (n int, last time.Time) {
		for _, l := range logs.lines() {
			if l["msg"] == "table cleaned" {
				n++
				last, _ = time.Parse(time.RFC3339Nano, l["time"].(string))
			}
		}
		return n, last
	}
	cr.Trigger(uri)
	waitUntil(t, 10*time.Second, "first cleanup", func() bool { n, _ := runs(); return n == 1 })
	_, first := runs()
	cr.Trigger(uri)
	cr.Trigger(uri)
	waitUntil(t, 10*time.Second, "deferred cleanup", func() bool { n, _ := runs(); return n >= 2 })
	n, second := runs()
	if n != 2 || second.Sub(first) < 600*time.Millisecond {
		t.Fatalf("%d runs, %s apart; want 2 runs at least the interval apart", n, second.Sub(first))
	}
}
