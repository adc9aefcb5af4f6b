package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestDecompressFrames(t *testing.T) {
	raw, lz, zs := generalFrames(&testing.B{})
	for name, c := range map[string]struct {
		s Scheme
		f []byte
	}{"lz4": {SchemeLZ4, lz}, "zstd": {SchemeZSTD, zs}, "zstd-bare": {SchemeZSTD, zs[8:]}} {
		out, err := Decompress(c.s, c.f)
		if err != nil || !bytes.Equal(out, raw) {
			t.Fatalf("%s: err %v, equal %v", name, err, bytes.Equal(out, raw))
		}
	}
	// A wrong size prefix is corruption, not a silent short read.
	bad := bytes.Clone(lz)
	binary.LittleEndian.PutUint32(bad, uint32(len(raw)+5))
	if _, err := Decompress(SchemeLZ4, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lz4 wrong size: %v", err)
	}
	badz := bytes.Clone(zs)
	binary.LittleEndian.PutUint64(badz, uint64(len(raw)-1))
	if _, err := Decompress(SchemeZSTD, badz); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("zstd wrong size: %v", err)
	}
	if _, err := Decompress(Scheme(9), zs); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown scheme: %v", err)
	}
}

func TestDecodeRLEAndBSS(t *testing.T) {
	vals := []byte{1, 0, 2, 0, 3, 0}
	got, err := DecodeRLE[uint16](nil, vals, []byte{2, 1, 3}, 6)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{1, 1, 2, 3, 3, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rle = %v, want %v", got, want)
		}
	}
	// Runs past n are cut at n, as Lance's decoder does (its encoder can
	// close a chunk inside a run); runs short of n are corrupt.
	if got, err := DecodeRLE[uint16](nil, vals, []byte{2, 1, 3}, 5); err != nil || len(got) != 5 || got[4] != 3 {
		t.Fatalf("rle cut at n: %v, %v", got, err)
	}
	if _, err := DecodeRLE[uint16](nil, vals, []byte{2, 1, 3}, 7); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("rle underrun: %v", err)
	}
	// Two 32-bit values 0x04030201 and 0x08070605 split into byte streams.
	split := []byte{1, 5, 2, 6, 3, 7, 4, 8}
	out, err := DecodeByteStreamSplit(nil, split, 4, 2)
	if err != nil || !bytes.Equal(out, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("bss = %v, %v", out, err)
	}
}

func TestFSSTDecodeErrors(t *testing.T) {
	if _, err := NewFSSTDecoder([]byte("short")); !errors.Is(err, ErrCorrupt) {
		t.Fatal(err)
	}
	// switch=1, 1 symbol "ab" (len 2).
	tab := make([]byte, 8+9)
	binary.LittleEndian.PutUint64(tab, 0x46535354<<32|1<<24|1)
	tab[8], tab[9] = 'a', 'b'
	tab[16] = 2
	d, err := NewFSSTDecoder(tab)
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Decode(nil, []byte{0, 255, 'x', 0})
	if err != nil || string(out) != "abxab" {
		t.Fatalf("decode = %q, %v", out, err)
	}
	if _, err := d.Decode(nil, []byte{1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("code beyond table: %v", err)
	}
	if _, err := d.Decode(nil, []byte{255}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("dangling escape: %v", err)
	}
}
