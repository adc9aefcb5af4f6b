package codec

import "testing"

func TestZstdRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 40001} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i % 13)
		}
		enc, err := AppendZstd(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decompress(SchemeZSTD, enc)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if string(got) != string(src) {
			t.Fatalf("%d bytes: round trip differs", n)
		}
	}
}
