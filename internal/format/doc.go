// Package format is lanced's model of the Lance table format: manifest
// naming, the manifest file layout, schema helpers, feature flags, deletion
// files, transactions and layout statistics.
//
// It owns no I/O: decoders take []byte (or io.ReaderAt plus a size) and
// encoders return []byte; the engine moves the bytes through internal/store.
// It imports only the standard library, the protobuf runtime, the generated
// Lance protos under internal/format/pb, arrow-go (Arrow deletion files),
// roaring (bitmap deletion files) and google/uuid (transaction ids). It
// imports nothing else from lanced.
//
// Files by concept: naming.go (manifest keys and schemes, VersionRef),
// manifest.go (the manifest file layout), features.go (feature flags),
// schema.go (field helpers, fragment-id and field-id high-water marks),
// deletion.go (deletion files), transaction.go (transactions, Lance's
// per-commit manifest fixes), layout_stats.go (the
// per-fragment column-layout statistics the repack planner uses), errors.go (sentinels).
//
// Invariants:
//   - Messages are edited, never rebuilt from lossy structs: decoding keeps
//     the protobuf messages (with their unknown fields) and the raw index
//     section bytes, so a decode/encode round trip carries everything we do
//     not interpret.
//   - Errors at this boundary start with "format: ", name the file when one
//     is known, and wrap a sentinel (ErrCorrupt, ErrNotManifest,
//     ErrUnsupportedFeature, ErrMixedNaming) for errors.Is.
//   - Nothing here panics on outside bytes; the fuzz targets check it.
//
// FORMAT.md lists every Lance field this package reads or writes.
package format
