// Package lancewrite writes Lance data files (the `.lance` files under a
// table's data/ directory) in file format 2.1 (footer 2.1, lance 8.0.0's
// default) and 2.0 (footer 0.3), and copies encoded pages between files
// without decoding them (column-wise merge and row-wise concatenation).
//
// What it owns:
//   - NewWriter/Write/Close: arrow-go record batches in, a data file out,
//     streamed to an io.Writer. Pages are flushed per column once their
//     buffered values exceed Options.PageBytes, so memory is bounded by
//     page size × columns, never by the file.
//   - FieldsFromArrow: Lance field list (pre-order, ids) for an Arrow schema.
//   - CopyColumns / ConcatRows: page-level copy of existing files. They keep
//     every page encoding byte for byte and only relocate buffers, shift
//     priorities and write a new schema and footer. Anything that cannot be
//     proven safe returns ErrCopyUnsupported so callers can re-encode.
//
// Invariants:
//   - Every buffer starts at a multiple of 64 bytes (the 2.1 reader asserts
//     it) and is padded with 0x48 like lance's writer.
//   - Global buffer 0 is the FileDescriptor (the table schema with its field
//     ids and the row count); there are no other global buffers.
//   - 2.1: one column per leaf field in pre-order; 2.0: one per field.
//     Result.Fields/ColumnIndices are what DataFile.fields/column_indices
//     must hold.
//
// Imports: internal/format/pb/*, internal/format/codec (encoders) and
// internal/format/lancefile (container parsing for the copy path); no I/O
// beyond the io.Writer / io.ReaderAt it is handed.
package lancewrite
