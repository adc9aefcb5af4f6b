package cleanup

import (
	"context"
	"errors"
	"fmt"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

const tempSuffix = store.TempSuffix

// Cleaner runs cleanups: Plan reads every manifest and lists the table,
// Execute deletes (files first, manifests last), rate-limited and batched.
// It is safe for concurrent use on different tables.
type Cleaner struct {
	log         *slog.Logger
	now         func() time.Time
	concurrency int
	batchSize   int
	m           *cleanupMetrics
}

type cleanupMetrics struct {
	files    *prometheus.CounterVec
	bytes    prometheus.Counter
	versions prometheus.Counter
	runs     *prometheus.CounterVec
}

// NewCleaner returns a Cleaner logging to log (nil: slog.Default()) with
// metrics registered on reg (nil: none):
// lanced_cleanup_files_removed_total{kind}, lanced_cleanup_bytes_removed_total,
// lanced_cleanup_versions_removed_total, lanced_cleanup_runs_total{outcome}.
func NewCleaner(reg prometheus.Registerer, log *slog.Logger) (*Cleaner, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Cleaner{log: log, now: time.Now, concurrency: 8, batchSize: deleteBatch}
	if reg != nil {
		m := &cleanupMetrics{
			files: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "lanced_cleanup_files_removed_total", Help: "Files deleted by cleanup, by kind.",
			}, []string{"kind"}),
			bytes: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "lanced_cleanup_bytes_removed_total", Help: "Bytes deleted by cleanup.",
			}),
			versions: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "lanced_cleanup_versions_removed_total", Help: "Manifests (versions) deleted by cleanup.",
			}),
			runs: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "lanced_cleanup_runs_total", Help: "Cleanup runs, by outcome.",
			}, []string{"outcome"}),
		}
		// Every series is exported from the start, at 0.
		for _, k := range []string{KindManifest, KindData, KindDeletion, KindTransaction, KindIndex, KindTemp} {
			m.files.WithLabelValues(k)
		}
		for _, o := range []string{"ok", "failed", "refused"} {
			m.runs.WithLabelValues(o)
		}
		for _, col := range []prometheus.Collector{m.files, m.bytes, m.versions, m.runs} {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("register cleanup metrics: %w", err)
			}
		}
		c.m = m
	}
	return c, nil
}

// SetClock replaces the clock (tests).
func (c *Cleaner) SetClock(now func() time.Time) { c.now = now }

// Plan decides what a cleanup of the table rooted at b deletes. It reads
// every manifest; any read or decode error aborts with
// ErrCleanupManifestUnreadable (nothing may be judged unreferenced on the
// word of a manifest we could not read). Tables with branches or base paths
// are refused.
func (c *Cleaner) Plan(ctx context.Context, b *store.Bucket, opts CleanupOptions) (*CleanupPlan, error) {
	if opts.StaleTaskAfter <= 0 {
		opts.StaleTaskAfter = journal.DefaultStaleTaskAfter
	}
	now := c.now()
	for _, dir := range []string{"_refs/branches/", "tree/"} {
		found := false
		err := b.ListDir(ctx, dir, func(store.Object) error { found = true; return errStopList })
		if err != nil && !errors.Is(err, errStopList) {
			return nil, fmt.Errorf("cleanup %s: list %s: %w", b.URI(), dir, err)
		}
		if found {
			return nil, fmt.Errorf("cleanup %s: %s is not empty: %w", b.URI(), dir, ErrCleanupBranches)
		}
	}
	tbl := table.At(b)
	tags, err := tagVersions(ctx, tbl)
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	type listed struct {
		key     string
		size    int64
		version uint64
	}
	vis, err := tbl.Versions(ctx)
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	if len(vis) == 0 {
		return nil, fmt.Errorf("cleanup %s: %w", b.URI(), ErrCleanupNoVersions)
	}
	manifests := make([]listed, len(vis))
	for i, vi := range vis {
		manifests[i] = listed{key: vi.Key, size: vi.Size, version: vi.Version}
	}
	versions := make([]uint64, len(manifests))
	for i, m := range manifests {
		versions[i] = m.version
	}
	p := newPlanner(opts, now, versions, tags)

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.concurrency)
	for _, lm := range manifests {
		g.Go(func() error {
			data, err := b.Get(gctx, lm.key)
			if err != nil {
				return fmt.Errorf("cleanup %s: read manifest %s: %w: %w", b.URI(), lm.key, ErrCleanupManifestUnreadable, err)
			}
			m, err := format.DecodeManifestFile(lm.key, data)
			if err != nil {
				return fmt.Errorf("cleanup %s: %w: %w", b.URI(), ErrCleanupManifestUnreadable, err)
			}
			// A feature we do not know may reference files we do not track.
			if err := format.CheckWritable(m.PB); err != nil {
				return fmt.Errorf("cleanup %s: refusing to clean: %w", b.URI(), err)
			}
			refs, err := manifestRefs(lm.key, int64(len(data)), m)
			if err != nil {
				return fmt.Errorf("cleanup %s: %w", b.URI(), err)
			}
			mu.Lock()
			p.addManifest(refs)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if len(p.plan.TaggedOld) > 0 && !opts.KeepTagged {
		return nil, fmt.Errorf("cleanup %s: %w: %v (delete the tags or keep tagged versions)", b.URI(), ErrCleanupTaggedOld, p.plan.TaggedOld)
	}

	// Our own dead tasks' outputs.
	entries, err := journal.ListPending(ctx, b, c.log)
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	live := map[string]bool{} // files of entries whose task may still be running
	for _, e := range entries {
		if !e.Abandoned && now.Sub(e.UpdatedAt) < opts.StaleTaskAfter {
			for _, f := range e.Files {
				live[f] = true
			}
		}
	}
	for _, e := range entries {
		if !e.Abandoned && now.Sub(e.UpdatedAt) < opts.StaleTaskAfter {
			continue // the task may still be running
		}
		for _, f := range e.Files {
			// A file in a live entry too (a slice's piece a join adopted)
			// is that task's.
			if format.InTableDirs(f) && !strings.HasPrefix(f, "_versions/") && !live[f] {
				p.pending[f] = e.TaskID
			}
		}
		p.plan.PendingTasks = append(p.plan.PendingTasks, e.TaskID)
	}

	for _, dir := range format.TableDirs {
		err := b.List(ctx, dir, func(o store.Object) error {
			p.addFile(ListedFile{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cleanup %s: list %s: %w", b.URI(), dir, err)
		}
	}
	return p.finish(), nil
}

var errStopList = errors.New("stop listing")

// manifestRefs extracts what cleanup tracks from one manifest.
func manifestRefs(key string, size int64, m *format.Manifest) (*ManifestRefs, error) {
	pb := m.PB
	if len(pb.GetBasePaths()) > 0 {
		return nil, fmt.Errorf("manifest %s: %w", key, ErrCleanupBasePaths)
	}
	r := &ManifestRefs{Version: pb.GetVersion(), Key: key, Size: size, Timestamp: pb.GetTimestamp().AsTime()}
	for _, f := range pb.GetFragments() {
		for _, df := range f.GetFiles() {
			if df.BaseId != nil {
				return nil, fmt.Errorf("manifest %s: fragment %d data file %s: %w", key, f.GetId(), df.GetPath(), ErrCleanupBasePaths)
			}
			r.DataFiles = append(r.DataFiles, format.DataFileKey(df.GetPath()))
		}
		if del := f.GetDeletionFile(); del != nil {
			if del.BaseId != nil {
				return nil, fmt.Errorf("manifest %s: fragment %d deletion file: %w", key, f.GetId(), ErrCleanupBasePaths)
			}
			r.DeletionFiles = append(r.DeletionFiles, deletionKey(f.GetId(), del))
		}
	}
	if tf := pb.GetTransactionFile(); tf != "" {
		r.Transaction = "_transactions/" + tf
	}
	if m.Indices != nil {
		for _, idx := range m.Indices.GetIndices() {
			if idx.BaseId != nil {
				return nil, fmt.Errorf("manifest %s: index %s: %w", key, idx.GetName(), ErrCleanupBasePaths)
			}
			u, err := uuid.FromBytes(idx.GetUuid().GetUuid())
			if err != nil {
				return nil, fmt.Errorf("manifest %s: index %q uuid: %w: %w", key, idx.GetName(), ErrCleanupManifestUnreadable, err)
			}
			r.IndexUUIDs = append(r.IndexUUIDs, u.String())
		}
	}
	return r, nil
}

// deletionKey is Lance's deletion file path relative to the table root:
// _deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}.
func deletionKey(fragID uint64, d *tablepb.DeletionFile) string {
	ext := "arrow"
	if d.GetFileType() == tablepb.DeletionFile_BITMAP {
		ext = "bin"
	}
	return fmt.Sprintf("_deletions/%d-%d-%d.%s", fragID, d.GetReadVersion(), d.GetId(), ext)
}

// tagVersions reads the table's tags (engine/table): tag name -> version.
// A tag without a version is an error: cleanup must not guess what it
// protects.
func tagVersions(ctx context.Context, tbl *table.Table) (map[string]uint64, error) {
	tags, err := tbl.Tags(ctx)
	if err != nil {
		return nil, fmt.Errorf("read tags: %w", err)
	}
	out := make(map[string]uint64, len(tags))
	for name, t := range tags {
		if t.Version == 0 {
			return nil, fmt.Errorf("read tag %s: not a tag file (want {\"version\": N})", name)
		}
		out[name] = t.Version
	}
	return out, nil
}

// CleanupResult counts what Execute did.
type CleanupResult struct {
	FilesDeleted     int   `json:"files_deleted"`
	ManifestsDeleted int   `json:"manifests_deleted"`
	BytesRemoved     int64 `json:"bytes_removed"`
}

const deleteBatch = 64

// Execute deletes what plan lists: files first, then journal entries of the
// dead tasks whose outputs went, then manifests oldest first. Deletes go in
// batches of up to 64 keys (one DeleteObjects request on S3, parallel
// deletes elsewhere), at most opts.DeleteRate keys per second. An object
// already gone counts as deleted. On error it stops: what is deleted
// stays deleted, every kept version stays readable, and the next run
// finishes the job.
func (c *Cleaner) Execute(ctx context.Context, b *store.Bucket, plan *CleanupPlan, opts CleanupOptions) (CleanupResult, error) {
	start := time.Now()
	var res CleanupResult
	var lim *rate.Limiter
	if opts.DeleteRate > 0 {
		lim = rate.NewLimiter(rate.Limit(opts.DeleteRate), max(1, int(opts.DeleteRate)))
	}
	total := len(plan.Files) + len(plan.Manifests)
	var totalBytes int64
	for _, ds := range [][]FileDecision{plan.Files, plan.Manifests} {
		for _, d := range ds {
			totalBytes += d.Size
		}
	}
	progress.Expect(ctx, int64(total), totalBytes)
	done := 0
	size := c.batchSize
	if lim != nil {
		size = min(size, max(1, int(opts.DeleteRate))) // about one batch per second
	}
	run := func(items []FileDecision, manifests bool) error {
		for i := 0; i < len(items); i += size {
			batch := items[i:min(i+size, len(items))]
			keys := make([]string, len(batch))
			for j, d := range batch {
				if lim != nil {
					if err := lim.Wait(ctx); err != nil {
						return err
					}
				}
				keys[j] = d.Key
			}
			// One DeleteObjects request on S3; missing keys count as deleted
			// (a concurrent Lance cleanup may have been first).
			if err := b.DeleteMany(ctx, keys); err != nil {
				return err
			}
			var batchBytes int64
			for _, d := range batch {
				batchBytes += d.Size
				res.BytesRemoved += d.Size
				if manifests {
					res.ManifestsDeleted++
				} else {
					res.FilesDeleted++
				}
				if c.m != nil {
					c.m.files.WithLabelValues(d.Kind).Inc()
					c.m.bytes.Add(float64(d.Size))
					if manifests {
						c.m.versions.Inc()
					}
				}
			}
			done += len(batch)
			progress.Add(ctx, int64(len(batch)), batchBytes)
			c.log.Info("cleanup progress", "table", b.URI(), "deleted", done, "total", total)
		}
		return nil
	}
	err := run(plan.Files, false)
	if err == nil && len(plan.PendingTasks) > 0 {
		j := journal.NewTaskJournal(b, "")
		for _, id := range plan.PendingTasks {
			if err = j.Clear(ctx, id); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = run(plan.Manifests, true)
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
		c.log.Error("cleanup failed", "table", b.URI(), "err", err, "duration", time.Since(start))
	} else {
		c.log.Info("cleanup done", "table", b.URI(), "version", plan.Latest, "files", res.FilesDeleted,
			"manifests", res.ManifestsDeleted, "bytes", res.BytesRemoved, "duration", time.Since(start))
	}
	if c.m != nil {
		c.m.runs.WithLabelValues(outcome).Inc()
	}
	if err != nil {
		return res, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	return res, nil
}

// Run plans and, unless dryRun, executes a cleanup.
func (c *Cleaner) Run(ctx context.Context, b *store.Bucket, opts CleanupOptions, dryRun bool) (*CleanupPlan, CleanupResult, error) {
	plan, err := c.Plan(ctx, b, opts)
	if err != nil {
		if c.m != nil {
			c.m.runs.WithLabelValues("refused").Inc()
		}
		return nil, CleanupResult{}, err
	}
	if dryRun {
		return plan, CleanupResult{}, nil
	}
	res, err := c.Execute(ctx, b, plan, opts)
	return plan, res, err
}

// TableCleanupOptions returns the cleanup settings a table asks for: Lance's
// defaults overridden by the latest manifest's lance.auto_cleanup.* config.
func TableCleanupOptions(ctx context.Context, b *store.Bucket) (CleanupOptions, error) {
	m, err := table.At(b).Latest(ctx)
	if errors.Is(err, table.ErrNoTable) {
		return CleanupOptions{}, fmt.Errorf("cleanup %s: %w", b.URI(), ErrCleanupNoVersions)
	}
	if err != nil {
		return CleanupOptions{}, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	o, err := CleanupOptionsFromConfig(m.PB.GetConfig())
	if err != nil {
		return o, fmt.Errorf("cleanup %s: %w", b.URI(), err)
	}
	return o, nil
}
