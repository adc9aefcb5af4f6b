package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Scheme is a general-purpose compression scheme (Lance CompressionScheme).
type Scheme int32

const (
	SchemeLZ4  Scheme = 1
	SchemeZSTD Scheme = 2
)

// maxDecompressed bounds the size a frame may claim to expand to.
const maxDecompressed = 1 << 31

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDecompressed))
})

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Decompress decodes one Lance general-compression frame:
// LZ4 = u32 LE uncompressed size + LZ4 block; ZSTD = u64 LE uncompressed
// size + zstd frame (a bare zstd frame is accepted too).
func Decompress(scheme Scheme, src []byte) ([]byte, error) {
	switch scheme {
	case SchemeLZ4:
		if len(src) < 4 {
			return nil, fmt.Errorf("%w: lz4 frame of %d bytes", ErrCorrupt, len(src))
		}
		size := binary.LittleEndian.Uint32(src)
		// An LZ4 block expands at most ~255×: refuse claims beyond that
		// before allocating.
		if uint64(size) > maxDecompressed || uint64(size) > 255*uint64(len(src))+64 {
			return nil, fmt.Errorf("%w: lz4 frame of %d bytes claims %d bytes", ErrCorrupt, len(src), size)
		}
		out := make([]byte, size)
		n, err := lz4.UncompressBlock(src[4:], out)
		if err != nil {
			return nil, fmt.Errorf("%w: lz4: %v", ErrCorrupt, err)
		}
		if n != int(size) {
			return nil, fmt.Errorf("%w: lz4 block expanded to %d bytes, header says %d", ErrCorrupt, n, size)
		}
		return out, nil
	case SchemeZSTD:
		d, err := zstdDecoder()
		if err != nil {
			return nil, err
		}
		var want int64 = -1
		frame := src
		if len(src) >= 12 && !bytes.HasPrefix(src, zstdMagic) && bytes.Equal(src[8:12], zstdMagic) {
			want = int64(binary.LittleEndian.Uint64(src))
			frame = src[8:]
		}
		if want > maxDecompressed {
			return nil, fmt.Errorf("%w: zstd frame claims %d bytes", ErrCorrupt, want)
		}
		var dst []byte
		if want >= 0 {
			dst = make([]byte, 0, min(want, 1<<24))
		}
		out, err := d.DecodeAll(frame, dst)
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if want >= 0 && int64(len(out)) != want {
			return nil, fmt.Errorf("%w: zstd frame expanded to %d bytes, header says %d", ErrCorrupt, len(out), want)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown general compression scheme %d", ErrCorrupt, scheme)
}
