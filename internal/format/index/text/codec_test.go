package text

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestPack4xRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	in, out := make([]uint32, blockSize), make([]uint32, blockSize)
	for nb := 0; nb <= 32; nb++ {
		for i := range in {
			if nb > 0 {
				in[i] = uint32(rng.Uint64() >> (64 - nb))
			} else {
				in[i] = 0
			}
		}
		got := numBits(in)
		if int(got) > nb {
			t.Fatalf("numBits %d for %d-bit values", got, nb)
		}
		b := pack4x(nil, in, got)
		if len(b) != 16*int(got) {
			t.Fatalf("%d bits packed into %d bytes", got, len(b))
		}
		unpack4x(out, b, got)
		if !slices.Equal(in, out) {
			t.Fatalf("%d bits: round trip differs", nb)
		}
	}
	// Sorted blocks and whole posting lists.
	for _, n := range []int{1, 127, 128, 129, 300, 1024} {
		docs, freqs := make([]uint32, n), make([]uint32, n)
		d := uint32(rng.IntN(100))
		for i := range docs {
			d += 1 + uint32(rng.IntN(40))
			docs[i], freqs[i] = d, 1+uint32(rng.IntN(9))
		}
		var blocks [][]byte
		for s := 0; s < n; s += blockSize {
			e := min(s+blockSize, n)
			if e-s == blockSize {
				blocks = append(blocks, encodeFull(nil, docs[s:e], freqs[s:e], 1.5, make([]uint32, blockSize)))
			} else {
				blocks = append(blocks, encodeTail(nil, docs[s:e], freqs[s:e], 1.5))
			}
		}
		gd, gf, err := decodePostings(nil, nil, blocks, n, make([]uint32, blockSize))
		if err != nil || !slices.Equal(gd, docs) || !slices.Equal(gf, freqs) {
			t.Fatalf("%d docs: round trip %v", n, err)
		}
		if _, _, err := decodePostings(nil, nil, blocks, n+1, make([]uint32, blockSize)); err == nil && n%blockSize != 0 {
			t.Fatalf("%d docs decoded as %d", n, n+1)
		}
	}
	starts := []uint32{0, 7, 15, 300, 301, 70000}
	got, err := decodeGroupStarts(encodeGroupStarts(starts))
	if err != nil || !slices.Equal(got, starts) {
		t.Fatalf("group starts %v, %v", got, err)
	}
}

func TestFSTRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 50, 5000} {
		set := map[string]bool{}
		for len(set) < n {
			k := make([]byte, 1+rng.IntN(12))
			for i := range k {
				// A wide alphabet gives nodes with more than 32 transitions.
				k[i] = byte(rng.IntN(90) + 33)
			}
			set[string(k)] = true
		}
		if n == 1 {
			set = map[string]bool{"": true}
		}
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vals := rng.Perm(len(keys))
		b := newFSTBuilder()
		for i, k := range keys {
			if err := b.insert([]byte(k), uint64(vals[i])); err != nil {
				t.Fatal(err)
			}
		}
		data := b.finish()
		if n > 1 {
			if err := b.insert([]byte(keys[0]), 1); err == nil {
				t.Fatal("out of order insert accepted")
			}
		}
		r, err := newFSTReader(data)
		if err != nil {
			t.Fatalf("%d keys: %v", n, err)
		}
		i := 0
		err = r.each(func(k []byte, v uint64) error {
			if i >= len(keys) || string(k) != keys[i] || v != uint64(vals[i]) {
				return fmt.Errorf("key %d: %q=%d", i, k, v)
			}
			i++
			return nil
		})
		if err != nil || i != len(keys) {
			t.Fatalf("%d keys: read %d, %v", n, i, err)
		}
		// Rebuilding from what was read gives the same bytes.
		b2 := newFSTBuilder()
		_ = r.each(func(k []byte, v uint64) error { return b2.insert(k, v) })
		if !bytes.Equal(b2.finish(), data) {
			t.Fatalf("%d keys: rebuild differs", n)
		}
	}
}

// Damaged dictionary bytes give an error, never a panic or a hang.
func TestFSTCorrupt(t *testing.T) {
	b := newFSTBuilder()
	for i, k := range []string{"alpha", "beta", "betamax", "gamma", "zeta"} {
		_ = b.insert([]byte(k), uint64(i))
	}
	data := b.finish()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		d := slices.Clone(data)
		d = d[:16+rng.IntN(len(d)-15)]
		for k := 0; k < 1+rng.IntN(4); k++ {
			d[rng.IntN(len(d))] = byte(rng.IntN(256))
		}
		if r, err := newFSTReader(d); err == nil {
			_ = r.each(func([]byte, uint64) error { return nil })
		}
		// Skip the checksum so node decoding sees the damage too.
		if len(d) >= 36 {
			r := &fstReader{data: d[:len(d)-20], version: 3, root: rng.IntN(len(d) - 20), len: 5}
			_ = r.each(func([]byte, uint64) error { return nil })
		}
	}
}

// The FTS remapper is registered and accepts only lance 8.0.0's default
// layout (index version 1); other versions keep their fragments, with the
// reason.
func TestRemapperCheck(t *testing.T) {
	seg := func(v int32) *tablepb.IndexMetadata {
		return &tablepb.IndexMetadata{Name: "body_idx", IndexVersion: &v, IndexDetails: &anypb.Any{TypeUrl: "/lance.table.InvertedIndexDetails"}}
	}
	if err := index.CanRemap(seg(1)); err != nil {
		t.Fatalf("CanRemap(v1) = %v", err)
	}
	for _, v := range []int32{0, 2} {
		err := index.CanRemap(seg(v))
		if !errors.Is(err, index.ErrNoRemapper) || !strings.Contains(err.Error(), "body_idx") || !strings.Contains(err.Error(), fmt.Sprintf("version %d", v)) {
			t.Fatalf("CanRemap(v%d) = %v", v, err)
		}
	}
}
