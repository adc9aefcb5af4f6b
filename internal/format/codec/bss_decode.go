package codec

import "fmt"

// DecodeByteStreamSplit reverses byte-stream-split for n values of width
// bytes each: byte j of value i is at src[j*n+i]. The values are appended to
// dst as little-endian bytes.
func DecodeByteStreamSplit(dst, src []byte, width, n int) ([]byte, error) {
	if width <= 0 || len(src) < width*n {
		return dst, fmt.Errorf("%w: byte stream split of %d bytes for %d×%d", ErrCorrupt, len(src), n, width)
	}
	start := len(dst)
	dst = append(dst, make([]byte, width*n)...)
	out := dst[start:]
	for j := 0; j < width; j++ {
		stream := src[j*n : (j+1)*n]
		for i, b := range stream {
			out[i*width+j] = b
		}
	}
	return dst, nil
}
