package codec

import (
	"bytes"
	"fmt"
	"testing"
)

func fsstCorpus() [][]byte {
	var strs [][]byte
	words := []string{"lance", "table", "fragment", "compaction", "the ", "quick ", "brown ", "fox", "é", "\x00\xff"}
	for i := 0; i < 4000; i++ {
		var b bytes.Buffer
		for k := 0; k < i%17; k++ {
			b.WriteString(words[(i*7+k*3)%len(words)])
		}
		fmt.Fprintf(&b, "-%d", i)
		strs = append(strs, b.Bytes())
	}
	strs = append(strs, nil, []byte{255, 255, 0, 1})
	return strs
}

func TestFSSTRoundTrip(t *testing.T) {
	strs := fsstCorpus()
	enc := TrainFSST(strs)
	dec, err := NewFSSTDecoder(enc.Table())
	if err != nil {
		t.Fatal(err)
	}
	raw, packed := 0, 0
	for i, s := range strs {
		c := enc.AppendEncode(nil, s)
		raw += len(s)
		packed += len(c)
		got, err := dec.Decode(nil, c)
		if err != nil {
			t.Fatalf("string %d: %v", i, err)
		}
		if !bytes.Equal(got, s) {
			t.Fatalf("string %d: got %q, want %q", i, got, s)
		}
	}
	if packed*2 > raw {
		t.Errorf("FSST compressed %d bytes to %d; expected at least 2x on repetitive text", raw, packed)
	}
}

func FuzzFSSTEncode(f *testing.F) {
	f.Add([]byte("hello world hello world"), []byte("hello"))
	f.Add([]byte{0, 255, 254}, []byte{255})
	f.Fuzz(func(t *testing.T, train, s []byte) {
		enc := TrainFSST([][]byte{train, s})
		dec, err := NewFSSTDecoder(enc.Table())
		if err != nil {
			t.Fatal(err)
		}
		got, err := dec.Decode(nil, enc.AppendEncode(nil, s))
		if err != nil || !bytes.Equal(got, s) {
			t.Fatalf("round trip of %q: %q, %v", s, got, err)
		}
	})
}
