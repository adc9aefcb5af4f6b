package table

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestCommitRaceWithRealLance: lanced committers and a real-Lance writer
// race for the same versions of one table. Afterwards no version was
// written twice (every version holds exactly one transaction, each uuid
// once), every commit lanced acknowledged is at the version it was
// acknowledged for, every append real Lance acknowledged is counted, and
// real Lance reads the final version with all of lanced's config keys.
func TestCommitRaceWithRealLance(t *testing.T) {
	oracle.Require(t)
	s3 := storetest.StartS3(t)
	for _, onS3 := range []bool{false, true} {
		name := "file"
		if onS3 {
			name = "s3"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var lanceURI, ourURI string
			var opts []oracle.Options
			if onS3 {
				opts = []oracle.Options{{StorageOptions: s3.LanceStorageOptions()}}
				lanceURI = oracle.Build(t, "appends", s3.LanceURI("race"), opts...)
				ourURI = s3.URI("race/appends.lance")
			} else {
				lanceURI = oracle.Build(t, "appends", t.TempDir())
				ourURI = "file://" + lanceURI
			}
			b, err := store.Open(ctx, ourURI)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			tbl, err := OpenTable(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			start := oracle.Inspect(t, lanceURI, 0, opts...)

			const lanceAdds = 6
			acked := raceLanceWriter(t, ctx, tbl, lanceURI, lanceAdds, opts)
			want := checkRaceHistory(t, ctx, tbl, start.LatestVersion, acked, lanceAdds)
			t.Logf("%d lanced commits raced %d real-Lance appends up to version %d", len(acked), lanceAdds, want)
			final := oracle.Inspect(t, lanceURI, 0, opts...)
			if final.LatestVersion != uint64(want) || final.Rows != start.Rows+10*lanceAdds {
				t.Fatalf("real Lance: latest %d rows %d, want %d and %d", final.LatestVersion, final.Rows, want, start.Rows+10*lanceAdds)
			}
			latest, err := tbl.Latest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(latest.PB.GetConfig()) != len(acked) {
				t.Fatalf("latest config has %d keys, want %d: %v", len(latest.PB.GetConfig()), len(acked), latest.PB.GetConfig())
			}
			if st := format.ComputeLayoutStats(latest.PB); int64(st.Totals.Rows) != final.Rows {
				t.Fatalf("stats rows %d, Lance %d", st.Totals.Rows, final.Rows)
			}
		})
	}
}

// raceLanceWriter runs lanced committers (SetConfig, one key each) until a
// real-Lance writer has made lanceAdds appends (so the two really
// interleave), at most maxEach per worker, and returns the versions lanced
// acknowledged with their transaction uuids; no version was acknowledged
// twice and real Lance acknowledged every append.
func raceLanceWriter(t *testing.T, ctx context.Context, tbl *Table, lanceURI string, lanceAdds int, opts []oracle.Options) map[uint64]string {
	const workers, maxEach = 3, 150
	lanceDone := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[uint64]string{}
	errs := make(chan error, workers+1)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < maxEach; i++ {
				select {
				case <-lanceDone:
					return
				case <-time.After(10 * time.Millisecond):
				}
				m, err := tbl.SetConfig(ctx, map[string]string{fmt.Sprintf("race.%d.%d", w, i): "1"}, nil)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if prev, dup := acked[m.Version()]; dup {
					errs <- fmt.Errorf("version %d acknowledged to %s and %s", m.Version(), prev, m.Txn.GetUuid())
				}
				acked[m.Version()] = m.Txn.GetUuid()
				mu.Unlock()
			}
		}()
	}
	var lanceRes []json.RawMessage
	wg.Add(1)
	go func() {
		defer wg.Done()
		ops := make([]oracle.Op, lanceAdds)
		for i := range ops {
			ops[i] = oracle.Op{"op": "add", "rows": 10, "seed": i}
		}
		defer close(lanceDone)
		var err error
		lanceRes, err = oracle.TryOps(t, lanceURI, ops, opts...)
		if err != nil {
			errs <- fmt.Errorf("real Lance writer: %w", err)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(lanceRes) != lanceAdds {
		t.Fatalf("real Lance acknowledged %d of %d appends", len(lanceRes), lanceAdds)
	}

	return acked
}

// checkRaceHistory checks the versions after the race: one per
// acknowledged commit and append, every transaction uuid once, each
// acknowledged version holding its transaction, every append visible and
// at least one between lanced's commits. It returns the latest version.
func checkRaceHistory(t *testing.T, ctx context.Context, tbl *Table, startVersion uint64, acked map[uint64]string, lanceAdds int) int {
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := int(startVersion) + len(acked) + lanceAdds
	if len(vs) != want || vs[len(vs)-1].Version != uint64(want) {
		t.Fatalf("%d versions (last %d), want 1..%d", len(vs), vs[len(vs)-1].Version, want)
	}
	uuids := map[string]uint64{}
	appends, interleaved := 0, false
	var lastAck uint64
	for v := range acked {
		lastAck = max(lastAck, v)
	}
	for _, vi := range vs {
		m, err := tbl.Load(ctx, vi.Version)
		if err != nil {
			t.Fatal(err)
		}
		txn, err := tbl.LoadTransaction(ctx, m)
		if err != nil {
			t.Fatalf("version %d: %v", vi.Version, err)
		}
		if prev, dup := uuids[txn.GetUuid()]; dup {
			t.Fatalf("transaction %s committed at both %d and %d", txn.GetUuid(), prev, vi.Version)
		}
		uuids[txn.GetUuid()] = vi.Version
		if id, ok := acked[vi.Version]; ok && id != txn.GetUuid() {
			t.Fatalf("version %d holds %s, lanced acknowledged %s", vi.Version, txn.GetUuid(), id)
		}
		if vi.Version > startVersion && format.OperationName(txn) == "Append" {
			appends++
			interleaved = interleaved || vi.Version < lastAck
		}
	}
	if appends != lanceAdds {
		t.Fatalf("%d appends visible, real Lance acknowledged %d", appends, lanceAdds)
	}
	if !interleaved {
		t.Fatalf("no real-Lance append landed between lanced commits (last lanced commit v%d): the race did not happen", lastAck)
	}
	return want
}

// TestReadDeletionsMatchRealLance: the deletion files real Lance wrote (Arrow
// with ZSTD buffers, roaring bitmaps) decode to exactly the rows real Lance
// hides: physical rows minus our deleted set equals the live rows real Lance
// scans in every fragment.
func TestReadDeletionsMatchRealLance(t *testing.T) {
	oracle.Require(t)
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, sc := range []string{"deletes_arrow", "deletes_bitmap", "stable_row_ids", "tags"} {
		path := oracle.Build(t, sc, dir)
		b, err := store.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := OpenTable(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		m, err := tbl.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lance := oracle.Inspect(t, path, 0)
		kinds := map[string]int{}
		for _, fr := range m.PB.GetFragments() {
			rows, err := tbl.ReadDeletions(ctx, fr)
			if err != nil {
				t.Fatalf("%s: %v", sc, err)
			}
			if df := fr.GetDeletionFile(); df != nil {
				kinds[format.DeletionSuffix(df.GetFileType())]++
			}
			live := int64(fr.GetPhysicalRows() - rows.GetCardinality())
			if got := lance.FragmentRows[uint32(fr.GetId())]; got != live {
				t.Fatalf("%s fragment %d: %d live rows by our deletions, real Lance scans %d", sc, fr.GetId(), live, got)
			}
		}
		if sc == "deletes_bitmap" && (kinds["bin"] == 0 || kinds["arrow"] == 0) {
			t.Fatalf("deletes_bitmap has deletion kinds %v, want both", kinds)
		}
		_ = b.Close()
	}
}
