package index_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/index"
	_ "github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func TestCanRemap(t *testing.T) {
	for _, k := range []index.Kind{index.KindIVFFlat, index.KindIVFPQ, index.KindIVFRQ, index.KindHNSWSQ, index.KindHNSWPQ} {
		if _, ok := index.RemapperFor(k); !ok {
			t.Errorf("no remapper registered for %s", k)
		}
	}
	// An IVF_PQ segment: VectorIndexDetails with pq (field 4) set.
	pq := &tablepb.IndexMetadata{Name: "vec_idx", IndexDetails: &anypb.Any{TypeUrl: "/lance.table.VectorIndexDetails", Value: []byte{0x22, 0x00}}}
	if err := index.CanRemap(pq); err != nil {
		t.Errorf("CanRemap(ivfPq) = %v", err)
	}
	unk := &tablepb.IndexMetadata{Name: "x", IndexDetails: &anypb.Any{TypeUrl: "/lance.table.SomethingElse"}}
	err := index.CanRemap(unk)
	if !errors.Is(err, index.ErrNoRemapper) {
		t.Fatalf("CanRemap(unknown) = %v, want ErrNoRemapper", err)
	}
	if got := err.Error(); got == "" || !strings.Contains(got, `"x"`) {
		t.Errorf("error %q does not name the index", got)
	}
}

func TestCutRanges(t *testing.T) {
	for _, c := range []struct {
		sizes []uint64
		n     int
		want  []index.PartRange
	}{
		{[]uint64{10, 10, 10, 10}, 2, []index.PartRange{{Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}}},
		{[]uint64{10, 10, 10, 10}, 9, []index.PartRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: 3}, {Lo: 3, Hi: 4}}},
		{[]uint64{100, 1, 1, 1}, 3, []index.PartRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: 4}}},
		{[]uint64{1, 1, 1, 100}, 2, []index.PartRange{{Lo: 0, Hi: 3}, {Lo: 3, Hi: 4}}},
		{[]uint64{0, 0, 0}, 2, []index.PartRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 3}}},
		{[]uint64{5}, 3, []index.PartRange{{Lo: 0, Hi: 1}}},
		{nil, 3, nil},
	} {
		got := index.CutRanges(c.sizes, c.n)
		if !slices.Equal(got, c.want) {
			t.Errorf("CutRanges(%v, %d) = %v, want %v", c.sizes, c.n, got, c.want)
		}
	}
}
