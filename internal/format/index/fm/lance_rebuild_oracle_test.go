package fm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestLanceRebuildsFMOracle pins what lance 8.0.0 does with an FM index
// when it compacts: the compaction commit leaves the segment (same uuid,
// old fragments), and the segment covering the new fragments appears only
// in a later commit (optimize_indices rebuilding it from the column).
// lanced rebuilds it in the rewrite's own commit (CanRemap accepts it):
// the segment Builder writes from the rows Lance's rebuild read equals the
// one Lance wrote, partition by partition.
func TestLanceRebuildsFMOracle(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fm"}, {"op": "delete", "where": "id % 10 = 0"}})
	pre := oracle.Inspect(t, path, 0)
	preM := indextest.ReadManifest(t, path, pre.Version)
	old := indextest.Index(t, preM, "body_idx")
	if k := index.Detect(old); k != index.KindFM {
		t.Fatalf("kind %s", k)
	}
	if err := index.CanRemap(old); err != nil {
		t.Fatalf("CanRemap(fm) = %v", err)
	}
	contains := func(v uint64) []int64 {
		res := oracle.RunOps(t, path, []oracle.Op{{"op": "checkout_version", "version": v}, {"op": "query", "where": "contains(body, 'river')", "columns": []string{"id"}, "explain": true}})
		var r struct {
			Data []struct {
				ID int64 `json:"id"`
			} `json:"data"`
			Plan string `json:"plan"`
		}
		if err := json.Unmarshal(res[1], &r); err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, d := range r.Data {
			ids = append(ids, d.ID)
		}
		slices.Sort(ids)
		return ids
	}
	before := contains(pre.Version)

	oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
	post := oracle.Inspect(t, path, 0)
	oldFrags := roaring.New()
	if err := oldFrags.UnmarshalBinary(old.GetFragmentBitmap()); err != nil {
		t.Fatal(err)
	}
	compacted, rebuilt := uint64(0), uint64(0)
	for v := pre.Version + 1; v <= post.Version; v++ {
		m := indextest.ReadManifest(t, path, v)
		ix := indextest.Index(t, m, "body_idx")
		bm := roaring.New()
		if err := bm.UnmarshalBinary(ix.GetFragmentBitmap()); err != nil {
			t.Fatal(err)
		}
		frags := roaring.New()
		for _, f := range m.PB.GetFragments() {
			frags.Add(uint32(f.GetId()))
		}
		same := indextest.UUID(t, ix.GetUuid()) == indextest.UUID(t, old.GetUuid())
		switch {
		case compacted == 0 && !frags.Equals(oldFrags):
			// The compaction commit: new fragments, FM segment untouched.
			compacted = v
			if !same || !bm.Equals(oldFrags) {
				t.Fatalf("v%d (compaction): FM segment %s covers %v, want the old %s on %v", v, indextest.UUID(t, ix.GetUuid()), bm.ToArray(), indextest.UUID(t, old.GetUuid()), oldFrags.ToArray())
			}
		case compacted != 0 && !same && rebuilt == 0:
			rebuilt = v
			if !bm.Equals(frags) || ix.GetIndexVersion() != old.GetIndexVersion() {
				t.Fatalf("v%d: rebuilt FM segment covers %v of %v, version %d", v, bm.ToArray(), frags.ToArray(), ix.GetIndexVersion())
			}
		}
	}
	if compacted == 0 || rebuilt <= compacted {
		t.Fatalf("versions %d..%d: compaction at v%d, FM rebuilt at v%d", pre.Version+1, post.Version, compacted, rebuilt)
	}
	if after := contains(post.Version); !slices.Equal(after, before) || len(before) == 0 {
		t.Fatalf("contains: %d rows before, %d after", len(before), len(after))
	}
	rm := indextest.ReadManifest(t, path, rebuilt)
	rix := indextest.Index(t, rm, "body_idx")
	seg, res := buildFromScan(t, path, rebuilt)
	dir := filepath.Join(path, "_indices", indextest.UUID(t, rix.GetUuid()))
	for i, f := range rix.GetFiles() {
		theirs, err := os.ReadFile(filepath.Join(dir, f.GetPath()))
		if err != nil || i >= len(res.Files) || res.Files[i] != f.GetPath() {
			t.Fatalf("file %s: %v (ours %v)", f.GetPath(), err, res.Files)
		}
		compareFiles(t, f.GetPath(), seg[f.GetPath()], theirs)
	}
	t.Logf("FM: compaction at v%d kept segment %s on the old fragments; optimize_indices rebuilt it at v%d; ours from the same rows equals it (%d docs)", compacted, indextest.UUID(t, old.GetUuid()), rebuilt, res.Docs)
}
