package journal

// The pending-output journal: lanced's record of files a task wrote that no
// manifest references yet.
//
// Where: in the table's own store, under "_lanced/pending/<task id>.json"
// (next to, never inside, Lance's directories; Lance ignores it). Keeping it
// with the table lets any node recover another node's dead task and needs no
// local state to survive a reinstall.
//
// Protocol:
//   - a task calls RecordPending before (or as) it writes each output;
//   - after its commit lands it calls Clear;
//   - when it gives up knowing its commit did not land, it calls Discard,
//     which deletes the files at once and clears the entry;
//   - when its commit's outcome is unknown (a manifest put that timed out), or
//     at daemon start for the entries of its own previous incarnation
//     (AbandonOwned), it calls Abandon.
//
// Cleanup deletes the files of abandoned entries, and of entries not updated
// for StaleTaskAfter, in the same pass, whatever their age, but never a file
// some manifest references (a commit that did land), and never anything
// outside data/, _deletions/, _transactions/, _indices/.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
)

// DefaultStaleTaskAfter is how long an entry may go without an update
// before cleanup treats its task as dead.
const DefaultStaleTaskAfter = time.Hour

// PendingDir holds the journal, relative to the table root.
const PendingDir = "_lanced/pending/"

// PendingEntry is one task's journal entry.
type PendingEntry struct {
	TaskID    string    `json:"task_id"`
	Owner     string    `json:"owner"`
	UpdatedAt time.Time `json:"updated_at"`
	Abandoned bool      `json:"abandoned"`
	// Files are keys relative to the table root.
	Files []string `json:"files"`
}

// TaskJournal writes journal entries for one table on behalf of one owner
// (a stable node name, so a restarted daemon recognizes its own entries).
type TaskJournal struct {
	b     *store.Bucket
	owner string
	now   func() time.Time
}

// NewTaskJournal returns the journal of the table rooted at table.
func NewTaskJournal(table *store.Bucket, owner string) *TaskJournal {
	return &TaskJournal{b: table, owner: owner, now: time.Now}
}

// EntryKey is the store key of a task's journal entry.
func EntryKey(taskID string) string {
	return PendingDir + url.PathEscape(taskID) + ".json"
}

func (j *TaskJournal) load(ctx context.Context, taskID string) (*PendingEntry, error) {
	data, err := j.b.Get(ctx, EntryKey(taskID))
	if err != nil {
		return nil, err
	}
	var e PendingEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("journal entry %s: %w", EntryKey(taskID), err)
	}
	return &e, nil
}

func (j *TaskJournal) save(ctx context.Context, e *PendingEntry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return j.b.Put(ctx, EntryKey(e.TaskID), data)
}

// RecordPending adds files (keys relative to the table root) to the task's
// entry and refreshes its time.
func (j *TaskJournal) RecordPending(ctx context.Context, taskID string, files []string) error {
	e, err := j.load(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		e, err = &PendingEntry{TaskID: taskID}, nil
	}
	if err != nil {
		return fmt.Errorf("journal: record %s: %w", taskID, err)
	}
	for _, f := range files {
		if !slices.Contains(e.Files, f) {
			e.Files = append(e.Files, f)
		}
	}
	e.Owner = j.owner
	e.UpdatedAt = j.now().UTC()
	if err := j.save(ctx, e); err != nil {
		return fmt.Errorf("journal: record %s: %w", taskID, err)
	}
	return nil
}

// Abandon marks the task dead; the next cleanup pass deletes its files that
// no manifest references.
func (j *TaskJournal) Abandon(ctx context.Context, taskID string) error {
	e, err := j.load(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: abandon %s: %w", taskID, err)
	}
	e.Abandoned = true
	e.UpdatedAt = j.now().UTC()
	if err := j.save(ctx, e); err != nil {
		return fmt.Errorf("journal: abandon %s: %w", taskID, err)
	}
	return nil
}

// Discard deletes the task's files now and clears its entry. Call it only
// when the task's commit certainly did not land; otherwise Abandon.
func (j *TaskJournal) Discard(ctx context.Context, taskID string) error {
	return j.DiscardExcept(ctx, taskID, nil)
}

// DiscardExcept is Discard but for the files in keep: another task took
// them over (a join adopting a slice's piece) and recorded them in its own
// entry first; they are left in place.
func (j *TaskJournal) DiscardExcept(ctx context.Context, taskID string, keep map[string]bool) error {
	e, err := j.load(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: discard %s: %w", taskID, err)
	}
	for _, f := range e.Files {
		if !format.InTableDirs(f) || strings.HasPrefix(f, "_versions/") || keep[f] {
			continue
		}
		if err := j.b.Delete(ctx, f); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("journal: discard %s: %w", taskID, err)
		}
	}
	return j.Clear(ctx, taskID)
}

// Clear removes the task's entry (its commit landed, or its files are gone).
func (j *TaskJournal) Clear(ctx context.Context, taskID string) error {
	if err := j.b.Delete(ctx, EntryKey(taskID)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("journal: clear %s: %w", taskID, err)
	}
	return nil
}

// AbandonOwned marks every entry of this journal's owner abandoned: called
// at start-up, when no task of this owner can still be running.
func (j *TaskJournal) AbandonOwned(ctx context.Context) (int, error) {
	entries, err := ListPending(ctx, j.b, slog.Default())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if e.Owner != j.owner || e.Abandoned {
			continue
		}
		if err := j.Abandon(ctx, e.TaskID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ListPending reads every journal entry. A corrupt entry is logged and
// skipped: its files then wait for the ordinary in-flight window.
func ListPending(ctx context.Context, b *store.Bucket, log *slog.Logger) ([]*PendingEntry, error) {
	var keys []string
	err := b.ListDir(ctx, PendingDir, func(o store.Object) error {
		if !o.IsDir && strings.HasSuffix(o.Key, ".json") {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal: list: %w", err)
	}
	var out []*PendingEntry
	for _, k := range keys {
		data, err := b.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("journal: read %s: %w", k, err)
		}
		var e PendingEntry
		if err := json.Unmarshal(data, &e); err != nil || e.TaskID == "" {
			log.Warn("skipping unreadable journal entry", "table", b.URI(), "key", k, "err", err)
			continue
		}
		out = append(out, &e)
	}
	return out, nil
}
