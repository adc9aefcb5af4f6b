package journal

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/lanced-dev/lanced/internal/store"
)

// Keeper is one process's use of the pending-output journal, shared by
// `lanced compact` and the daemon.
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
// (AbandonDeadLocalOwners) and, when the node id is configured (so
// stable across restarts), the entries this node's previous incarnation
// left (AbandonOwned). The next cleanup pass deletes their unreferenced
// files. A result of such a task that is still queued for commit is caught
// by the commit's existence check and replanned.
type Keeper struct {
	owner  string
	stable bool
	log    *slog.Logger

	mu        sync.Mutex
	recovered map[string]bool
}

// NewKeeper returns the journal keeper of this process: owner is the
// configured node id (stable) or, without one, LocalOwner(prefix)'s
// "<prefix>@host/pid", which later processes on this host recognise as
// dead.
func NewKeeper(prefix, configuredNodeID string, log *slog.Logger) *Keeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{owner: LocalOwner(prefix), log: log, recovered: map[string]bool{}}
	if configuredNodeID != "" {
		k.owner, k.stable = configuredNodeID, true
	}
	return k
}

// Recover runs the start-up recovery for the table once per process
// (again after a failure).
func (k *Keeper) Recover(ctx context.Context, table string, b *store.Bucket) {
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
		owned, err := NewTaskJournal(b, k.owner).AbandonOwned(ctx)
		if err != nil {
			k.log.Warn("journal recovery", "table", table, "err", err)
			return
		}
		n += owned
	}
	dead, err := AbandonDeadLocalOwners(ctx, b)
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

// Begin returns the context a task execution runs in and its journal id.
func (k *Keeper) Begin(ctx context.Context, table string, b *store.Bucket, taskKey string) (context.Context, string) {
	if k == nil {
		return ctx, ""
	}
	k.Recover(ctx, table, b)
	id := taskKey + "~" + uuid.NewString()[:8]
	return WithTaskJournal(ctx, NewTaskJournal(b, k.owner), id), id
}

// KeepAlive refreshes the entry's time every few minutes until the
// returned func is called, so cleanup never takes a long execution for dead
// (DefaultStaleTaskAfter without an update). A refresh racing the
// engine's own record of a new output can drop that key from the entry
// (both load, modify and save): the file then waits for the in-flight
// window instead of going at once; nothing referenced is ever at risk.
func (k *Keeper) KeepAlive(ctx context.Context, b *store.Bucket, id string) func() {
	if k == nil || id == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(min(10*time.Minute, DefaultStaleTaskAfter/4))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := NewTaskJournal(b, k.owner).RecordPending(ctx, id, nil); err != nil && ctx.Err() == nil {
					k.log.Warn("refresh journal entry", "task_id", id, "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Discard deletes an execution's outputs at once: it failed, so no commit
// can reference them.
func (k *Keeper) Discard(ctx context.Context, table string, b *store.Bucket, id string) {
	k.DiscardExcept(ctx, table, b, id, nil)
}

// DiscardExcept is Discard but leaves the files in keep, which another
// execution took over (TaskJournal.DiscardExcept).
func (k *Keeper) DiscardExcept(ctx context.Context, table string, b *store.Bucket, id string, keep map[string]bool) {
	if k == nil || id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := NewTaskJournal(b, k.owner).DiscardExcept(ctx, id, keep); err != nil {
		k.log.Warn("discard outputs of failed task", "table", table, "task_id", id, "err", err)
	}
}

// Settle updates the journal after one commit call. ids maps task keys to
// journal ids; committed and dropped are task keys. Committed entries are
// cleared; dropped ones (their files are already deleted) discarded; on an
// unknown commit outcome (commitErr != nil) the rest are abandoned for
// cleanup to judge, otherwise they certainly did not commit and are
// discarded.
func (k *Keeper) Settle(ctx context.Context, b *store.Bucket, ids map[string]string, committed, dropped []string, commitErr error) {
	if k == nil {
		return
	}
	j := NewTaskJournal(b, k.owner)
	ctx = context.WithoutCancel(ctx)
	// An entry left behind is harmless (cleanup takes it for in flight
	// until it is stale, then deletes only unreferenced files), but it is
	// logged so that it is not silent.
	report := func(what, id string, err error) {
		if err != nil {
			k.log.Warn("settle journal entry", "action", what, "task_id", id, "err", err)
		}
	}
	done := map[string]bool{}
	for _, key := range committed {
		if id := ids[key]; id != "" && !done[id] {
			done[id] = true
			report("clear", id, j.Clear(ctx, id))
		}
	}
	for _, key := range dropped {
		if id := ids[key]; id != "" && !done[id] {
			done[id] = true
			report("discard", id, j.Discard(ctx, id))
		}
	}
	for _, id := range ids {
		if id == "" || done[id] {
			continue
		}
		done[id] = true
		if commitErr != nil {
			report("abandon", id, j.Abandon(ctx, id))
		} else {
			report("discard", id, j.Discard(ctx, id))
		}
	}
}
