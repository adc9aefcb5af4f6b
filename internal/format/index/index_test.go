package index

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func meta(t *testing.T, name, url string, details []byte, dv uint64, frags ...uint32) *tablepb.IndexMetadata {
	t.Helper()
	m := &tablepb.IndexMetadata{Name: name, DatasetVersion: dv, Uuid: &tablepb.UUID{Uuid: []byte{byte(dv), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}}
	if url != "" {
		m.IndexDetails = &anypb.Any{TypeUrl: url, Value: details}
	}
	if frags != nil {
		b, err := EncodeBitmap(roaring.BitmapOf(frags...))
		if err != nil {
			t.Fatal(err)
		}
		m.FragmentBitmap = b
	}
	return m
}

// The VectorIndexDetails values below are the bytes lance 8.0.0 wrote for
// each vector index type (runtime hints left out).
func TestDetect(t *testing.T) {
	const v = "/lance.index.pb.VectorIndexDetails"
	for _, c := range []struct {
		url     string
		details []byte
		want    Kind
	}{
		{"/lance.table.BTreeIndexDetails", nil, KindBTree},
		{"/lance.table.BitmapIndexDetails", nil, KindBitmap},
		{"/lance.table.LabelListIndexDetails", nil, KindLabelList},
		{"/lance.table.InvertedIndexDetails", nil, KindFTS},
		{"/lance.index.pb.FMIndexDetails", nil, KindFM},
		{v, []byte{0x42, 0x00}, KindIVFFlat},
		{v, []byte{0x22, 0x04, 0x08, 0x08, 0x10, 0x04}, KindIVFPQ},
		{v, []byte{0x32, 0x02, 0x08, 0x01}, KindIVFRQ},
		{v, []byte{0x1a, 0x07, 0x08, 0x14, 0x10, 0xac, 0x02, 0x18, 0x07, 0x2a, 0x02, 0x08, 0x08}, KindHNSWSQ},
		{v, []byte{0x1a, 0x07, 0x08, 0x14, 0x10, 0xac, 0x02, 0x18, 0x07, 0x22, 0x04, 0x08, 0x08, 0x10, 0x04}, KindHNSWPQ},
		{v, nil, KindVector},
		{v, []byte{0x22, 0x09}, KindVector}, // truncated
		{"/lance.table.ZoneMapIndexDetails", nil, KindUnknown},
		{"", nil, KindUnknown},
	} {
		got := Detect(meta(t, "i", c.url, c.details, 1))
		if got != c.want {
			t.Errorf("%s %x: got %s, want %s", c.url, c.details, got, c.want)
		}
		if got.IsVector() != (c.url == v) {
			t.Errorf("%s %x: IsVector %v", c.url, c.details, got.IsVector())
		}
	}
	if Detect(&tablepb.IndexMetadata{Name: FragReuseName}) != KindFragReuse {
		t.Error("frag reuse by name")
	}
}

func TestRetention(t *testing.T) {
	const vec, bt = "/lance.index.pb.VectorIndexDetails", "/lance.table.BTreeIndexDetails"
	existing := roaring.BitmapOf(4, 5)
	idx, err := Group([]*tablepb.IndexMetadata{
		meta(t, "vec_idx", vec, []byte{0x22, 0x00}, 2, 0, 1),                     // empty: lost
		meta(t, "id_idx", bt, nil, 2, 0, 1),                                      // empty scalar: kept
		meta(t, "two", bt, nil, 3, 0),                                            // empty segment, other not
		meta(t, "two", bt, nil, 4, 4),                                            //
		meta(t, "v2", vec, nil, 3, 1),                                            // all empty vector segments
		meta(t, "v2", vec, nil, 4, 2),                                            //
		meta(t, "s2", bt, nil, 5, 2),                                             // all empty scalar: oldest kept
		meta(t, "s2", bt, nil, 3, 1),                                             //
		meta(t, "live", vec, nil, 3, 1, 5),                                       // still covers 5
		meta(t, FragReuseName, "/lance.table.FragmentReuseIndexDetails", nil, 3), // system: kept
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	for _, d := range Retention(idx, existing) {
		got[d.Name] = append(got[d.Name], uint64(d.Kind[0])) // presence only
		if d.Lost != (d.Name == "vec_idx" || d.Name == "v2") {
			t.Errorf("%s: Lost %v", d.Name, d.Lost)
		}
	}
	want := map[string]int{"vec_idx": 1, "two": 1, "v2": 2, "s2": 1}
	for n, c := range want {
		if len(got[n]) != c {
			t.Errorf("%s: %d dropped, want %d", n, len(got[n]), c)
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			t.Errorf("%s dropped", n)
		}
	}
	for _, ix := range idx {
		if ix.Name == "live" && ix.Covered(existing).GetCardinality() != 1 {
			t.Errorf("live covers %v", ix.Covered(existing).ToArray())
		}
	}
}

func TestRecalculate(t *testing.T) {
	bm := roaring.BitmapOf(0, 1, 2, 7)
	if ch, err := Recalculate(bm, []uint64{1, 2}, []uint64{9}); err != nil || !ch {
		t.Fatal(ch, err)
	}
	if got := bm.ToArray(); len(got) != 3 || got[0] != 0 || got[1] != 7 || got[2] != 9 {
		t.Fatalf("got %v", got)
	}
	if ch, err := Recalculate(bm, []uint64{3, 4}, []uint64{10}); err != nil || ch {
		t.Fatal(ch, err)
	}
	if _, err := Recalculate(bm, []uint64{7, 8}, []uint64{11}); err == nil {
		t.Fatal("partial overlap accepted")
	}
}

// TestCompactionMappingRandom checks the computed mapping against the
// rewrite it describes: live rows in order, cut into new fragments.
func TestCompactionMappingRandom(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		var groups []RewriteGroup
		want := map[uint64]uint64{}
		var all []OldFragment
		nextOld, nextNew := uint64(0), uint64(100)
		for g := 0; g < 1+r.Intn(3); g++ {
			var grp RewriteGroup
			var liveAddrs []uint64
			for i := 0; i < 1+r.Intn(4); i++ {
				f := OldFragment{ID: nextOld, PhysicalRows: uint64(r.Intn(300))}
				nextOld += 1 + uint64(r.Intn(2))
				if r.Intn(3) > 0 {
					f.Deleted = roaring.New()
					for o := uint64(0); o < f.PhysicalRows; o++ {
						if r.Intn(4) == 0 {
							f.Deleted.Add(uint32(o))
						}
					}
				}
				for o := uint64(0); o < f.PhysicalRows; o++ {
					if f.Deleted == nil || !f.Deleted.Contains(uint32(o)) {
						liveAddrs = append(liveAddrs, Addr(f.ID, o))
					}
				}
				grp.Old = append(grp.Old, f)
				all = append(all, f)
			}
			for k := 0; k < len(liveAddrs); nextNew++ {
				size := min(1+r.Intn(200), len(liveAddrs)-k)
				grp.New = append(grp.New, NewFragment{ID: nextNew, Rows: uint64(size)})
				for o := 0; o < size; o++ {
					want[liveAddrs[k+o]] = Addr(nextNew, uint64(o))
				}
				k += size
			}
			groups = append(groups, grp)
		}
		m, err := NewCompactionMapping(groups)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range all {
			if !m.Rewritten(f.ID) {
				t.Fatalf("fragment %d not rewritten", f.ID)
			}
			for o := uint64(0); o <= f.PhysicalRows; o++ {
				a := Addr(f.ID, o)
				got, ok := m.Map(a)
				w, live := want[a]
				if ok != live || (live && got != w) {
					t.Fatalf("trial %d: %d/%d -> %d %v, want %d %v", trial, f.ID, o, got, ok, w, live)
				}
			}
		}
		if got, ok := m.Map(Addr(99999, 5)); !ok || got != Addr(99999, 5) {
			t.Fatal("untouched fragment moved")
		}
	}
}

// A damaged fragment bitmap (truncated, a bad cookie, a header declaring
// more containers than the bytes hold, containers the format forbids) is
// an error, never a panic or a different bitmap.
func TestDecodeBitmapRefusesDamagedBytes(t *testing.T) {
	bm := roaring.New()
	bm.AddRange(0, 3000)
	bm.AddMany([]uint32{70000, 70002, 1 << 20})
	good, err := EncodeBitmap(bm)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeBitmap(good)
	if err != nil || !back.Equals(bm) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	damaged := map[string][]byte{"bad cookie": append([]byte{1, 2, 3, 4}, good[4:]...)}
	for n := 1; n < len(good); n++ {
		damaged[fmt.Sprintf("first %d bytes", n)] = good[:n]
	}
	// cookie 12346 (no runs) declaring 65536 containers in 16 bytes
	huge := binary.LittleEndian.AppendUint32(nil, 12346)
	huge = binary.LittleEndian.AppendUint32(huge, 1<<16)
	damaged["65536 containers declared"] = append(huge, make([]byte, 8)...)
	// one array container of two values, stored out of order
	unsorted := binary.LittleEndian.AppendUint32(nil, 12346)
	unsorted = binary.LittleEndian.AppendUint32(unsorted, 1)
	unsorted = binary.LittleEndian.AppendUint16(unsorted, 0)  // key
	unsorted = binary.LittleEndian.AppendUint16(unsorted, 1)  // cardinality - 1
	unsorted = binary.LittleEndian.AppendUint32(unsorted, 16) // offset
	unsorted = binary.LittleEndian.AppendUint16(unsorted, 9)
	unsorted = binary.LittleEndian.AppendUint16(unsorted, 3)
	damaged["unsorted array container"] = unsorted
	for name, b := range damaged {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", name, r)
				}
			}()
			if got, err := DecodeBitmap(b); err == nil {
				t.Errorf("%s: decoded %v, want an error", name, got.ToArray())
			}
		}()
	}
}
