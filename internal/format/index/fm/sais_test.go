package fm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveSA sorts the suffixes of text directly.
func naiveSA(text []byte) []int32 {
	sa := make([]int32, len(text))
	for i := range sa {
		sa[i] = int32(i)
	}
	slices.SortFunc(sa, func(a, b int32) int { return bytes.Compare(text[a:], text[b:]) })
	return sa
}

func TestSuffixArrayMatchesSort(t *testing.T) {
	texts := [][]byte{
		nil, []byte("a"), []byte("ab"), []byte("ba"), []byte("banana"), []byte("mississippi"),
		[]byte("aaaaaaaaaaaaaaaa"), []byte("abababababababab"), {0, 255, 0, 255, 0, 0, 255},
		[]byte("the quick brown fox\xffjumps over\xffthe lazy dog\xff\x00"),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		for _, k := range []int{2, 3, 5, 26, 256} {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.IntN(k))
			}
			texts = append(texts, b)
		}
	}
	// Long repetitive inputs recurse several levels.
	long := bytes.Repeat([]byte("abcabcabd"), 500)
	texts = append(texts, long, append(bytes.Repeat([]byte("xy"), 3000), 'x'))
	for _, text := range texts {
		got := make([]int32, len(text))
		suffixArray(text, got)
		if want := naiveSA(text); !slices.Equal(got, want) {
			t.Fatalf("text %q: suffix array %v, want %v", text, got, want)
		}
	}
}

func FuzzSuffixArray(f *testing.F) {
	f.Add([]byte("banana"))
	f.Add([]byte("abracadabra\xffabracadabra\xff\x00"))
	f.Fuzz(func(t *testing.T, text []byte) {
		if len(text) > 1<<14 {
			return
		}
		got := make([]int32, len(text))
		suffixArray(text, got)
		if want := naiveSA(text); !slices.Equal(got, want) {
			t.Fatalf("text %q: suffix array %v, want %v", text, got, want)
		}
	})
}
