package index_test

import (
	"errors"
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
