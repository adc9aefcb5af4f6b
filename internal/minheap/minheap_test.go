package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPopsInOrder(t *testing.T) {
	h := New(func(a, b int) bool { return a < b })
	in := rand.New(rand.NewPCG(1, 2)).Perm(200)
	for _, v := range in {
		h.Push(v)
	}
	if h.Len() != len(in) {
		t.Fatalf("Len = %d, want %d", h.Len(), len(in))
	}
	if all := slices.Sorted(slices.Values(h.All())); h.All()[0] != 0 || !slices.Equal(all, slices.Sorted(slices.Values(in))) {
		t.Fatalf("All holds %v..., want the pushed values, least first", h.All()[:5])
	}
	var out []int
	for h.Len() > 0 {
		least := h.Peek()
		if got := h.Pop(); got != least {
			t.Fatalf("Pop = %d after Peek = %d", got, least)
		}
		out = append(out, least)
	}
	want := slices.Clone(in)
	slices.Sort(want)
	if !slices.Equal(out, want) {
		t.Fatalf("popped %v, want %v", out[:10], want[:10])
	}
}
