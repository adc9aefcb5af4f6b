package codec

import (
	"encoding/binary"
	"testing"
)

func TestRLERoundTrip(t *testing.T) {
	var data []byte
	var want []uint32
	for run, v := range []uint32{7, 7, 9, 0xffffffff, 3} {
		for k := 0; k < 1+run*200; k++ {
			data = binary.LittleEndian.AppendUint32(data, v)
			want = append(want, v)
		}
	}
	vals, lens := AppendRLE(nil, nil, data, 4)
	if got := RLERuns(data, 4); got != len(lens) {
		t.Fatalf("RLERuns = %d, encoded %d runs", got, len(lens))
	}
	got, err := DecodeRLE[uint32](nil, vals, lens, len(want))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d = %d, want %d", i, got[i], want[i])
		}
	}
}
