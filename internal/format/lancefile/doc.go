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
//   - the 2.1 structural page decoders (page21.go; miniblock21.go,
//     fullzip21.go with all-null, block21.go for levels/dictionaries,
//     values.go for mini-block and per-value compressions) and the
//     repetition/definition level assembly into arrow-go arrays (build.go);
//   - random access that reads only the chunks or rows a take needs
//     (take21.go: mini-block without repetition, full-zip fixed, full-zip
//     variable through its repetition index);
//   - the 2.0 page decoders (v20.go) and field readers (reader20.go);
//   - streaming batch reads with projection and random access by row
//     (reader.go: NewReader, ReadAll, Take);
//   - reading through a table's view of a file (bind.go: BindTableSchema
//     maps columns by DataFile fields/column_indices; ProjectFields).
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
