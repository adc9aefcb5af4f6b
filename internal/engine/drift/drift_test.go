package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

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
	if err := b.Put(ctx, Key, []byte("{not json")); err != nil {
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
// time, each from its own bucket handle, on a local directory, on S3
// (gofakes3, If-Match as S3 honours it) and on GCS (fake-gcs-server,
// ifGenerationMatch); every count lands once. A record an earlier lanced
// wrote under Key is read and carried on.
func TestConcurrentUpdatesKeepEveryCount(t *testing.T) {
	s3, gcs := storetest.StartS3(t), storetest.StartGCS(t)
	for name, uri := range map[string]string{"file": "file://" + t.TempDir(), "s3": s3.URI("t"), "gcs": gcs.URI("t")} {
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
			if err := b.Put(ctx, Key, []byte(`{"indices":{"vec_idx":{"model":"m1","rows":7,"far":3,"bound":2}}}`)); err != nil {
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
			// One object, replaced in place.
			var keys []string
			if err := b.List(ctx, "_lanced/", func(o store.Object) error { keys = append(keys, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keys, []string{Key}) {
				t.Fatalf("objects under _lanced/: %v, want the record only", keys)
			}
		})
	}
}

// TestEarlierVersionsAreCarriedOver: a table whose record an earlier
// lanced kept as versions under Dir reads the latest version; the first
// update carries it into the record, adds its samples and deletes the
// versions. An index a version updated later than the record (a node of
// the earlier lanced wrote it during an upgrade) is taken from it; one the
// record updated later is kept.
func TestEarlierVersionsAreCarriedOver(t *testing.T) {
	ctx := context.Background()
	b, err := store.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	version := func(seq uint64, f File) {
		t.Helper()
		data, _ := json.Marshal(f)
		if err := b.Put(ctx, versionKey(seq), data); err != nil {
			t.Fatal(err)
		}
	}
	s1 := seg("vec_idx")
	version(1, File{Indices: map[string]Record{"vec_idx": {Model: "m1", Rows: 10, Far: 1, Updated: t0}}})
	version(2, File{Indices: map[string]Record{"vec_idx": {Model: "m1", Rows: 20, Far: 2, Updated: t0.Add(time.Minute)}}})
	version(10, File{Indices: map[string]Record{"vec_idx": {Model: "m1", Rows: 30, Far: 3, Updated: t0.Add(2 * time.Minute)}}})
	if err := b.Put(ctx, Dir+"notes.txt", []byte("not a version")); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(ctx, b); err != nil || f.Indices["vec_idx"].Rows != 30 {
		t.Fatalf("Load before the migration: %+v %v; want the latest version's 30 rows", f.Indices, err)
	}
	if err := Update(ctx, b, 7, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 5, Far: 1}}); err != nil {
		t.Fatal(err)
	}
	f, err := Load(ctx, b)
	if r := f.Indices["vec_idx"]; err != nil || r.Rows != 35 || r.Far != 4 || r.Version != 7 {
		t.Fatalf("after the first update: %+v %v; want 35 rows, 4 far", r, err)
	}
	old, err := versions(ctx, b)
	if err != nil || len(old) != 0 {
		t.Fatalf("versions left after the migration: %v %v", old, err)
	}
	if _, err := b.Get(ctx, Dir+"notes.txt"); err != nil {
		t.Fatalf("a file under %s that is not a version was deleted: %v", Dir, err)
	}
	// A node of the earlier lanced writes a version meanwhile: its newer
	// index is taken, the record's newer one kept.
	now := f.Indices["vec_idx"].Updated
	version(11, File{Indices: map[string]Record{
		"vec_idx":   {Model: "m1", Rows: 1, Updated: now.Add(-time.Hour)},
		"other_idx": {Model: "m9", Rows: 2, Far: 2, Updated: now},
	}})
	if err := Update(ctx, b, 8, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 5}}); err != nil {
		t.Fatal(err)
	}
	f, _ = Load(ctx, b)
	if r, o := f.Indices["vec_idx"], f.Indices["other_idx"]; r.Rows != 40 || o.Rows != 2 || o.Model != "m9" {
		t.Fatalf("after an earlier lanced's version: %+v", f.Indices)
	}
	if old, _ := versions(ctx, b); len(old) != 0 {
		t.Fatalf("versions left: %v", old)
	}
}

// TestLoadIsOneRequest: once the record exists, Load reads it in one
// request: counted on the wire at the S3 emulator (gofakes3), and through
// the store's instrumentation on a local table. Before there is a record
// it also lists the versions an earlier lanced kept (the count shows it).
func TestLoadIsOneRequest(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var wire []string
	s3 := storetest.StartS3WithHandler(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			wire = append(wire, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	for name, uri := range map[string]string{"s3": s3.URI("t"), "file": "file://" + t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			base, err := store.Open(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			b, err := store.Instrument(base, reg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			ops := func() float64 {
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				var n float64
				for _, mf := range mfs {
					if mf.GetName() == "lanced_store_operations_total" {
						for _, m := range mf.GetMetric() {
							n += m.GetCounter().GetValue()
						}
					}
				}
				return n
			}
			// count runs fn and returns the store operations and the
			// requests the emulator saw meanwhile.
			count := func(fn func()) (float64, []string) {
				mu.Lock()
				from := len(wire)
				mu.Unlock()
				before := ops()
				fn()
				mu.Lock()
				defer mu.Unlock()
				return ops() - before, slices.Clone(wire[from:])
			}
			load := func() File {
				f, err := Load(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			n, reqs := count(func() { load() })
			if n < 2 || (name == "s3" && len(reqs) < 2) {
				t.Fatalf("Load without a record: %v operations, requests %v (want the read and the listing of earlier versions)", n, reqs)
			}
			s1 := seg("vec_idx")
			if err := Update(ctx, b, 3, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 100, Far: 4, Bound: 2, Reference: 64}}); err != nil {
				t.Fatal(err)
			}
			var f File
			n, reqs = count(func() { f = load() })
			if r := f.Indices["vec_idx"]; r.Rows != 100 || r.Far != 4 {
				t.Fatalf("Load read %+v", f)
			}
			if n != 1 || (name == "s3" && len(reqs) != 1) {
				t.Fatalf("Load with the record: %v store operations, requests on the wire %v; want one read", n, reqs)
			}
			t.Logf("Load with the record: %v store operation, wire %v", n, reqs)
		})
	}
}
