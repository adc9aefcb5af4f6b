// Package codec holds the compression codecs shared by the Lance data-file
// reader and writer: FastLanes bit packing (kernels generated per word and
// bit width), FSST, RLE, byte-stream-split and the general LZ4/ZSTD frames
// with Lance's size prefixes.
//
// File ownership: *_decode*.go is the read side (used by
// internal/format/lancefile), *_encode*.go the write side (used by
// internal/format/lancewrite).
//
// Invariants: codecs work on byte slices only — no I/O, no knowledge of
// pages or files; every decode error wraps ErrCorrupt and never panics on
// malformed input. Multi-byte values are little-endian; the decoders assume
// a little-endian host (amd64, arm64) and reinterpret byte slices as word
// slices.
//
// Imports: nothing internal; github.com/pierrec/lz4/v4 and
// github.com/klauspost/compress/zstd.
package codec
