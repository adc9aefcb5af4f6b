package lancefile

import (
	"bytes"
	"context"
	"os"
	"testing"
)

func readEverything(f *File) {
	ctx := context.Background()
	if rec, err := f.ReadAll(ctx, nil); err == nil {
		rec.Release()
	}
	if f.NumRows() > 0 {
		if rec, err := f.Take(ctx, []uint64{f.NumRows() - 1, 0}, nil); err == nil {
			rec.Release()
		}
	}
}

func FuzzOpen(f *testing.F) {
	for _, n := range []string{"tiny21.lance", "tiny20.lance"} {
		d, err := os.ReadFile("testdata/" + n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d)
		f.Add(d[len(d)-200:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lf, err := Open(bytes.NewReader(data), int64(len(data)), "fuzz.lance")
		if err != nil {
			return
		}
		if lf.NumRows() > 1<<16 {
			return
		}
		readEverything(lf)
	})
}

// FuzzDecodePage keeps the metadata of a real file and replaces the start
// of its data region (page buffers) with fuzzed bytes.
func FuzzDecodePage(f *testing.F) {
	bases := map[bool][]byte{}
	for _, n := range []string{"tiny21.lance", "tiny20.lance"} {
		d, err := os.ReadFile("testdata/" + n)
		if err != nil {
			f.Fatal(err)
		}
		bases[n == "tiny20.lance"] = d
	}
	f.Add([]byte{0, 1, 2, 3}, uint16(0), false)
	f.Add(bases[false][:512], uint16(64), false)
	f.Add(bases[true][:512], uint16(0), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint16(128), false)
	f.Fuzz(func(t *testing.T, patch []byte, at uint16, v20 bool) {
		base := bytes.Clone(bases[v20])
		lf, err := Open(bytes.NewReader(base), int64(len(base)), "fuzz.lance")
		if err != nil {
			t.Fatal(err)
		}
		dataEnd := int(lf.GlobalBuffers[0].Offset)
		start := int(at) % dataEnd
		copy(base[start:dataEnd], patch)
		lf, err = Open(bytes.NewReader(base), int64(len(base)), "fuzz.lance")
		if err != nil {
			t.Fatal(err) // metadata untouched: must still open
		}
		readEverything(lf)
	})
}
