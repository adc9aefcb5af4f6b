package codec

import (
	"encoding/binary"
	"sync"

	"github.com/klauspost/compress/zstd"
)

var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
})

// AppendZstd appends src in lance's General ZSTD frame: the uncompressed
// size as u64 LE, then one zstd frame.
func AppendZstd(dst, src []byte) ([]byte, error) {
	enc, err := zstdEncoder()
	if err != nil {
		return dst, err
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(src)))
	return enc.EncodeAll(src, dst), nil
}
