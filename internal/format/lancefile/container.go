package lancefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (or a context/io error) and names the file.
var (
	ErrCorrupt             = errors.New("format: corrupt lance file")
	ErrUnsupportedVersion  = errors.New("format: unsupported lance file version")
	ErrUnsupportedEncoding = errors.New("format: unsupported lance encoding")
	// ErrRowOutOfRange: a requested row is not in the file.
	ErrRowOutOfRange = errors.New("format: row out of range")
)

const (
	// FooterLen is the size of the fixed footer at the end of every file.
	FooterLen = 40
	// Magic ends every Lance file.
	Magic = "LANC"
	// maxMetadataBytes bounds the metadata tail we are willing to load.
	maxMetadataBytes = 1 << 30

	typeURLPageLayout21 = "lance.encodings21.PageLayout"
	typeURLArrayEnc20   = "lance.encodings.ArrayEncoding"
)

// Version is the (major, minor) pair from the footer.
type Version struct{ Major, Minor uint16 }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Format is the data storage version a file is written in.
type Format int

const (
	// Format20 is Lance file format 2.0 (footer 0.3 or 2.0).
	Format20 Format = 20
	// Format21 is Lance file format 2.1 (footer 2.1).
	Format21 Format = 21
)

func (f Format) String() string {
	switch f {
	case Format20:
		return "2.0"
	case Format21:
		return "2.1"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Buffer is an absolute (offset, size) range in the file.
type Buffer struct{ Offset, Size uint64 }

// Footer is the fixed 40-byte trailer.
type Footer struct {
	ColumnMetaStart        uint64
	ColumnMetaOffsetsStart uint64
	GlobalBuffOffsetsStart uint64
	NumGlobalBuffers       uint32
	NumColumns             uint32
	Version                Version
}

// Column is one physical column of the file.
type Column struct {
	Index int
	// Meta is the raw column metadata: pages with buffer offsets/sizes and
	// their encodings as serialized google.protobuf.Any.
	Meta *file2pb.ColumnMetadata
	// FieldID is the id of the Lance field this column stores (a leaf field in
	// 2.1; any field incl. struct headers and list offsets in 2.0).
	FieldID int32
	// Rows is the sum of page lengths.
	Rows uint64
}

// File is an opened Lance data file. It is safe for concurrent readers.
type File struct {
	name   string
	r      io.ReaderAt
	size   int64
	Footer Footer
	Format Format
	// GlobalBuffers holds every global buffer location; index 0 is the schema.
	GlobalBuffers []Buffer
	Descriptor    *filepb.FileDescriptor
	Columns       []*Column
	// ColumnMetaRaw holds the serialized column metadata, byte-exact.
	ColumnMetaRaw [][]byte

	fields    []*filepb.Field
	byID      map[int32]*filepb.Field
	colByID   map[int32]int
	children  map[int32][]*filepb.Field
	numRows   uint64
	topFields []*filepb.Field
}

// Name is the name the file was opened with (used in errors).
func (f *File) Name() string { return f.name }

// Size is the file size in bytes.
func (f *File) Size() int64 { return f.size }

// NumRows is FileDescriptor.length.
func (f *File) NumRows() uint64 { return f.numRows }

// Fields is the flat pre-order field list of the file schema.
func (f *File) Fields() []*filepb.Field { return f.fields }

// ReaderAt returns the underlying reader (for page copiers).
func (f *File) ReaderAt() io.ReaderAt { return f.r }

// ColumnForField returns the physical column index storing field id, or -1.
func (f *File) ColumnForField(id int32) int {
	if c, ok := f.colByID[id]; ok {
		return c
	}
	return -1
}

func (f *File) errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", sentinel, f.name, fmt.Sprintf(format, args...))
}

// ReadBuffer reads an absolute byte range of the file, bounds-checked.
func (f *File) ReadBuffer(b Buffer) ([]byte, error) {
	if b.Offset > uint64(f.size) || b.Size > uint64(f.size)-b.Offset {
		return nil, f.errf(ErrCorrupt, "buffer [%d,+%d) beyond end of file (%d bytes)", b.Offset, b.Size, f.size)
	}
	out := make([]byte, b.Size)
	if b.Size == 0 {
		return out, nil
	}
	n, err := f.r.ReadAt(out, int64(b.Offset))
	if n == len(out) {
		return out, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("%s: read [%d,+%d): %w", f.name, b.Offset, b.Size, err)
}

// ParseFooter decodes the 40-byte footer.
func ParseFooter(b []byte) (Footer, error) {
	if len(b) != FooterLen {
		return Footer{}, fmt.Errorf("%w: footer is %d bytes, want %d", ErrCorrupt, len(b), FooterLen)
	}
	if string(b[36:40]) != Magic {
		return Footer{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[36:40])
	}
	le := binary.LittleEndian
	return Footer{
		ColumnMetaStart:        le.Uint64(b[0:]),
		ColumnMetaOffsetsStart: le.Uint64(b[8:]),
		GlobalBuffOffsetsStart: le.Uint64(b[16:]),
		NumGlobalBuffers:       le.Uint32(b[24:]),
		NumColumns:             le.Uint32(b[28:]),
		Version:                Version{le.Uint16(b[32:]), le.Uint16(b[34:])},
	}, nil
}

// FormatOf maps a footer version to a Format, refusing what we do not know.
func FormatOf(v Version) (Format, error) {
	switch v {
	case Version{0, 3}, Version{2, 0}:
		return Format20, nil
	case Version{2, 1}:
		return Format21, nil
	}
	return 0, fmt.Errorf("%w %s (supported: 2.0 as 0.3/2.0, 2.1)", ErrUnsupportedVersion, v)
}

// Open parses the container of a Lance file: footer, offset tables, schema
// and column metadata. name is used in errors only.
func Open(r io.ReaderAt, size int64, name string) (*File, error) {
	f := &File{name: name, r: r, size: size}
	if size < FooterLen {
		return nil, f.errf(ErrCorrupt, "file is %d bytes, shorter than the %d-byte footer", size, FooterLen)
	}
	fb, err := f.ReadBuffer(Buffer{uint64(size - FooterLen), FooterLen})
	if err != nil {
		return nil, err
	}
	ft, err := ParseFooter(fb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f.Footer = ft
	if f.Format, err = FormatOf(ft.Version); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	end := uint64(size - FooterLen)
	if ft.NumGlobalBuffers == 0 {
		return nil, f.errf(ErrCorrupt, "no global buffers (schema expected in global buffer 0)")
	}
	if ft.GlobalBuffOffsetsStart > end || uint64(ft.NumGlobalBuffers)*16 > end-ft.GlobalBuffOffsetsStart {
		return nil, f.errf(ErrCorrupt, "global buffer table [%d,+%d×16) out of range", ft.GlobalBuffOffsetsStart, ft.NumGlobalBuffers)
	}
	if ft.ColumnMetaOffsetsStart > end || uint64(ft.NumColumns)*16 > end-ft.ColumnMetaOffsetsStart {
		return nil, f.errf(ErrCorrupt, "column metadata table [%d,+%d×16) out of range", ft.ColumnMetaOffsetsStart, ft.NumColumns)
	}
	gbo, err := f.ReadBuffer(Buffer{ft.GlobalBuffOffsetsStart, uint64(ft.NumGlobalBuffers) * 16})
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	for i := 0; i < int(ft.NumGlobalBuffers); i++ {
		b := Buffer{le.Uint64(gbo[16*i:]), le.Uint64(gbo[16*i+8:])}
		if b.Offset > end || b.Size > end-b.Offset {
			return nil, f.errf(ErrCorrupt, "global buffer %d [%d,+%d) out of range", i, b.Offset, b.Size)
		}
		f.GlobalBuffers = append(f.GlobalBuffers, b)
	}
	// Everything from global buffer 0 to the footer is metadata; read it at once.
	gb0 := f.GlobalBuffers[0]
	metaStart := gb0.Offset
	if ft.ColumnMetaStart < metaStart {
		metaStart = ft.ColumnMetaStart
	}
	if end-metaStart > maxMetadataBytes {
		return nil, f.errf(ErrCorrupt, "metadata region of %d bytes is too large", end-metaStart)
	}
	meta, err := f.ReadBuffer(Buffer{metaStart, end - metaStart})
	if err != nil {
		return nil, err
	}
	slice := func(b Buffer, what string) ([]byte, error) {
		if b.Offset < metaStart || b.Offset-metaStart > uint64(len(meta)) || b.Size > uint64(len(meta))-(b.Offset-metaStart) {
			return nil, f.errf(ErrCorrupt, "%s [%d,+%d) outside the metadata region", what, b.Offset, b.Size)
		}
		o := b.Offset - metaStart
		return meta[o : o+b.Size], nil
	}
	descBytes, err := slice(gb0, "global buffer 0")
	if err != nil {
		return nil, err
	}
	f.Descriptor = &filepb.FileDescriptor{}
	if err := proto.Unmarshal(descBytes, f.Descriptor); err != nil {
		return nil, f.errf(ErrCorrupt, "decode file descriptor: %v", err)
	}
	f.numRows = f.Descriptor.GetLength()
	f.fields = f.Descriptor.GetSchema().GetFields()

	cmo, err := slice(Buffer{ft.ColumnMetaOffsetsStart, uint64(ft.NumColumns) * 16}, "column metadata table")
	if err != nil {
		return nil, err
	}
	for i := 0; i < int(ft.NumColumns); i++ {
		b := Buffer{le.Uint64(cmo[16*i:]), le.Uint64(cmo[16*i+8:])}
		raw, err := slice(b, fmt.Sprintf("column %d metadata", i))
		if err != nil {
			return nil, err
		}
		cm := &file2pb.ColumnMetadata{}
		if err := proto.Unmarshal(raw, cm); err != nil {
			return nil, f.errf(ErrCorrupt, "column %d: decode metadata: %v", i, err)
		}
		col := &Column{Index: i, Meta: cm, FieldID: -1}
		for pi, p := range cm.GetPages() {
			if len(p.GetBufferOffsets()) != len(p.GetBufferSizes()) {
				return nil, f.errf(ErrCorrupt, "column %d page %d: %d buffer offsets but %d sizes", i, pi, len(p.GetBufferOffsets()), len(p.GetBufferSizes()))
			}
			for bi, off := range p.GetBufferOffsets() {
				sz := p.GetBufferSizes()[bi]
				if off > end || sz > end-off {
					return nil, f.errf(ErrCorrupt, "column %d page %d buffer %d [%d,+%d) out of range", i, pi, bi, off, sz)
				}
			}
			col.Rows += p.GetLength()
		}
		if len(cm.GetBufferOffsets()) != len(cm.GetBufferSizes()) {
			return nil, f.errf(ErrCorrupt, "column %d: %d column buffer offsets but %d sizes", i, len(cm.GetBufferOffsets()), len(cm.GetBufferSizes()))
		}
		f.Columns = append(f.Columns, col)
		f.ColumnMetaRaw = append(f.ColumnMetaRaw, raw)
	}
	if err := f.indexFields(); err != nil {
		return nil, err
	}
	return f, nil
}

// indexFields builds the field tree and the column↔field mapping.
func (f *File) indexFields() error {
	f.byID = make(map[int32]*filepb.Field, len(f.fields))
	f.children = make(map[int32][]*filepb.Field)
	f.colByID = make(map[int32]int)
	for _, fl := range f.fields {
		if _, dup := f.byID[fl.GetId()]; dup {
			return f.errf(ErrCorrupt, "duplicate field id %d", fl.GetId())
		}
		f.byID[fl.GetId()] = fl
		if fl.GetParentId() < 0 {
			f.topFields = append(f.topFields, fl)
		} else {
			if _, ok := f.byID[fl.GetParentId()]; !ok {
				return f.errf(ErrCorrupt, "field %d (%q) has unknown or later parent %d", fl.GetId(), fl.GetName(), fl.GetParentId())
			}
			f.children[fl.GetParentId()] = append(f.children[fl.GetParentId()], fl)
		}
	}
	var ids []int32
	if f.Format == Format20 {
		for _, fl := range f.fields {
			ids = append(ids, fl.GetId())
		}
	} else {
		var walk func(fl *filepb.Field)
		walk = func(fl *filepb.Field) {
			kids := f.children[fl.GetId()]
			if len(kids) == 0 || isPackedStruct(fl) || isBlob(fl) {
				ids = append(ids, fl.GetId())
				return
			}
			for _, k := range kids {
				walk(k)
			}
		}
		for _, fl := range f.topFields {
			walk(fl)
		}
	}
	if len(ids) != len(f.Columns) {
		return f.errf(ErrCorrupt, "schema implies %d columns, footer has %d", len(ids), len(f.Columns))
	}
	for i, id := range ids {
		f.Columns[i].FieldID = id
		f.colByID[id] = i
		if f.Columns[i].Rows != f.numRows && !(f.Format == Format20 && f.isListDescendant(id)) {
			return f.errf(ErrCorrupt, "column %d (field %d) has %d rows, file descriptor says %d", i, id, f.Columns[i].Rows, f.numRows)
		}
	}
	return nil
}

// isListDescendant reports whether a field lies below a list (2.0 item
// columns have item counts, not row counts).
func (f *File) isListDescendant(id int32) bool {
	for {
		fl := f.byID[id]
		if fl == nil || fl.GetParentId() < 0 {
			return false
		}
		p := f.byID[fl.GetParentId()]
		if p == nil {
			return false
		}
		if isListType(p.GetLogicalType()) {
			return true
		}
		id = p.GetId()
	}
}

func isListType(lt string) bool {
	return lt == "list" || lt == "large_list" || strings.HasPrefix(lt, "list.") || strings.HasPrefix(lt, "large_list.")
}

func isStructType(lt string) bool { return lt == "struct" }

func isPackedStruct(fl *filepb.Field) bool {
	if !isStructType(fl.GetLogicalType()) {
		return false
	}
	md := fl.GetMetadata()
	for _, k := range []string{"lance-encoding:packed", "packed"} {
		if v, ok := md[k]; ok && strings.EqualFold(string(v), "true") {
			return true
		}
	}
	return false
}

func isBlob(fl *filepb.Field) bool {
	md := fl.GetMetadata()
	v, ok := md["lance-encoding:blob"]
	return ok && strings.EqualFold(string(v), "true")
}

// PageEncoding unwraps a page's Encoding into its google.protobuf.Any.
func PageEncoding(e *file2pb.Encoding) (*anypb.Any, error) {
	d := e.GetDirect()
	if d == nil {
		switch {
		case e == nil:
			return nil, fmt.Errorf("%w: missing encoding", ErrCorrupt)
		case e.GetIndirect() != nil:
			return nil, fmt.Errorf("%w: deferred (indirect) encodings", ErrUnsupportedEncoding)
		default:
			return nil, fmt.Errorf("%w: empty encoding", ErrCorrupt)
		}
	}
	a := &anypb.Any{}
	if err := proto.Unmarshal(d.GetEncoding(), a); err != nil {
		return nil, fmt.Errorf("%w: decode encoding Any: %v", ErrCorrupt, err)
	}
	return a, nil
}

// anyTypeName returns the message name of an Any type URL, accepting both
// "/lance..." and "type.googleapis.com/lance..." forms.
func anyTypeName(a *anypb.Any) string {
	u := a.GetTypeUrl()
	if i := strings.LastIndexByte(u, '/'); i >= 0 {
		return u[i+1:]
	}
	return u
}

// PageBuffers returns the absolute buffer locations of a page.
func PageBuffers(p *file2pb.ColumnMetadata_Page) []Buffer {
	out := make([]Buffer, len(p.GetBufferOffsets()))
	for i := range out {
		out[i] = Buffer{p.GetBufferOffsets()[i], p.GetBufferSizes()[i]}
	}
	return out
}

// Field returns the file field with the given id.
func (f *File) Field(id int32) *filepb.Field { return f.byID[id] }

// Children returns the child fields of a field id in schema order.
func (f *File) Children(id int32) []*filepb.Field { return f.children[id] }

// TopFields returns the top-level fields.
func (f *File) TopFields() []*filepb.Field { return f.topFields }
