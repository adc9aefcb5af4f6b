package codec

import "fmt"

// DecodeRLE expands run values (T-bit words) and u8 run lengths into n
// values appended to dst. A chunk's runs may cover more than n values:
// Lance's encoder closes a non-last mini-block chunk at a power-of-two
// value count that can fall inside a run, and its decoder keeps the first
// n values (decode_generic in
// https://github.com/lancedb/lance/blob/main/rust/lance-encoding/src/encodings/physical/rle.rs),
// so this does the same. Runs covering fewer than n values are corrupt.
func DecodeRLE[T Word](dst []T, values, runLengths []byte, n int) ([]T, error) {
	vals := words[T](values)
	if len(vals) < len(runLengths) {
		return dst, fmt.Errorf("%w: rle has %d run lengths but %d values", ErrCorrupt, len(runLengths), len(vals))
	}
	start := len(dst)
	for i, l := range runLengths {
		run := min(int(l), n-(len(dst)-start))
		v := vals[i]
		for k := 0; k < run; k++ {
			dst = append(dst, v)
		}
		if len(dst)-start == n {
			break
		}
	}
	if len(dst)-start != n {
		return dst, fmt.Errorf("%w: rle runs hold %d values, want %d", ErrCorrupt, len(dst)-start, n)
	}
	return dst, nil
}
