package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// synthTable writes a small table through the store:
//
//	v1: [a]      v2: [a b] + deletion on a      v3: compaction -> [c]      v4: [c d]
//
// Manifest timestamps follow the file writes, as in a real table.
func synthTable(t *testing.T, b *store.Bucket) {
	t.Helper()
	ctx := context.Background()
	put := func(key string) {
		if err := b.Put(ctx, key, []byte("x:"+key)); err != nil {
			t.Fatal(err)
		}
	}
	del := &tablepb.DeletionFile{FileType: tablepb.DeletionFile_ARROW_ARRAY, ReadVersion: 1, Id: 77, NumDeletedRows: 1}
	type fr struct {
		id   uint64
		file string
		del  *tablepb.DeletionFile
	}
	versions := [][]fr{
		{{0, "a.lance", nil}},
		{{0, "a.lance", del}, {1, "b.lance", nil}},
		{{2, "c.lance", nil}},
		{{2, "c.lance", nil}, {3, "d.lance", nil}},
	}
	written := map[string]bool{}
	for i, frags := range versions {
		v := uint64(i + 1)
		m := &tablepb.Manifest{Version: v, TransactionFile: fmt.Sprintf("%d-t%d.txn", v-1, v), WriterVersion: &tablepb.Manifest_WriterVersion{Library: "lanced-test", Version: "0"}}
		for _, f := range frags {
			if !written[f.file] {
				put("data/" + f.file)
				written[f.file] = true
			}
			df := &tablepb.DataFragment{Id: f.id, PhysicalRows: 10, Files: []*tablepb.DataFile{{Path: f.file, Fields: []int32{0}}}}
			if f.del != nil {
				df.DeletionFile = f.del
				if !written["del"] {
					put(deletionKey(f.id, f.del))
					written["del"] = true
				}
			}
			m.Fragments = append(m.Fragments, df)
		}
		put("_transactions/" + m.TransactionFile)
		time.Sleep(2 * time.Millisecond)
		m.Timestamp = timestamppb.New(time.Now())
		data, err := format.EncodeManifest(m, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.PutIfAbsent(ctx, format.ManifestKey(format.NamingV2, v), data); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// expectedAfterFullCleanup is what remains of synthTable after a cleanup
// that keeps only the latest version.
var expectedAfterFullCleanup = []string{
	"_transactions/3-t4.txn",
	format.ManifestKey(format.NamingV2, 4),
	"data/c.lance",
	"data/d.lance",
}

func keys(t *testing.T, b *store.Bucket) []string {
	t.Helper()
	var out []string
	if err := b.List(context.Background(), "", func(o store.Object) error { out = append(out, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// cleaner with its clock 30 days ahead, so everything written now is old.
func futureCleaner(t *testing.T, reg prometheus.Registerer) *Cleaner {
	t.Helper()
	c, err := NewCleaner(reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	c.SetClock(func() time.Time { return time.Now().Add(30 * 24 * time.Hour) })
	return c
}

func cleanAll() CleanupOptions {
	o := DefaultCleanupOptions()
	o.OlderThan = 0
	return o
}

func TestCleanupOnEveryStore(t *testing.T) {
	s3 := storetest.StartS3(t)
	for name, uri := range map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string { return "file://" + t.TempDir() },
		"mem":  func(t *testing.T) string { return "mem://cleanup-" + t.Name() },
		"s3":   func(t *testing.T) string { return s3.URI("cleanup/" + t.Name()) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b, err := store.Open(ctx, uri(t))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			synthTable(t, b)
			before := keys(t, b)
			reg := prometheus.NewRegistry()
			c := futureCleaner(t, reg)

			plan, _, err := c.Run(ctx, b, cleanAll(), true)
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(t, b); !slices.Equal(got, before) {
				t.Fatalf("dry run changed the table: %v", got)
			}
			if len(plan.Manifests) != 3 || len(plan.Files) != 6 {
				t.Errorf("plan: %d manifests %d files, want 3 and 6: %+v", len(plan.Manifests), len(plan.Files), plan.Files)
			}
			_, res, err := c.Run(ctx, b, cleanAll(), false)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := keys(t, b), sortedCopy(expectedAfterFullCleanup); !slices.Equal(got, want) {
				t.Errorf("after cleanup: %v, want %v", got, want)
			}
			if res.FilesDeleted != 6 || res.ManifestsDeleted != 3 {
				t.Errorf("result %+v", res)
			}
			if n := counterValue(t, reg, "lanced_cleanup_versions_removed_total"); n != 3 {
				t.Errorf("versions removed metric = %v, want 3", n)
			}
			// A second run finds nothing more.
			plan, _, err = c.Run(ctx, b, cleanAll(), false)
			if err != nil || len(plan.Files)+len(plan.Manifests) != 0 {
				t.Errorf("second run: %+v, %v", plan, err)
			}
		})
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func TestCleanupRefusals(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		setup func(b *store.Bucket) error
		opts  CleanupOptions
		want  error
	}{
		"unreadable manifest": {
			setup: func(b *store.Bucket) error {
				return b.Put(ctx, format.ManifestKey(format.NamingV2, 2), []byte("garbage, not a manifest"))
			},
			opts: cleanAll(), want: ErrCleanupManifestUnreadable,
		},
		"truncated manifest": {
			setup: func(b *store.Bucket) error {
				data, err := b.Get(ctx, format.ManifestKey(format.NamingV2, 1))
				if err != nil {
					return err
				}
				return b.Put(ctx, format.ManifestKey(format.NamingV2, 1), data[:len(data)-3])
			},
			opts: cleanAll(), want: ErrCleanupManifestUnreadable,
		},
		"unknown feature flag": {
			setup: func(b *store.Bucket) error {
				key := format.ManifestKey(format.NamingV2, 3)
				data, err := b.Get(ctx, key)
				if err != nil {
					return err
				}
				m, err := format.DecodeManifestFile(key, data)
				if err != nil {
					return err
				}
				m.PB.WriterFeatureFlags |= 1 << 9
				data, err = m.Encode()
				if err != nil {
					return err
				}
				return b.Put(ctx, key, data)
			},
			opts: cleanAll(), want: format.ErrUnsupportedFeature,
		},
		"branches": {
			setup: func(b *store.Bucket) error {
				return b.Put(ctx, "_refs/branches/feature.json", []byte(`{"parentVersion":2}`))
			},
			opts: cleanAll(), want: ErrCleanupBranches,
		},
		"tagged old version with error_if_tagged": {
			setup: func(b *store.Bucket) error {
				return b.Put(ctx, "_refs/tags/gold.json", []byte(`{"branch":null,"version":2,"manifestSize":1}`))
			},
			opts: func() CleanupOptions { o := cleanAll(); o.KeepTagged = false; return o }(), want: ErrCleanupTaggedOld,
		},
		"unreadable tag": {
			setup: func(b *store.Bucket) error { return b.Put(ctx, "_refs/tags/bad.json", []byte(`{`)) },
			opts:  cleanAll(), want: nil, // any error
		},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := store.Open(ctx, "mem://refuse-"+t.Name())
			if err != nil {
				t.Fatal(err)
			}
			synthTable(t, b)
			if err := tc.setup(b); err != nil {
				t.Fatal(err)
			}
			before := keys(t, b)
			_, _, err = futureCleaner(t, nil).Run(ctx, b, tc.opts, false)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			if got := keys(t, b); !slices.Equal(got, before) {
				t.Errorf("refused run deleted files: before %v after %v", before, got)
			}
		})
	}
}

func TestCleanupKeepsTaggedVersions(t *testing.T) {
	ctx := context.Background()
	b, _ := store.Open(ctx, "mem://tagged")
	synthTable(t, b)
	if err := b.Put(ctx, "_refs/tags/gold.json", []byte(`{"version":1}`)); err != nil {
		t.Fatal(err)
	}
	plan, _, err := futureCleaner(t, nil).Run(ctx, b, cleanAll(), false)
	if err != nil {
		t.Fatal(err)
	}
	got := keys(t, b)
	for _, k := range []string{format.ManifestKey(format.NamingV2, 1), "data/a.lance", "_transactions/0-t1.txn"} {
		if !slices.Contains(got, k) {
			t.Errorf("tagged version 1 lost %s", k)
		}
	}
	// b.lance (only in removed v2) was written after v1 was committed, and
	// Lance never deletes files modified after the oldest kept commit.
	if !slices.Contains(got, "data/b.lance") {
		t.Error("data/b.lance, modified after the oldest kept commit, was deleted")
	}
	for _, k := range []string{format.ManifestKey(format.NamingV2, 2), format.ManifestKey(format.NamingV2, 3)} {
		if slices.Contains(got, k) {
			t.Errorf("%s survived", k)
		}
	}
	if plan.TaggedOld["gold"] != 1 {
		t.Errorf("tagged old = %v", plan.TaggedOld)
	}
}

// TestCleanupInterruptedThenResumed stops a cleanup after a few deletes (a
// store failure stands in for a kill): every kept version still has all its
// files, and the next run finishes the job.
func TestCleanupInterruptedThenResumed(t *testing.T) {
	ctx := context.Background()
	for _, stopAfter := range []int{0, 2, 5, 7} {
		t.Run(fmt.Sprint(stopAfter), func(t *testing.T) {
			b, _ := store.Open(ctx, "file://"+t.TempDir())
			synthTable(t, b)
			var n atomic.Int32
			faulty := store.WithFaults(b, func(op, key string) error {
				if op == "delete" && n.Add(1) > int32(stopAfter) {
					return errors.New("killed")
				}
				return nil
			})
			c := futureCleaner(t, nil)
			c.batchSize = 2
			before := len(keys(t, b))
			if _, _, err := c.Run(ctx, faulty, cleanAll(), false); err == nil {
				t.Fatal("interrupted run reported success")
			}
			if deleted := before - len(keys(t, b)); deleted != stopAfter/2*2 {
				t.Errorf("interrupted run deleted %d objects, want the %d of the batches before the failure", deleted, stopAfter/2*2)
			}
			checkVersionsComplete(t, b)
			if _, _, err := c.Run(ctx, b, cleanAll(), false); err != nil {
				t.Fatal(err)
			}
			if got, want := keys(t, b), sortedCopy(expectedAfterFullCleanup); !slices.Equal(got, want) {
				t.Errorf("after the resumed run: %v, want %v", got, want)
			}
		})
	}
}

// checkVersionsComplete asserts the latest version's files all exist.
func checkVersionsComplete(t *testing.T, b *store.Bucket) {
	t.Helper()
	ctx := context.Background()
	key := format.ManifestKey(format.NamingV2, 4)
	data, err := b.Get(ctx, key)
	if err != nil {
		t.Fatalf("latest manifest: %v", err)
	}
	m, err := format.DecodeManifestFile(key, data)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := manifestRefs(key, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Concat(refs.DataFiles, refs.DeletionFiles, []string{refs.Transaction}) {
		if _, err := b.Attributes(ctx, k); err != nil {
			t.Errorf("latest version lost %s: %v", k, err)
		}
	}
}

// TestFailedTaskOutputsGoneInOnePass: outputs of an abandoned task go in
// the next pass with Lance's default 7-day window, not a week later;
// outputs of a live task and committed outputs stay.
func TestFailedTaskOutputsGoneInOnePass(t *testing.T) {
	ctx := context.Background()
	b, _ := store.Open(ctx, "file://"+t.TempDir())
	synthTable(t, b)
	j := journal.NewTaskJournal(b, "node-a")
	failed := []string{"data/failed-1.lance", "data/failed-2.lance", "_deletions/3-4-99.arrow", "_transactions/4-failed.txn"}
	live := []string{"data/live-1.lance"}
	for _, k := range slices.Concat(failed, live) {
		if err := b.Put(ctx, k, []byte("out")); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The failed task also lists a file a manifest references (its commit
	// landed after all) and one outside the cleaned directories.
	must(j.RecordPending(ctx, "task-failed", append(slices.Clone(failed), "data/d.lance", "other/keep.lance")))
	must(j.Abandon(ctx, "task-failed"))
	must(j.RecordPending(ctx, "task/live:1", live))
	must(b.Put(ctx, "other/keep.lance", []byte("k")))

	c, _ := NewCleaner(nil, quiet) // real clock: everything is younger than 7 days
	plan, _, err := c.Run(ctx, b, DefaultCleanupOptions(), false)
	if err != nil {
		t.Fatal(err)
	}
	got := keys(t, b)
	for _, k := range failed {
		if slices.Contains(got, k) {
			t.Errorf("failed task output %s survived the pass", k)
		}
	}
	for _, k := range []string{"data/live-1.lance", "data/d.lance", "other/keep.lance", "data/a.lance", format.ManifestKey(format.NamingV2, 1)} {
		if !slices.Contains(got, k) {
			t.Errorf("%s deleted", k)
		}
	}
	if len(plan.Files) != len(failed) {
		t.Errorf("plan deletes %v, want only the failed outputs", plan.Files)
	}
	if slices.Contains(got, journal.EntryKey("task-failed")) || !slices.Contains(got, journal.EntryKey("task/live:1")) {
		t.Errorf("journal after the pass: %v", got)
	}

	// A task silent for longer than StaleTaskAfter counts as dead.
	c.SetClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
	if _, _, err := c.Run(ctx, b, DefaultCleanupOptions(), false); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, b); slices.Contains(got, "data/live-1.lance") || slices.Contains(got, journal.EntryKey("task/live:1")) {
		t.Errorf("stale task's outputs survived: %v", got)
	}

	// Discard: a task that knows its commit did not land removes its files.
	must(b.Put(ctx, "data/discard.lance", []byte("x")))
	must(j.RecordPending(ctx, "task-d", []string{"data/discard.lance", "_versions/99.manifest"}))
	must(j.Discard(ctx, "task-d"))
	if got := keys(t, b); slices.Contains(got, "data/discard.lance") || slices.Contains(got, journal.EntryKey("task-d")) {
		t.Errorf("Discard left %v", got)
	}

	// AbandonOwned marks this owner's entries only.
	must(j.RecordPending(ctx, "mine", []string{"data/m.lance"}))
	must(journal.NewTaskJournal(b, "node-b").RecordPending(ctx, "theirs", []string{"data/t.lance"}))
	if n, err := j.AbandonOwned(ctx); err != nil || n != 1 {
		t.Errorf("AbandonOwned = %d, %v; want 1", n, err)
	}
	entries, err := journal.ListPending(ctx, b, quiet)
	must(err)
	for _, e := range entries {
		if (e.TaskID == "mine") != e.Abandoned {
			t.Errorf("entry %s abandoned=%v", e.TaskID, e.Abandoned)
		}
	}
}

// TestFileTakenOverByLiveTaskStays: a file listed by a dead task and by a
// live one (a slice's piece its join adopted) is the live task's: cleanup
// leaves it, and so does the dead task's DiscardExcept with it kept.
func TestFileTakenOverByLiveTaskStays(t *testing.T) {
	ctx := context.Background()
	b, _ := store.Open(ctx, "file://"+t.TempDir())
	synthTable(t, b)
	j := journal.NewTaskJournal(b, "node-a")
	for _, k := range []string{"data/piece-0.lance", "data/piece-1.lance", "data/adopted.lance"} {
		if err := b.Put(ctx, k, []byte("piece")); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		j.RecordPending(ctx, "slice/0", []string{"data/piece-0.lance", "data/adopted.lance"}),
		j.Abandon(ctx, "slice/0"),
		j.RecordPending(ctx, "join", []string{"data/adopted.lance"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, _ := NewCleaner(nil, quiet)
	if _, _, err := c.Run(ctx, b, DefaultCleanupOptions(), false); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, b); slices.Contains(got, "data/piece-0.lance") || !slices.Contains(got, "data/adopted.lance") {
		t.Fatalf("after cleanup: %v; want piece-0 gone, adopted kept", got)
	}
	if err := j.RecordPending(ctx, "slice/1", []string{"data/piece-1.lance", "data/adopted.lance"}); err != nil {
		t.Fatal(err)
	}
	if err := j.DiscardExcept(ctx, "slice/1", map[string]bool{"data/adopted.lance": true}); err != nil {
		t.Fatal(err)
	}
	got := keys(t, b)
	if slices.Contains(got, "data/piece-1.lance") || !slices.Contains(got, "data/adopted.lance") || slices.Contains(got, journal.EntryKey("slice/1")) {
		t.Fatalf("after DiscardExcept: %v", got)
	}
}

func TestCleanupDeleteRate(t *testing.T) {
	ctx := context.Background()
	b, _ := store.Open(ctx, "mem://rate")
	for i := range 40 {
		if err := b.Put(ctx, fmt.Sprintf("data/junk-%02d.lance", i), []byte("j")); err != nil {
			t.Fatal(err)
		}
	}
	synthTable(t, b)
	o := cleanAll()
	o.DeleteRate = 40 // burst 40, then 40/s: 49 deletes take at least 9/40 s
	start := time.Now()
	_, res, err := futureCleaner(t, nil).Run(ctx, b, o, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesDeleted+res.ManifestsDeleted != 49 {
		t.Fatalf("deleted %+v, want 49", res)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("49 deletes at 40/s took %v, the limiter did not hold", el)
	}
	if strings.Contains(fmt.Sprint(keys(t, b)), "junk") {
		t.Error("junk survived")
	}
}
