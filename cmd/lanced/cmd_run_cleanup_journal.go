package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/store"
)

// The daemon's use of the engine's pending-output journal
// (internal/engine/cleanup_journal.go).
//
// Every execution of a task records the files it writes under its own
// journal id, "<task key>~<random>": a task redelivered while an earlier
// attempt still runs (a lost heartbeat) must not share an entry, or one
// attempt's Discard would delete the other's outputs. The id travels to the
// coordinator in the result envelope; the coordinator settles it after the
// commit (committed: cleared; dropped or certainly not committed: files
// deleted; unknown outcome: abandoned for cleanup to judge).
//
// Recovery: before this process first writes to a table's journal, the
// entries of dead lanced processes on this host are abandoned
// (engine.AbandonDeadLocalOwners) and, when the node id is configured (so
// stable across restarts), the entries this node's previous incarnation
// left (AbandonOwned). The next cleanup pass deletes their unreferenced
// files. A result of such a task that is still queued for commit is caught
// by the commit's existence check (outputsPresent) and replanned.

type journalKeeper struct {
	owner  string
	stable bool
	log    *slog.Logger

	mu        sync.Mutex
	recovered map[string]bool
}

// newJournalKeeper returns the journal keeper of this node: owner is the
// configured node id (stable) or, without one, engine.LocalOwner's
// "lanced@host/pid", which later processes on this host recognise as dead.
func newJournalKeeper(configuredNodeID string, log *slog.Logger) *journalKeeper {
	k := &journalKeeper{owner: engine.LocalOwner("lanced"), log: log, recovered: map[string]bool{}}
	if configuredNodeID != "" {
		k.owner, k.stable = configuredNodeID, true
	}
	return k
}

// recover runs the start-up recovery for the table once per process
// (again after a failure).
func (k *journalKeeper) recover(ctx context.Context, table string, b *store.Bucket) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.recovered[table] {
		return
	}
	n := 0
	if k.stable {
		owned, err := engine.NewTaskJournal(b, k.owner).AbandonOwned(ctx)
		if err != nil {
			k.log.Warn("journal recovery", "table", table, "err", err)
			return
		}
		n += owned
	}
	dead, err := engine.AbandonDeadLocalOwners(ctx, b)
	if err != nil {
		k.log.Warn("journal recovery", "table", table, "err", err)
		return
	}
	n += dead
	if n > 0 {
		k.log.Info("abandoned pending outputs of dead tasks", "table", table, "tasks", n)
	}
	k.recovered[table] = true
}

// begin returns the context a task execution runs in and its journal id.
func (k *journalKeeper) begin(ctx context.Context, table string, b *store.Bucket, taskKey string) (context.Context, string) {
	if k == nil {
		return ctx, ""
	}
	k.recover(ctx, table, b)
	id := taskKey + "~" + uuid.NewString()[:8]
	return engine.WithTaskJournal(ctx, engine.NewTaskJournal(b, k.owner), id), id
}

// keepAlive refreshes the entry's time every few minutes until the
// returned func is called, so cleanup never takes a long execution for dead
// (engine.DefaultStaleTaskAfter without an update). A refresh racing the
// engine's own record of a new output can drop that key from the entry
// (both load, modify and save): the file then waits for the in-flight
// window instead of going at once; nothing referenced is ever at risk.
func (k *journalKeeper) keepAlive(ctx context.Context, b *store.Bucket, id string) func() {
	if k == nil || id == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(min(10*time.Minute, engine.DefaultStaleTaskAfter/4))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := engine.NewTaskJournal(b, k.owner).RecordPending(ctx, id, nil); err != nil && ctx.Err() == nil {
					k.log.Warn("refresh journal entry", "task_id", id, "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// discard deletes an execution's outputs at once: it failed, so no commit
// can reference them.
func (k *journalKeeper) discard(ctx context.Context, table string, b *store.Bucket, id string) {
	if k == nil || id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := engine.NewTaskJournal(b, k.owner).Discard(ctx, id); err != nil {
		k.log.Warn("discard outputs of failed task", "table", table, "task_id", id, "err", err)
	}
}

// settle updates the journal after one engine commit call. ids maps engine
// task keys to journal ids.
func (k *journalKeeper) settle(ctx context.Context, b *store.Bucket, ids map[string]string, rep *engine.CommitReport, commitErr error) {
	if k == nil {
		return
	}
	var keys []string
	for _, id := range ids {
		if id != "" {
			keys = append(keys, id)
		}
	}
	if len(keys) == 0 {
		return
	}
	var mapped *engine.CommitReport
	if rep != nil {
		mapped = &engine.CommitReport{Version: rep.Version}
		for _, c := range rep.Committed {
			if id := ids[c]; id != "" {
				mapped.Committed = append(mapped.Committed, id)
			}
		}
		for _, d := range rep.Dropped {
			if id := ids[d.Key]; id != "" {
				d.Key = id
				mapped.Dropped = append(mapped.Dropped, d)
			}
		}
	}
	engine.SettleJournal(ctx, engine.NewTaskJournal(b, k.owner), keys, mapped, commitErr)
}

// resultEnvelope is the payload of a maintain result: the engine's result
// and the journal id its files were recorded under.
type resultEnvelope struct {
	Journal string          `json:"journal,omitempty"`
	Result  json.RawMessage `json:"result"`
}

func encodeResult(res engine.Result, journal string) ([]byte, error) {
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resultEnvelope{Journal: journal, Result: raw})
}

// decodeResult reads an envelope, or a bare engine result (older nodes).
func decodeResult(payload []byte) (engine.Result, string, error) {
	var env resultEnvelope
	var er engine.Result
	if err := json.Unmarshal(payload, &env); err == nil && len(env.Result) > 0 {
		err := json.Unmarshal(env.Result, &er)
		return er, env.Journal, err
	}
	err := json.Unmarshal(payload, &er)
	return er, "", err
}

// outputsPresent reports whether every file a result wrote still exists:
// a result whose outputs cleanup reclaimed (its task was taken for dead)
// must not be committed.
func outputsPresent(ctx context.Context, b *store.Bucket, written []string) (bool, error) {
	for _, key := range written {
		if _, err := b.Attributes(ctx, key); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return false, nil
			}
			return false, fmt.Errorf("check output %s: %w", key, err)
		}
	}
	return true, nil
}
