package vector

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestCodeLayoutsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 31, 32, 33, 64, 100} {
		for _, b := range []int{1, 2, 4, 16} {
			rows := make([]byte, n*b)
			for i := range rows {
				rows[i] = byte(r.Uint32())
			}
			packed, back := make([]byte, len(rows)), make([]byte, len(rows))
			rqPack(packed, rows, n, b)
			rqUnpack(back, packed, n, b)
			if !bytes.Equal(back, rows) {
				t.Fatalf("rq n=%d b=%d: unpack(pack(x)) != x", n, b)
			}
			transpose(packed, rows, n, b)
			untranspose(back, packed, n, b)
			if !bytes.Equal(back, rows) {
				t.Fatalf("pq n=%d b=%d: untranspose(transpose(x)) != x", n, b)
			}
			if n > 1 && b > 1 && packed[1] != rows[b] {
				t.Fatalf("transpose: byte 0 of row 1 not at position 1")
			}
		}
	}
}
