// Package lancefile reads Lance data files (the `*.lance` files under a
// table's data/ directory) in format 2.0 (footer version 0.3 or 2.0) and
// 2.1.
//
// It owns:
//   - the container: footer, column-metadata and global-buffer offset tables,
//     the FileDescriptor schema in global buffer 0, the column↔field mapping
//     (container.go, Open);
//   - the mapping from Lance logical types to Arrow types (schema.go,
//     ArrowSchema); field ids are kept in Arrow field metadata under
//     FieldIDKey ("lance:field_id");
//   - the 2.1 structural page decoders (mini-block, full-zip, all-null) and
//     the repetition/definition level assembly into arrow-go arrays
//     (page21.go, repdef.go, build.go);
//   - the 2.0 page decoders (v20.go);
//   - streaming batch reads with projection and random access by row
//     (reader.go: NewReader, Take).
//
// Invariants: no I/O beyond io.ReaderAt; a page is the unit of decoding, so
// memory is bounded by the batch plus the pages in flight per column; every
// error names the file (and column and page where known) and wraps a
// sentinel (ErrCorrupt, ErrUnsupportedVersion, ErrUnsupportedEncoding).
// Unknown or newer format features are refused, never guessed.
//
// Imports: only internal/format/codec and internal/format/pb/..., plus
// arrow-go and protobuf.
package lancefile
