package format

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func TestRowIDsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(3000)
		ids := make([]uint64, 0, n)
		v := uint64(rng.IntN(1 << 20))
		for len(ids) < n {
			switch rng.IntN(10) {
			case 0:
				v += uint64(rng.IntN(100000)) // big jump
			case 1:
				v = uint64(rng.IntN(1 << 20)) // out of order (updated rows)
			default:
				v += 1 + uint64(rng.IntN(3))
			}
			ids = append(ids, v)
		}
		b, err := EncodeRowIDs(ids)
		if err != nil {
			t.Fatal(err)
		}
		vs := make([]uint64, n)
		for i := range vs {
			vs[i] = uint64(1 + rng.IntN(3))
		}
		vb, err := EncodeVersions(vs)
		if err != nil {
			t.Fatal(err)
		}
		f := &tablepb.DataFragment{Id: 3, PhysicalRows: uint64(n),
			RowIdSequence:                &tablepb.DataFragment_InlineRowIds{InlineRowIds: b},
			CreatedAtVersionSequence:     &tablepb.DataFragment_InlineCreatedAtVersions{InlineCreatedAtVersions: vb},
			LastUpdatedAtVersionSequence: &tablepb.DataFragment_InlineLastUpdatedAtVersions{InlineLastUpdatedAtVersions: vb},
		}
		m, err := DecodeRowMeta(f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.IDs, ids) || !slices.Equal(m.Created, vs) || !slices.Equal(m.LastUpdated, vs) {
			t.Fatalf("trial %d: round trip mismatch", trial)
		}
	}
}

// The digest's own example: {start:100,end:110,bitmap:"\xf7\x03"} = 100..109 without 103.
func TestRangeWithBitmapIsLSBFirst(t *testing.T) {
	s := &tablepb.U64Segment{Segment: &tablepb.U64Segment_RangeWithBitmap_{RangeWithBitmap: &tablepb.U64Segment_RangeWithBitmap{Start: 100, End: 110, Bitmap: []byte{0xf7, 0x03}}}}
	got, err := segmentValues(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{100, 101, 102, 104, 105, 106, 107, 108, 109}; !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestLineageMasksAndRechunks(t *testing.T) {
	var l Lineage
	a := &RowMeta{IDs: []uint64{0, 1, 2, 3}, Created: []uint64{1, 1, 1, 1}, LastUpdated: []uint64{1, 2, 1, 1}}
	b := &RowMeta{IDs: []uint64{10, 11, 12}, Created: []uint64{3, 3, 3}, LastUpdated: []uint64{3, 3, 3}}
	l.Keep(a, roaring.BitmapOf(1))
	l.Keep(b, nil)
	f1, f2 := &tablepb.DataFragment{PhysicalRows: 4}, &tablepb.DataFragment{PhysicalRows: 2}
	if err := l.Assign(f1, 4); err != nil {
		t.Fatal(err)
	}
	if err := l.Assign(f2, 2); err != nil {
		t.Fatal(err)
	}
	m1, err := DecodeRowMeta(f1)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := DecodeRowMeta(f2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m1.IDs, []uint64{0, 2, 3, 10}) || !slices.Equal(m2.IDs, []uint64{11, 12}) {
		t.Fatalf("ids %v %v", m1.IDs, m2.IDs)
	}
	if !slices.Equal(m1.Created, []uint64{1, 1, 1, 3}) || !slices.Equal(m1.LastUpdated, []uint64{1, 1, 1, 3}) {
		t.Fatalf("versions %v %v", m1.Created, m1.LastUpdated)
	}
	if err := l.Assign(&tablepb.DataFragment{}, 1); err == nil {
		t.Fatal("assigning more rows than were kept must fail")
	}
}
