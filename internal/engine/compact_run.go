package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
)

// CompactOptions configure Compact.
type CompactOptions struct {
	// CommitBatchTasks commits after every this many executed tasks of a
	// kind, so a long run makes progress and the committer holds bounded
	// memory (seed 003's micro-commits). 0 means all tasks in one commit.
	CommitBatchTasks int
	Commit           CommitOptions
	Logger           *slog.Logger
	// Journal, if set, records every file a task writes before it is
	// written, and clears the record once the task is committed or its
	// files are deleted; after a crash, cleanup finds the leftovers there.
	Journal *TaskJournal
}

// WithTaskJournal returns the context a task runs in: every output the
// task creates is first recorded in j under the task's key. A nil journal
// returns ctx unchanged.
func WithTaskJournal(ctx context.Context, j *TaskJournal, key string) context.Context {
	if j == nil {
		return ctx
	}
	return withOutputRecorder(ctx, func(ctx context.Context, k string) error {
		return j.RecordPending(ctx, key, []string{k})
	})
}

func (o CompactOptions) journalCtx(ctx context.Context, key string) context.Context {
	return WithTaskJournal(ctx, o.Journal, key)
}

// commitBatch runs one commit call for the tasks keys, settles their
// journal entries, records the report in sum and returns the set of
// committed keys.
func (o CompactOptions) commitBatch(ctx context.Context, sum *Summary, keys []string, commit func() (*CommitReport, error)) (*CommitReport, map[string]bool, error) {
	rep, err := commit()
	o.settle(ctx, keys, rep, err)
	sum.noteReport(rep)
	if err != nil {
		return rep, nil, err
	}
	committed := make(map[string]bool, len(rep.Committed))
	for _, k := range rep.Committed {
		committed[k] = true
	}
	return rep, committed, nil
}

func (o CompactOptions) settle(ctx context.Context, keys []string, rep *CommitReport, commitErr error) {
	SettleJournal(ctx, o.Journal, keys, rep, commitErr)
}

// SettleJournal updates the journal after a commit call for the tasks keys:
// committed tasks are cleared, dropped ones (files already deleted)
// discarded, and on an unknown commit outcome (commitErr != nil) the rest
// are abandoned for cleanup to judge; with no error they are discarded.
func SettleJournal(ctx context.Context, j *TaskJournal, keys []string, rep *CommitReport, commitErr error) {
	if j == nil {
		return
	}
	o := CompactOptions{Journal: j}
	ctx = context.WithoutCancel(ctx)
	done := map[string]bool{}
	if rep != nil {
		for _, k := range rep.Committed {
			done[k] = true
			_ = o.Journal.Clear(ctx, k)
		}
		for _, d := range rep.Dropped {
			done[d.Key] = true
			_ = o.Journal.Discard(ctx, d.Key)
		}
	}
	for _, k := range keys {
		if done[k] {
			continue
		}
		if commitErr != nil {
			_ = o.Journal.Abandon(ctx, k)
		} else {
			_ = o.Journal.Discard(ctx, k)
		}
	}
}

// Summary reports a Compact run; it is the JSON `lanced compact` prints.
type Summary struct {
	Table             string   `json:"table"`
	ReadVersion       uint64   `json:"read_version"`
	VersionsCommitted []uint64 `json:"versions_committed"`
	FragmentsRemoved  int      `json:"fragments_removed"`
	FragmentsAdded    int      `json:"fragments_added"`
	FragmentsRepacked int      `json:"fragments_repacked"`
	FilesRemoved      int      `json:"files_removed"`
	FilesAdded        int      `json:"files_added"`
	FilesCopied       int      `json:"files_page_copied"`
	FilesReencoded    int      `json:"files_reencoded"`
	// Pages counts the pages of page-copied rewrite files by path.
	Pages          lancewrite.PathStats `json:"pages"`
	RowsRewritten  uint64               `json:"rows_rewritten"`
	BytesRead      int64                `json:"bytes_read"`
	BytesWritten   int64                `json:"bytes_written"`
	TasksCommitted int                  `json:"tasks_committed"`
	TasksStale     int                  `json:"tasks_stale"`
	TasksFailed    int                  `json:"tasks_failed"`
	Conflicts      struct {
		Rebased      int `json:"rebased"`
		Retryable    int `json:"retryable"`
		Incompatible int `json:"incompatible"`
	} `json:"conflicts"`
	Dropped  []Dropped `json:"dropped,omitempty"`
	Errors   []string  `json:"errors,omitempty"`
	Duration string    `json:"duration"`
}

// ErrMixedTasks is returned when one fragment is in a rewrite and a repack
// of the same run: the second commit would conflict with the first.
var ErrMixedTasks = errors.New("engine: a fragment is in both a rewrite and a repack")

// CheckDisjoint rejects a set of tasks in which a fragment appears twice.
func CheckDisjoint(tasks []Task) error {
	seen := map[uint64]TaskKind{}
	for _, t := range tasks {
		for _, id := range t.Fragments() {
			if k, dup := seen[id]; dup {
				if k != t.Kind() {
					return fmt.Errorf("%w: fragment %d", ErrMixedTasks, id)
				}
				return fmt.Errorf("%w: fragment %d is in two %s tasks", ErrInvalidTask, id, k)
			}
			seen[id] = t.Kind()
		}
	}
	return nil
}

func (s *Summary) noteReport(r *CommitReport) {
	if r == nil {
		return
	}
	if r.Version != 0 {
		s.VersionsCommitted = append(s.VersionsCommitted, r.Version)
	}
	s.TasksCommitted += len(r.Committed)
	s.Conflicts.Rebased += r.Rebased
	for _, d := range r.Dropped {
		switch d.Verdict {
		case Incompatible:
			s.Conflicts.Incompatible++
		default:
			s.Conflicts.Retryable++
		}
	}
	s.Dropped = append(s.Dropped, r.Dropped...)
}

// Compact executes and commits the tasks planned on m: rewrites first, in
// micro-batches, then repacks, in micro-batches, so a run with both kinds
// makes at least two versions (seed 000). A task whose inputs are gone is
// counted stale and skipped. An ErrInvariant stops the run at once: the
// caller must hold the table.
func Compact(ctx context.Context, tbl *Table, m *format.Manifest, tasks []Task, opts CompactOptions) (*Summary, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Commit.Logger == nil {
		opts.Commit.Logger = log
	}
	sum := &Summary{Table: tbl.URI(), ReadVersion: m.Version()}
	defer func() { sum.Duration = time.Since(start).Round(time.Millisecond).String() }()
	if err := CheckDisjoint(tasks); err != nil {
		return sum, err
	}
	batch := opts.CommitBatchTasks
	if batch <= 0 {
		batch = len(tasks) + 1
	}
	var rewrites []*RewriteTask
	var repacks []*RepackTask
	for _, t := range tasks {
		switch {
		case t.Rewrite != nil:
			rewrites = append(rewrites, t.Rewrite)
		case t.Repack != nil:
			repacks = append(repacks, t.Repack)
		}
	}
	taskErr := func(key string, err error) error {
		switch {
		case errors.Is(err, ErrInvariant):
			return err
		case errors.Is(err, ErrStale):
			sum.TasksStale++
			log.Info("task stale", "table", tbl.URI(), "task_id", key, "err", err)
		default:
			sum.TasksFailed++
			sum.Errors = append(sum.Errors, fmt.Sprintf("%s: %v", key, err))
			log.Warn("task failed", "table", tbl.URI(), "task_id", key, "err", err)
		}
		return nil
	}

	for i := 0; i < len(rewrites); i += batch {
		var outs []*RewriteOutput
		for _, t := range rewrites[i:min(i+batch, len(rewrites))] {
			key := Task{Rewrite: t}.Key()
			t0 := time.Now()
			log.Info("task started", "table", tbl.URI(), "task_id", key, "kind", string(KindRewrite), "read_version", t.ReadVersion, "fragments", t.Fragments)
			out, err := ExecuteRewrite(opts.journalCtx(ctx, key), tbl, m.PB, t)
			if err != nil {
				opts.settle(ctx, []string{key}, nil, nil)
				if ferr := taskErr(key, err); ferr != nil {
					discardRewrites(ctx, tbl, outs)
					return sum, ferr
				}
				continue
			}
			log.Info("task executed", "table", tbl.URI(), "task_id", key, "kind", string(KindRewrite), "rows", out.RowsWritten, "fragments_out", len(out.Group.New), "duration", time.Since(t0).String())
			outs = append(outs, out)
		}
		keys := make([]string, len(outs))
		for j, o := range outs {
			keys[j] = Task{Rewrite: o.Task}.Key()
		}
		rep, committed, err := opts.commitBatch(ctx, sum, keys, func() (*CommitReport, error) {
			return CommitRewrites(ctx, tbl, m.Version(), outs, opts.Commit)
		})
		if err != nil {
			return sum, err
		}
		for j, o := range outs {
			if !committed[keys[j]] {
				continue
			}
			sum.FragmentsRemoved += len(o.Group.Old)
			sum.FragmentsAdded += len(o.Group.New)
			for _, f := range o.Group.Old {
				sum.FilesRemoved += len(f.GetFiles())
				if f.GetDeletionFile() != nil {
					sum.FilesRemoved++
				}
			}
			sum.FilesAdded += len(o.Group.New)
			sum.FilesCopied += o.Copied
			sum.FilesReencoded += o.Reencoded
			sum.Pages.Add(o.Paths)
			sum.RowsRewritten += o.RowsWritten
			sum.BytesRead += o.BytesRead
			sum.BytesWritten += o.BytesWritten
		}
		if rep.Version != 0 {
			log.Info("version committed", "table", tbl.URI(), "version", rep.Version, "kind", string(KindRewrite), "tasks", len(rep.Committed))
		}
	}
	for i := 0; i < len(repacks); i += batch {
		var outs []*RepackOutput
		for _, t := range repacks[i:min(i+batch, len(repacks))] {
			key := Task{Repack: t}.Key()
			t0 := time.Now()
			log.Info("task started", "table", tbl.URI(), "task_id", key, "kind", string(KindRepack), "read_version", t.ReadVersion, "fragments", []uint64{t.Fragment})
			out, err := ExecuteRepack(opts.journalCtx(ctx, key), tbl, m.PB, t)
			if err != nil {
				opts.settle(ctx, []string{key}, nil, nil)
				if ferr := taskErr(key, err); ferr != nil {
					discardRepacks(ctx, tbl, outs)
					return sum, ferr
				}
				continue
			}
			log.Info("task executed", "table", tbl.URI(), "task_id", key, "kind", string(KindRepack), "files_copied", out.Copied, "files_reencoded", out.Reencoded, "duration", time.Since(t0).String())
			outs = append(outs, out)
		}
		keys := make([]string, len(outs))
		for j, o := range outs {
			keys[j] = Task{Repack: o.Task}.Key()
		}
		rep, committed, err := opts.commitBatch(ctx, sum, keys, func() (*CommitReport, error) {
			return CommitRepacks(ctx, tbl, m.Version(), outs, opts.Commit)
		})
		if err != nil {
			return sum, err
		}
		for j, o := range outs {
			if !committed[keys[j]] {
				continue
			}
			sum.FragmentsRepacked++
			before := map[string]bool{}
			for _, f := range o.Result.Base.GetFiles() {
				before[f.GetPath()] = true
			}
			for _, f := range o.Result.Files {
				if before[f.GetPath()] {
					delete(before, f.GetPath())
				} else {
					sum.FilesAdded++
				}
			}
			sum.FilesRemoved += len(before)
			sum.FilesCopied += o.Copied
			sum.FilesReencoded += o.Reencoded
			sum.BytesRead += o.BytesRead
			sum.BytesWritten += o.BytesWritten
		}
		if rep.Version != 0 {
			log.Info("version committed", "table", tbl.URI(), "version", rep.Version, "kind", string(KindRepack), "tasks", len(rep.Committed))
		}
	}
	return sum, nil
}

func discardRewrites(ctx context.Context, tbl *Table, outs []*RewriteOutput) {
	for _, o := range outs {
		o.discard(context.WithoutCancel(ctx), tbl.Bucket())
	}
}

func discardRepacks(ctx context.Context, tbl *Table, outs []*RepackOutput) {
	for _, o := range outs {
		o.discard(context.WithoutCancel(ctx), tbl.Bucket())
	}
}
