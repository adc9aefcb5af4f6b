package fm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
)

// memSegment is an index.SegmentWriter (and reader) in memory.
type memSegment map[string][]byte

type memFile struct {
	seg  memSegment
	name string
	buf  bytes.Buffer
}

func (f *memFile) Write(p []byte) (int, error) { return f.buf.Write(p) }
func (f *memFile) Close() error                { f.seg[f.name] = f.buf.Bytes(); return nil }

func (s memSegment) Create(_ context.Context, name string) (io.WriteCloser, error) {
	return &memFile{seg: s, name: name}, nil
}

func (s memSegment) partition(t testing.TB, name string) *Partition {
	t.Helper()
	data, ok := s[name]
	if !ok {
		t.Fatalf("no file %s", name)
	}
	f, err := lancefile.Open(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ReadPartition(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// naiveSearch is the documents (row addresses) holding pattern.
func naiveSearch(docs [][]byte, rows []uint64, pattern []byte) []uint64 {
	var out []uint64
	for i, d := range docs {
		if d != nil && len(pattern) > 0 && bytes.Contains(sanitized(d), pattern) {
			out = append(out, rows[i])
		}
	}
	return out
}

func sanitized(d []byte) []byte {
	return bytes.Map(func(r rune) rune { return r }, bytes.ReplaceAll(bytes.ReplaceAll(d, []byte{0}, []byte(" ")), []byte{0xff}, []byte(" ")))
}

func build(t testing.TB, docs [][]byte, rows []uint64, maxBytes int64) (memSegment, Result, error) {
	t.Helper()
	seg := memSegment{}
	mem := memory.DefaultAllocator
	bb := array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)
	defer bb.Release()
	for _, d := range docs {
		if d == nil {
			bb.AppendNull()
		} else {
			bb.Append(d)
		}
	}
	arr := bb.NewArray()
	defer arr.Release()
	b := NewBuilder(context.Background(), seg, maxBytes)
	if err := b.AddColumn(arr, rows); err != nil {
		return seg, Result{}, err
	}
	res, err := b.Finish()
	return seg, res, err
}

func TestBuildSearchMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"the", "river", "flows", "héllo", "日本語", "a", "", "ab", "ba"}
	var docs [][]byte
	var rows []uint64
	for i := 0; i < 25_000; i++ {
		rows = append(rows, uint64(i/7000)<<32|uint64(i%7000)*2)
		switch {
		case i%97 == 3:
			docs = append(docs, nil)
			continue
		case i%89 == 5:
			docs = append(docs, []byte{})
			continue
		}
		var d []byte
		for w := r.IntN(6); w >= 0; w-- {
			d = append(d, words[r.IntN(len(words))]...)
			d = append(d, ' ')
		}
		if i%501 == 0 {
			d = append(d, 0, 0xff, 'z')
		}
		docs = append(docs, d)
	}
	seg, res, err := build(t, docs, rows, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 3 || res.Nulls == 0 || res.Docs+res.Nulls != uint64(len(docs)) {
		t.Fatalf("result %+v", res)
	}
	parts := make([]*Partition, len(res.Files))
	for i, name := range res.Files {
		parts[i] = seg.partition(t, name)
	}
	for _, pat := range []string{"river", "r fl", "héllo 日", "本", "the river flows", "ab ba", "a", " ", "zz", "x", "  z", "日本語 a"} {
		var got []uint64
		for _, p := range parts {
			got = append(got, p.Search([]byte(pat))...)
		}
		slices.Sort(got)
		want := naiveSearch(docs, rows, []byte(pat))
		if !slices.Equal(got, want) {
			t.Fatalf("%q: %d rows, want %d", pat, len(got), len(want))
		}
	}
	if len(parts[0].RowIDs) != PartitionDocs || parts[0].BWTLen == 0 {
		t.Fatalf("partition 0: %d docs", len(parts[0].RowIDs))
	}
}

func TestBuildEmptyAndBounds(t *testing.T) {
	seg, res, err := build(t, [][]byte{nil, nil}, []uint64{1, 2}, 1<<20)
	if err != nil || len(res.Files) != 1 || res.Docs != 0 {
		t.Fatalf("all null: %+v, %v", res, err)
	}
	if p := seg.partition(t, PartitionFileName(0)); p.BWTLen != 0 || len(p.RowIDs) != 0 || p.Search([]byte("a")) != nil {
		t.Fatalf("empty partition %+v", p)
	}
	_, _, err = build(t, [][]byte{bytes.Repeat([]byte("x"), 100), bytes.Repeat([]byte("y"), 100)}, []uint64{1, 2}, 150)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the bound: %v", err)
	}
	_, _, err = build(t, [][]byte{[]byte("a"), []byte("b")}, []uint64{2, 1}, 150)
	if err == nil {
		t.Fatal("rows out of order accepted")
	}
	// One distinct byte per partition: lance's single-symbol tree never
	// occurs (separator and terminator are always there), but one-doc
	// partitions do.
	seg, _, err = build(t, [][]byte{[]byte("aaaa")}, []uint64{7}, 150)
	if err != nil {
		t.Fatal(err)
	}
	if got := seg.partition(t, PartitionFileName(0)).Search([]byte("aa")); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("aa: %v", got)
	}
}

func TestPartitionFileName(t *testing.T) {
	for _, p := range []uint64{0, 1, 10, 12345} {
		got, ok := ParsePartitionFileName(PartitionFileName(p))
		if !ok || got != p {
			t.Fatalf("%d: %d %v", p, got, ok)
		}
	}
	for _, bad := range []string{"part_x_fm.lance", "part_1_docs.lance", "fm.lance", fmt.Sprintf("part_%d_fm.lancex", 1)} {
		if _, ok := ParsePartitionFileName(bad); ok {
			t.Fatalf("%s parsed", bad)
		}
	}
}
