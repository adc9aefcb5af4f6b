package drift

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
)

func seg(name string) *tablepb.IndexMetadata {
	u := uuid.New()
	return &tablepb.IndexMetadata{Name: name, Uuid: &tablepb.UUID{Uuid: u[:]}}
}

// TestUpdateAccumulates: counts of one model add up over catch-ups,
// another model starts them again, and a record applies only while one of
// its segments is in the table.
func TestUpdateAccumulates(t *testing.T) {
	ctx := context.Background()
	b, err := store.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if f, err := Load(ctx, b); err != nil || len(f.Indices) != 0 {
		t.Fatalf("no record: %+v %v", f, err)
	}
	s1, s2 := seg("vec_idx"), seg("vec_idx")
	if err := Update(ctx, b, 3, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 100, Far: 10, Bound: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := Update(ctx, b, 4, []*tablepb.IndexMetadata{s1, s2}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 300, Far: 90, Bound: 2}}); err != nil {
		t.Fatal(err)
	}
	f, err := Load(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	r := Current(f, []*tablepb.IndexMetadata{s2})["vec_idx"]
	if r.Rows != 400 || r.Far != 100 || r.Ratio() != 0.25 || r.Version != 4 {
		t.Fatalf("accumulated: %+v", r)
	}
	if got := Current(f, []*tablepb.IndexMetadata{seg("vec_idx")}); len(got) != 0 {
		t.Fatalf("a record applies to a rebuilt index: %+v", got)
	}
	if err := Update(ctx, b, 5, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m2", Rows: 50, Far: 1, Bound: 3}}); err != nil {
		t.Fatal(err)
	}
	f, _ = Load(ctx, b)
	if r := f.Indices["vec_idx"]; r.Rows != 50 || r.Far != 1 || r.Model != "m2" {
		t.Fatalf("another model did not start again: %+v", r)
	}
	if err := b.Put(ctx, versionKey(99), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(ctx, b); err != nil || len(f.Indices) != 0 {
		t.Fatalf("damaged record: %+v %v", f, err)
	}
	// The next update supersedes a damaged record.
	if err := Update(ctx, b, 6, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m2", Rows: 5, Far: 1, Bound: 3}}); err != nil {
		t.Fatal(err)
	}
	if f, _ := Load(ctx, b); f.Indices["vec_idx"].Rows != 5 {
		t.Fatalf("after a damaged record: %+v", f)
	}
}

// TestConcurrentUpdatesKeepEveryCount: writers (as daemon nodes
// committing catch-ups of the same index) update the record at the same
// time, each from its own bucket handle, on a local directory and on S3
// (gofakes3, create-if-absent as S3 honours it); every count lands once.
// An older lanced's record under LegacyKey is read and carried over.
func TestConcurrentUpdatesKeepEveryCount(t *testing.T) {
	s3 := storetest.StartS3(t)
	for name, uri := range map[string]string{"file": "file://" + t.TempDir(), "s3": s3.URI("t")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			open := func() *store.Bucket {
				b, err := store.Open(ctx, uri)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			}
			b := open()
			s1 := seg("vec_idx")
			if err := b.Put(ctx, LegacyKey, []byte(`{"indices":{"vec_idx":{"model":"m1","rows":7,"far":3,"bound":2}}}`)); err != nil {
				t.Fatal(err)
			}
			const writers, updates = 4, 10
			var wg sync.WaitGroup
			errs := make(chan error, writers*updates)
			for w := range writers {
				wb := open()
				wg.Go(func() {
					for i := range updates {
						err := Update(ctx, wb, uint64(i), []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 100, Far: uint64(w + 1), Bound: 2, Reference: 512}})
						if err != nil {
							errs <- fmt.Errorf("writer %d update %d: %w", w, i, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			f, err := Load(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			r := f.Indices["vec_idx"]
			if want := uint64(7 + writers*updates*100); r.Rows != want || r.Far != 3+updates*(1+2+3+4) || r.Reference != 512 {
				t.Fatalf("after %d concurrent updates: rows %d (want %d), far %d (want %d), reference %d", writers*updates, r.Rows, want, r.Far, 3+updates*10, r.Reference)
			}
			// Every update wrote one version; none is old enough to go.
			seqs, err := sequences(ctx, b)
			if err != nil || len(seqs) != writers*updates || seqs[len(seqs)-1] != writers*updates {
				t.Fatalf("versions left %v (%v)", seqs, err)
			}
			if _, err := b.Get(ctx, LegacyKey); err == nil {
				t.Fatalf("legacy record left after the first versioned update")
			}
		})
	}
}

// TestPruneKeepsRecentVersions: versions are deleted only when
// keepVersions newer ones exist and they are older than keepAge; the
// record stays the latest version's.
func TestPruneKeepsRecentVersions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := store.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s1 := seg("vec_idx")
	update := func() {
		if err := Update(ctx, b, 1, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	for range keepVersions + 5 {
		update()
	}
	if seqs, _ := sequences(ctx, b); len(seqs) != keepVersions+5 {
		t.Fatalf("recent versions deleted: %d left", len(seqs))
	}
	old := time.Now().Add(-2 * keepAge)
	for n := uint64(1); n <= keepVersions+5; n++ {
		if err := os.Chtimes(filepath.Join(dir, versionKey(n)), old, old); err != nil {
			t.Fatal(err)
		}
	}
	update() // version keepVersions+6: versions 1..6 go
	seqs, _ := sequences(ctx, b)
	if len(seqs) != keepVersions || seqs[0] != 7 {
		t.Fatalf("after pruning: %d versions from %v", len(seqs), seqs[:1])
	}
	if f, _ := Load(ctx, b); f.Indices["vec_idx"].Rows != keepVersions+6 {
		t.Fatalf("record %+v", f.Indices["vec_idx"])
	}
}
