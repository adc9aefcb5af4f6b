// Package minheap is a small generic binary min-heap on container/heap,
// shared by the scheduler's ready queue, the watch coalescer's due times
// and the HNSW builder's beam search.
package minheap

import "container/heap"

// Heap holds values ordered by the less function given to New; Pop
// returns the least. Its zero value is not usable.
type Heap[T any] struct {
	h items[T]
}

// New returns an empty heap ordered by less.
func New[T any](less func(a, b T) bool) Heap[T] {
	return Heap[T]{h: items[T]{less: less}}
}

// Len is the number of values held.
func (h *Heap[T]) Len() int { return len(h.h.s) }

// Push adds x.
func (h *Heap[T]) Push(x T) { heap.Push(&h.h, x) }

// Pop removes and returns the least value; the heap must not be empty.
func (h *Heap[T]) Pop() T { return heap.Pop(&h.h).(T) }

// Peek returns the least value without removing it; the heap must not be
// empty.
func (h *Heap[T]) Peek() T { return h.h.s[0] }

// All returns the values held, in heap order (the least first, the rest
// unsorted); the slice is the heap's own until the next Push or Pop.
func (h *Heap[T]) All() []T { return h.h.s }

// items adapts a slice and its order to heap.Interface.
type items[T any] struct {
	s    []T
	less func(a, b T) bool
}

func (h *items[T]) Len() int           { return len(h.s) }
func (h *items[T]) Less(i, j int) bool { return h.less(h.s[i], h.s[j]) }
func (h *items[T]) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *items[T]) Push(x any)         { h.s = append(h.s, x.(T)) }
func (h *items[T]) Pop() any {
	last := len(h.s) - 1
	x := h.s[last]
	var zero T
	h.s[last] = zero // drop the reference for the collector
	h.s = h.s[:last]
	return x
}
