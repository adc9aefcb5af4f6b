package vector

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

func TestCompactionMapping(t *testing.T) {
	m, err := NewCompactionMapping([]RewriteGroup{{
		Old: []OldFragment{
			{ID: 1, PhysicalRows: 5, Deleted: roaring.BitmapOf(0, 3)},
			{ID: 2, PhysicalRows: 4},
		},
		New: []NewFragment{{ID: 9, Rows: 4}, {ID: 10, Rows: 3}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr := func(f, o uint64) uint64 { return f<<32 | o }
	cases := []struct {
		old  uint64
		want uint64
		keep bool
	}{
		{addr(1, 0), 0, false},
		{addr(1, 1), addr(9, 0), true},
		{addr(1, 2), addr(9, 1), true},
		{addr(1, 3), 0, false},
		{addr(1, 4), addr(9, 2), true},
		{addr(2, 0), addr(9, 3), true},
		{addr(2, 1), addr(10, 0), true},
		{addr(2, 3), addr(10, 2), true},
		{addr(2, 4), 0, false}, // past the fragment's end
		{addr(3, 7), addr(3, 7), true},
	}
	for _, c := range cases {
		got, keep := m.Map(c.old)
		if keep != c.keep || (keep && got != c.want) {
			t.Errorf("Map(%d:%d) = %d:%d %v, want %d:%d %v", c.old>>32, c.old&0xffffffff, got>>32, got&0xffffffff, keep, c.want>>32, c.want&0xffffffff, c.keep)
		}
	}
	if _, err := NewCompactionMapping([]RewriteGroup{{Old: []OldFragment{{ID: 1, PhysicalRows: 3}}, New: []NewFragment{{ID: 2, Rows: 2}}}}); err == nil {
		t.Error("3 live rows into 2: no error")
	}
	if _, err := NewCompactionMapping([]RewriteGroup{{Old: []OldFragment{{ID: 1, PhysicalRows: 1}}, New: []NewFragment{{ID: 2, Rows: 1}}}, {Old: []OldFragment{{ID: 1, PhysicalRows: 1}}, New: []NewFragment{{ID: 3, Rows: 1}}}}); err == nil {
		t.Error("fragment in two groups: no error")
	}
}
