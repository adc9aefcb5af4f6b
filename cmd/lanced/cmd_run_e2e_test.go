package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/gcsbridge"
	"github.com/lanced-dev/lanced/testenv/oracle"
	"github.com/lanced-dev/lanced/testenv/s3bridge"
)

// startTestNATS runs a nats-server with JetStream and a client listener on
// 127.0.0.1 for the duration of the test.
func startTestNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// TestE2EDaemonOnS3EmulatorDrivenByNotifications is issue 6's end-to-end
// acceptance: real Lance streams appends, deletes and backfills into two
// tables in the S3 emulator; every manifest PUT becomes an S3 event on a
// NATS subject (s3bridge); `lanced run` with only that notification source
// compacts and repacks; real Lance then reads the same rows as a control
// table that got the same ops locally, and the layout meets the policy.
func TestE2EDaemonOnS3EmulatorDrivenByNotifications(t *testing.T) {
	oracle.Require(t)
	ns := startTestNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const subject = "s3.events.lance"
	s3, bridge := s3bridge.Start(t, nc, s3bridge.Config{Subject: subject})
	source := fmt.Sprintf("nats { url = %q }\nsource \"nats\" { subject = %q }", ns.ClientURL(), subject)
	runEmulatorE2E(t, s3, source, bridge.Published)
}

// TestE2EDaemonOnGCSEmulatorDrivenByPubSub is the same on GCS: real Lance
// writes into fake-gcs-server (through storetest's XML-API front); every
// manifest create becomes a GCS OBJECT_FINALIZE notification on a pstest
// Pub/Sub subscription (gcsbridge); `lanced run` with only that pubsub
// source (and its embedded NATS) compacts, repacks and cleans; real Lance
// reads identical rows afterwards.
func TestE2EDaemonOnGCSEmulatorDrivenByPubSub(t *testing.T) {
	oracle.Require(t)
	gcs, bridge := gcsbridge.Start(t, gcsbridge.Config{}, nil)
	runEmulatorE2E(t, gcs, fmt.Sprintf("source \"pubsub\" { url = %q }", bridge.SubscriptionURL()), bridge.Published)
}

// runEmulatorE2E is the shared body of the emulator end-to-end tests: two
// tables written by real Lance into emu and, with the same ops, locally;
// the daemon configured with source (HCL: the notification source and what
// it needs) over emu's "wh" prefix must converge them to the policy, and
// real Lance must read the same rows as the local controls. published
// counts the notifications the emulator's bridge sent.
func runEmulatorE2E(t *testing.T, emu storetest.Emulator, source string, published func() int64) {
	so := oracle.Options{StorageOptions: emu.LanceStorageOptions()}

	// Two tables in the emulator and their local controls.
	root := t.TempDir()
	control := filepath.Join(root, "control")
	remote := map[string]string{}
	local := map[string]string{}
	for _, sc := range []string{"appends", "backfill"} {
		remote[sc] = oracle.Build(t, sc, emu.LanceURI("wh"), so)
		local[sc] = oracle.Build(t, sc, control)
	}
	beforeA := oracle.Inspect(t, remote["appends"], 0, so)
	beforeB := oracle.Inspect(t, remote["backfill"], 0, so)

	policies := filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := `
table "**/backfill.lance" {
  scope = "repack"
  repack { max_data_files_per_fragment = 1 }
}
`
	if err := os.WriteFile(filepath.Join(policies, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(root, "lanced.hcl")
	cfg := fmt.Sprintf(`
state_dir = "state"
tables    = [%q]
policies  = "policies"
%s
events {
  debounce  = "150ms"
  max_delay = "1s"
}
queue { commit_max_wait = "300ms" }
http { listen = "" }
`, emu.URI("wh"), source)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, []string{"--config", cfgPath, "--log-level", "debug"}, &logs, &logs) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("daemon did not stop")
		}
	}
	defer stop()
	waitUntil(t, 30*time.Second, "daemon running", func() bool { return logs.find("lanced running", nil) != nil })

	// The stream of writes: the same ops on the emulator and on the controls.
	for round := range 3 {
		opsA := []oracle.Op{
			{"op": "add", "rows": 25, "seed": 100 + round},
			{"op": "delete", "where": fmt.Sprintf("id %% 13 = %d", round)},
			{"op": "add", "rows": 15, "seed": 200 + round},
		}
		opsB := []oracle.Op{
			{"op": "add_columns", "columns": []map[string]string{{"name": fmt.Sprintf("extra%d", round), "value_sql": fmt.Sprintf("id * %d", round+3)}}},
			{"op": "add", "rows": 20, "seed": 300 + round},
			{"op": "delete", "where": fmt.Sprintf("id %% 17 = %d", round)},
		}
		runOpsRetryingConflicts(t, remote["appends"], opsA, so)
		oracle.RunOps(t, local["appends"], opsA)
		runOpsRetryingConflicts(t, remote["backfill"], opsB, so)
		oracle.RunOps(t, local["backfill"], opsB)
	}

	// Wait until the daemon converged: appends in one fragment, every
	// backfill fragment in one data file.
	converged := func() (bool, oracle.Report, oracle.Report) {
		a := oracle.Inspect(t, remote["appends"], 0, so)
		b := oracle.Inspect(t, remote["backfill"], 0, so)
		return a.Fragments == 1 && a.DataFiles == 1 && b.DataFiles == b.Fragments, a, b
	}
	var a, b oracle.Report
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ok bool
		ok, a, b = converged()
		if ok || time.Now().After(deadline) {
			if !ok {
				for i, l := range logs.lines() {
					if i < 400 {
						t.Logf("%v", l)
					}
				}
				t.Fatalf("not converged: appends %d fragments/%d files, backfill %d fragments/%d files (bridge published %d)",
					a.Fragments, a.DataFiles, b.Fragments, b.DataFiles, published())
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stop()

	// Real Lance reads identical content.
	for _, sc := range []string{"appends", "backfill"} {
		want, wantRows := oracle.RowSetDigest(oracle.Scan(t, local[sc], 0, nil))
		got, gotRows := oracle.RowSetDigest(oracle.Scan(t, remote[sc], 0, nil, so))
		if got != want || gotRows != wantRows {
			t.Fatalf("%s: real Lance reads %d rows (digest %s), control has %d (%s)", sc, gotRows, got, wantRows, want)
		}
	}
	if b.Fragments != beforeB.Fragments+3 {
		t.Errorf("backfill: %d fragments, want %d (repack must not merge fragments)", b.Fragments, beforeB.Fragments+3)
	}

	// The logs show each step with table, version and task keys; the
	// evaluations were driven by notifications.
	for _, sc := range []string{"appends", "backfill"} {
		tableKey := func(l map[string]any) bool {
			s, _ := l["table"].(string)
			return strings.HasSuffix(s, "/wh/"+sc+".lance")
		}
		for _, msg := range []string{"table planned", "task started", "task done", "version committed", "table cleaned"} {
			l := logs.find(msg, tableKey)
			if l == nil {
				t.Fatalf("%s: no %q log line", sc, msg)
			}
			switch msg {
			case "task started", "task done":
				if id, _ := l["task_id"].(string); id == "" {
					t.Errorf("%s: %q without task_id: %v", sc, msg, l)
				}
				if _, ok := l["read_version"]; !ok {
					t.Errorf("%s: %q without read_version: %v", sc, msg, l)
				}
			case "version committed", "table planned", "table cleaned":
				if _, ok := l["version"]; !ok {
					t.Errorf("%s: %q without version: %v", sc, msg, l)
				}
			}
		}
	}
	if l := logs.find("cleanup failed", nil); l != nil {
		t.Errorf("cleanup failed on the emulator: %v", l)
	}
	// Every task's journal entry was settled by its commit.
	for _, sc := range []string{"appends", "backfill"} {
		b, err := store.Open(context.Background(), emu.URI("wh/"+sc+".lance"))
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		if err := b.List(context.Background(), engine.PendingDir, func(o store.Object) error {
			left = append(left, o.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if len(left) > 0 {
			t.Errorf("%s: journal entries left after convergence: %v", sc, left)
		}
	}
	if published() == 0 {
		t.Fatal("the bridge published no notification")
	}
	t.Logf("appends: %d fragments → %d; backfill: %d data files in %d fragments → %d in %d; %d notifications",
		beforeA.Fragments, a.Fragments, beforeB.DataFiles, beforeB.Fragments, b.DataFiles, b.Fragments, published())
}

// runOpsRetryingConflicts runs ops one at a time, retrying an op that real
// Lance rejects with a retryable commit conflict (the daemon committed a
// rewrite or repack in between): what a Lance user does, since such an op
// committed nothing.
func runOpsRetryingConflicts(t *testing.T, uri string, ops []oracle.Op, so oracle.Options) {
	t.Helper()
	for _, op := range ops {
		for attempt := 1; ; attempt++ {
			_, err := oracle.TryOps(t, uri, []oracle.Op{op}, so)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "Retryable commit conflict") || attempt == 5 {
				t.Fatalf("%s: %v", uri, err)
			}
			t.Logf("%s: op %v: retryable conflict with the daemon, retrying", uri, op["op"])
		}
	}
}
