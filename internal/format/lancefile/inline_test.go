package lancefile

import (
	"encoding/binary"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/codec"
)

// A bit-packed chunk is unpacked into a pooled block: reading a column of
// such chunks allocates nothing per chunk beyond the values it appends.
func TestInlineBitpackedChunkAllocatesNothing(t *testing.T) {
	vals := make([]uint64, 1000)
	for i := range vals {
		vals[i] = uint64(i*7919) % 100003
	}
	chunk := codec.AppendInlineBitpacked(nil, vals)
	var out values
	out.data = make([]byte, 0, 8*len(vals)*200)
	if err := appendInlineBitpacked(64, chunk, len(vals), &out); err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if got := binary.LittleEndian.Uint64(out.data[8*i:]); got != v {
			t.Fatalf("value %d: got %d, want %d", i, got, v)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := appendInlineBitpacked(64, chunk, len(vals), &out); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per chunk, want 0", allocs)
	}
	// narrower words share the block
	small := make([]uint16, 300)
	for i := range small {
		small[i] = uint16(i * 3)
	}
	var out16 values
	if err := appendInlineBitpacked(16, codec.AppendInlineBitpacked(nil, small), len(small), &out16); err != nil {
		t.Fatal(err)
	}
	for i, v := range small {
		if got := binary.LittleEndian.Uint16(out16.data[2*i:]); got != v {
			t.Fatalf("16-bit value %d: got %d, want %d", i, got, v)
		}
	}
}
