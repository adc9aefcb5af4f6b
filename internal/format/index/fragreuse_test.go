package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// reuseGroup builds a reuse group from old fragments (id, rows, deleted
// offsets) and new fragment ids with their row counts.
func reuseGroup(t *testing.T, old []OldFragment, newIDs []uint64, newRows []uint64) ReuseGroup {
	t.Helper()
	ra := NewRetainedAddrs()
	var rg ReuseGroup
	for _, f := range old {
		ra.AddFragment(f.ID, f.PhysicalRows, f.Deleted)
		var del uint64
		if f.Deleted != nil {
			del = f.Deleted.GetCardinality()
		}
		rg.Old = append(rg.Old, FragDigest{ID: f.ID, PhysicalRows: f.PhysicalRows, NumDeletedRows: del})
	}
	for i, id := range newIDs {
		rg.New = append(rg.New, FragDigest{ID: id, PhysicalRows: newRows[i]})
	}
	b, err := ra.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	rg.Retained = b
	return rg
}

func randomDeleted(r *rand.Rand, rows uint64, frac float64) *roaring.Bitmap {
	bm := roaring.New()
	for i := uint64(0); i < rows; i++ {
		if r.Float64() < frac {
			bm.Add(uint32(i))
		}
	}
	return bm
}

// Two chained reuse versions survive the manifest entry: decoded back in
// order with their groups, and the entry's fragment bitmap holds every new
// fragment. (Whether real Lance reads such an entry is judged by
// TestDeferCompactOracle.)
func TestFragReuseBuildDecodesBack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	old := []OldFragment{
		{ID: 0, PhysicalRows: 70000, Deleted: randomDeleted(r, 70000, 0.1)},
		{ID: 1, PhysicalRows: 300, Deleted: nil},
		{ID: 2, PhysicalRows: 5000, Deleted: randomDeleted(r, 5000, 0.5)},
	}
	live := uint64(0)
	for _, f := range old {
		live += f.PhysicalRows
		if f.Deleted != nil {
			live -= f.Deleted.GetCardinality()
		}
	}
	rg := reuseGroup(t, old, []uint64{7, 8}, []uint64{50000, live - 50000})
	// A second compaction: fragment 8 and 3 into 9.
	del8 := randomDeleted(r, live-50000, 0.2)
	rows8 := live - 50000
	rg2 := reuseGroup(t, []OldFragment{{ID: 3, PhysicalRows: 100}, {ID: 8, PhysicalRows: rows8, Deleted: del8}},
		[]uint64{9}, []uint64{100 + rows8 - del8.GetCardinality()})
	fr := &FragReuse{Versions: []ReuseVersion{{DatasetVersion: 9, Groups: []ReuseGroup{rg2}}, {DatasetVersion: 5, Groups: []ReuseGroup{rg}}}}
	meta, err := fr.Build([16]byte{1}, 9, 1234)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeFragReuse(meta)
	if err != nil {
		t.Fatal(err)
	}
	if Detect(meta) != KindFragReuse || len(back.Versions) != 2 || back.Versions[0].DatasetVersion != 5 || back.Versions[1].DatasetVersion != 9 {
		t.Fatalf("round trip: %+v", back.Versions)
	}
	for i, want := range []ReuseGroup{rg, rg2} {
		got := back.Versions[i].Groups
		if len(got) != 1 || !bytes.Equal(got[0].Retained, want.Retained) || !slices.Equal(got[0].Old, want.Old) || !slices.Equal(got[0].New, want.New) {
			t.Fatalf("version %d: group %+v, want %+v", back.Versions[i].DatasetVersion, got, want)
		}
	}
	bm, _ := DecodeBitmap(meta.GetFragmentBitmap())
	if got := bm.ToArray(); len(got) != 3 || got[0] != 7 || got[1] != 8 || got[2] != 9 {
		t.Fatalf("reuse index bitmap %v, want the new fragments 7 8 9", got)
	}
	t.Logf("reuse index entry %d bytes", len(meta.GetIndexDetails().GetValue()))
}

// The retained addresses are a RoaringTreemap as Lance serializes it: a u64
// count of 32-bit bitmaps, then each with its u32 high key.
func TestRetainedAddrsTreemapLayout(t *testing.T) {
	ra := NewRetainedAddrs()
	ra.AddFragment(2, 10, nil)
	ra.AddFragment(5, 3, nil)
	b, err := ra.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(b); n != 2 {
		t.Fatalf("bitmap count %d", n)
	}
	if k := binary.LittleEndian.Uint32(b[8:]); k != 2 {
		t.Fatalf("first high key %d", k)
	}
	back := roaring64.New()
	if _, err := back.ReadFrom(bytes.NewReader(b)); err != nil || back.GetCardinality() != 13 || !back.Contains(5<<32|2) {
		t.Fatalf("decode: %v %v", back, err)
	}
}

func seg(name string, dv uint64, frags ...uint32) *tablepb.IndexMetadata {
	bm := roaring.BitmapOf(frags...)
	b, _ := EncodeBitmap(bm)
	return &tablepb.IndexMetadata{Name: name, DatasetVersion: dv, FragmentBitmap: b}
}

// Bitmaps are translated as Lance's load_indices does; trimming and
// "behind" follow Lance's caught-up rule.
func TestFragReuseBitmapsTrimBehind(t *testing.T) {
	v1 := ReuseVersion{DatasetVersion: 5, Groups: []ReuseGroup{{Old: []FragDigest{{ID: 1}, {ID: 2}}, New: []FragDigest{{ID: 6}}}}}
	v2 := ReuseVersion{DatasetVersion: 8, Groups: []ReuseGroup{{Old: []FragDigest{{ID: 6}, {ID: 3}}, New: []FragDigest{{ID: 9}}}}}
	fr := &FragReuse{Versions: []ReuseVersion{v1, v2}}
	meta, err := fr.Build([16]byte{2}, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	old := seg("a", 3, 0, 1, 2, 3)
	persisted := seg("b", 3, 0, 6, 3) // Lance persisted the first translation
	fresh := seg("c", 8, 9)           // built after both
	through, _, err := ThroughReuse([]*tablepb.IndexMetadata{old, persisted, fresh, meta})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]uint32{{0, 9}, {0, 9}, {9}} {
		bm, _ := DecodeBitmap(through[i].GetFragmentBitmap())
		if got := bm.ToArray(); len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Fatalf("%s: %v, want %v", through[i].GetName(), got, want)
		}
	}
	if old.GetFragmentBitmap() == nil || through[0] == old {
		t.Fatal("input modified or not copied")
	}
	for _, c := range []struct {
		s    *tablepb.IndexMetadata
		want bool
	}{{old, true}, {persisted, true}, {fresh, false}} {
		if got, err := fr.Behind(c.s); err != nil || got != c.want {
			t.Fatalf("%s behind %v (%v), want %v", c.s.GetName(), got, err, c.want)
		}
	}
	if kept, trimmed := fr.Trim([]*tablepb.IndexMetadata{old, fresh, meta}); trimmed || len(kept) != 2 {
		t.Fatalf("trim with a segment behind: %d kept, trimmed %v", len(kept), trimmed)
	}
	if kept, trimmed := fr.Trim([]*tablepb.IndexMetadata{fresh, meta}); !trimmed || len(kept) != 0 {
		t.Fatalf("trim with every segment caught up: %d kept", len(kept))
	}
	// A segment rebuilt after v1 but before v2, covering v2's old fragment.
	mid := seg("d", 6, 6, 3)
	if kept, _ := fr.Trim([]*tablepb.IndexMetadata{mid, fresh}); len(kept) != 1 || kept[0].DatasetVersion != 8 {
		t.Fatalf("trim kept %+v, want only version 8", kept)
	}
	split := seg("e", 3, 1)
	if _, _, err := ThroughReuse([]*tablepb.IndexMetadata{split, meta}); err == nil {
		t.Fatal("a group only partly covered must be refused")
	}
	big := &FragReuse{}
	for i := 0; i < 40; i++ {
		ra := NewRetainedAddrs()
		r := rand.New(rand.NewPCG(uint64(i), 1))
		ra.AddFragment(uint64(i), 70000, randomDeleted(r, 70000, 0.5))
		b, _ := ra.Bytes()
		big.Versions = append(big.Versions, ReuseVersion{DatasetVersion: uint64(i), Groups: []ReuseGroup{{Retained: b, Old: []FragDigest{{ID: uint64(i)}}, New: []FragDigest{{ID: 100 + uint64(i)}}}}})
	}
	if _, err := big.Build([16]byte{3}, 1, 1); !errors.Is(err, ErrReuseTooLarge) {
		t.Fatalf("oversized reuse index: %v", err)
	}
}
