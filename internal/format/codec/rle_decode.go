package codec

import "fmt"

// DecodeRLE expands run values (T-bit words) and u8 run lengths into n
// values appended to dst.
func DecodeRLE[T Word](dst []T, values, runLengths []byte, n int) ([]T, error) {
	vals := words[T](values)
	if len(vals) < len(runLengths) {
		return dst, fmt.Errorf("%w: rle has %d run lengths but %d values", ErrCorrupt, len(runLengths), len(vals))
	}
	start := len(dst)
	for i, l := range runLengths {
		if len(dst)-start+int(l) > n {
			return dst, fmt.Errorf("%w: rle runs exceed %d values", ErrCorrupt, n)
		}
		v := vals[i]
		for k := 0; k < int(l); k++ {
			dst = append(dst, v)
		}
	}
	if len(dst)-start != n {
		return dst, fmt.Errorf("%w: rle runs hold %d values, want %d", ErrCorrupt, len(dst)-start, n)
	}
	return dst, nil
}
