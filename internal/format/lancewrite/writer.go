package lancewrite

import (
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// Version is a data file format version.
type Version uint8

const (
	// V2_1 is file format 2.1 (footer 2.1), lance 8.0.0's default. The zero
	// Options.Version means V2_1.
	V2_1 Version = 21
	// V2_0 is file format 2.0 (footer 0.3).
	V2_0 Version = 20
)

func (v Version) String() string {
	switch v {
	case V2_0:
		return "2.0"
	case V2_1, 0:
		return "2.1"
	}
	return fmt.Sprintf("unknown(%d)", uint8(v))
}

// DefaultPageBytes is lance's cache_bytes_per_column: a column's buffered
// (uncompressed) values become a page once they exceed it.
const DefaultPageBytes = 8 << 20

// Options configure a Writer.
type Options struct {
	Version Version
	// PageBytes bounds the buffered bytes per column (default DefaultPageBytes).
	PageBytes int
	// SchemaMetadata is written into the file's schema (optional).
	SchemaMetadata map[string][]byte
}

// Result describes a finished file: exactly what its DataFile entry must hold.
type Result struct {
	Size          int64
	NumRows       uint64
	Fields        []int32 // DataFile.fields
	ColumnIndices []int32 // DataFile.column_indices
	Major, Minor  uint32  // DataFile.file_major_version / file_minor_version
	// RangeBytes are the bytes the destination copied from the sources
	// itself (RangeWriter): they never passed through the encoder.
	RangeBytes int64
	// PagesCopied and BytesCopied count the source pages a page copy
	// (CopyColumns, ConcatRows) copied verbatim and their buffer bytes.
	PagesCopied int
	BytesCopied int64
}

// ErrClosed is returned when writing to a closed Writer.
var ErrClosed = errors.New("lancewrite: writer closed")

// Writer streams record batches into one Lance data file.
type Writer struct {
	c      *container
	opts   Options
	fields []*filepb.Field
	roots  []*node
	leaves [][]*leaf // per top-level field, its leaf columns (2.1)
	all    []*leaf   // every leaf, in column order
	cols   []*file2pb.ColumnMetadata
	w20    *writer20
	rows   uint64
	closed bool
	err    error
}

// NewWriter starts a data file on w. fields are the Lance fields (with ids,
// pre-order, parents before children) of the data written, normally the
// table schema's fields for the columns this file holds.
func NewWriter(w io.Writer, fields []*filepb.Field, opts Options) (*Writer, error) {
	if opts.Version == 0 {
		opts.Version = V2_1
	}
	if opts.Version != V2_1 && opts.Version != V2_0 {
		return nil, fmt.Errorf("lancewrite: unsupported file version %s", opts.Version)
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = DefaultPageBytes
	}
	if opts.SchemaMetadata != nil {
		opts.SchemaMetadata = maps.Clone(opts.SchemaMetadata)
	}
	roots, err := buildTree(fields)
	if err != nil {
		return nil, err
	}
	if len(roots) == 0 {
		return nil, errors.New("lancewrite: no fields")
	}
	wr := &Writer{c: newContainer(w), opts: opts, fields: fields, roots: roots}
	if opts.Version == V2_0 {
		wr.w20 = newWriter20(wr.c, roots, opts.PageBytes)
		return wr, nil
	}
	for _, r := range roots {
		var ls []*leaf
		var walk func(path []*node)
		walk = func(path []*node) {
			n := path[len(path)-1]
			if n.kind == kindLeaf {
				l := newLeaf(append([]*node(nil), path...))
				n.col = len(wr.all)
				ls = append(ls, l)
				wr.all = append(wr.all, l)
				wr.cols = append(wr.cols, &file2pb.ColumnMetadata{Encoding: directEncoding(columnEncodingBytes)})
				return
			}
			for _, c := range n.children {
				walk(append(path, c))
			}
		}
		walk([]*node{r})
		wr.leaves = append(wr.leaves, ls)
	}
	return wr, nil
}

// Write appends the rows of rec. Its columns must match the top-level
// fields in order and type.
func (w *Writer) Write(rec arrow.Record) error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if int(rec.NumCols()) != len(w.roots) {
		return fmt.Errorf("%w: record has %d columns, file has %d top-level fields", ErrTypeMismatch, rec.NumCols(), len(w.roots))
	}
	for i, r := range w.roots {
		if err := checkType(r, rec.Column(i).DataType()); err != nil {
			return err
		}
	}
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	// slice big records so no column buffers much more than PageBytes
	var size int64
	for i := 0; i < int(rec.NumCols()); i++ {
		size += dataBytes(rec.Column(i).Data())
	}
	step := n
	if size > int64(w.opts.PageBytes)/2 {
		step = max(1, int(int64(n)*int64(w.opts.PageBytes)/(2*size)))
	}
	for s := 0; s < n; s += step {
		part := rec
		if s != 0 || step < n {
			part = rec.NewSlice(int64(s), int64(min(n, s+step)))
		}
		err := w.writePart(part)
		if part != rec {
			part.Release()
		}
		if err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

func (w *Writer) writePart(rec arrow.Record) error {
	if w.w20 != nil {
		if err := w.w20.add(rec); err != nil {
			return err
		}
		w.rows += uint64(rec.NumRows())
		return w.c.err
	}
	for i, ls := range w.leaves {
		col := rec.Column(i)
		for _, l := range ls {
			if err := l.add(col); err != nil {
				return fmt.Errorf("column %q: %w", l.n.f.Name, err)
			}
			if l.size() >= w.opts.PageBytes {
				if err := w.flush(l); err != nil {
					return err
				}
			}
		}
	}
	w.rows += uint64(rec.NumRows())
	return w.c.err
}

// flush encodes and writes the buffered rows of a leaf as one page.
func (w *Writer) flush(l *leaf) error {
	if l.rows == 0 {
		return nil
	}
	bufs, enc, err := l.encodePage()
	if err != nil {
		return err
	}
	cm := w.cols[l.n.col]
	cm.Pages = append(cm.Pages, w.c.page(bufs, l.rows, l.written, enc))
	l.written += l.rows
	l.reset()
	return w.c.err
}

// AddGlobalBuffer writes b as the next global buffer (at the current
// position, 64-byte aligned, like lance's FileWriter::add_global_buffer) and
// returns its index: 1 for the first (global buffer 0 is the schema, written
// by Close). Lance index files name such buffers in their schema metadata
// (e.g. "lance:ivf" = "1"), so the caller puts the index into
// Options.SchemaMetadata before Close.
func (w *Writer) AddGlobalBuffer(b []byte) (int, error) {
	if w.closed {
		return 0, ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	off := w.c.buffer(b)
	if w.c.err != nil {
		return 0, w.c.err
	}
	w.c.extra = append(w.c.extra, [2]uint64{off, uint64(len(b))})
	return len(w.c.extra), nil
}

// SetSchemaMetadata sets one schema metadata entry written by Close.
func (w *Writer) SetSchemaMetadata(key string, value []byte) {
	if w.opts.SchemaMetadata == nil {
		w.opts.SchemaMetadata = map[string][]byte{}
	}
	w.opts.SchemaMetadata[key] = value
}

// Close flushes the remaining pages and writes the schema, column metadata
// and footer. It does not close the underlying io.Writer.
func (w *Writer) Close() (Result, error) {
	if w.closed {
		return Result{}, ErrClosed
	}
	w.closed = true
	if w.err != nil {
		return Result{}, w.err
	}
	res := Result{NumRows: w.rows}
	major, minor := uint16(2), uint16(1)
	cols := w.cols
	if w.w20 != nil {
		var err error
		if cols, err = w.w20.finish(); err != nil {
			return Result{}, err
		}
		major, minor = 0, 3
		res.Major, res.Minor = 2, 0
		for i, f := range w.fields {
			res.Fields = append(res.Fields, f.Id)
			res.ColumnIndices = append(res.ColumnIndices, int32(i))
		}
	} else {
		for _, l := range w.all {
			if err := w.flush(l); err != nil {
				return Result{}, err
			}
			if l.written != w.rows {
				return Result{}, fmt.Errorf("lancewrite: internal: column %q has %d rows, file %d", l.n.f.Name, l.written, w.rows)
			}
		}
		res.Major, res.Minor = 2, 1
		for i, l := range w.all {
			res.Fields = append(res.Fields, l.n.f.Id)
			res.ColumnIndices = append(res.ColumnIndices, int32(i))
		}
	}
	if err := w.c.finish(w.fields, w.opts.SchemaMetadata, w.rows, cols, major, minor); err != nil {
		return Result{}, err
	}
	res.Size = w.c.pos
	return res, nil
}

// encodePage encodes the buffered rows as one 2.1 page: its buffers and
// its encoding (Any of the PageLayout).
func (l *leaf) encodePage() ([][]byte, []byte, error) {
	bufs, layout, err := l.encodePage21()
	if err != nil {
		return nil, nil, fmt.Errorf("column %q: %w", l.n.f.Name, err)
	}
	lb, err := marshalOpts.Marshal(layout)
	if err != nil {
		return nil, nil, fmt.Errorf("lancewrite: marshal page layout: %w", err)
	}
	return bufs, mustAny(pageLayoutURL, lb), nil
}
