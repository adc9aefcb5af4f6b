package lancewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// ErrCopyUnsupported means the inputs cannot be copied page by page safely
// (blob pages, mixed file versions, extra global buffers, column buffers,
// missing columns, schema mismatches, ...). Callers fall back to decoding
// and re-encoding. Missing or corrupt inputs are ordinary errors instead.
var ErrCopyUnsupported = errors.New("lancewrite: page copy unsupported")

// CopySource is one existing data file: how to read it and its DataFile
// entry, whose fields/column_indices map field ids to physical columns.
type CopySource struct {
	R    io.ReaderAt
	Size int64
	Name string // for errors
	File *tablepb.DataFile
}

// copyBufSize bounds the memory of a copy: page buffers stream through it.
const copyBufSize = 1 << 20

type openSource struct {
	CopySource
	f     *lancefile.File
	byID  map[int32]int // field id -> physical column, from the DataFile entry
	start uint64        // first output row of this source (row-wise)
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCopyUnsupported, fmt.Sprintf(format, args...))
}

// openSourceWorkers bounds the sources openSources reads at once: each
// open is a few small reads (footer, metadata) and a decode, so a few at a
// time hide the reads' latency.
const openSourceWorkers = 8

func openSources(srcs []CopySource) ([]*openSource, error) {
	if len(srcs) == 0 {
		return nil, errors.New("lancewrite: copy: no sources")
	}
	out := make([]*openSource, len(srcs))
	errs := make([]error, len(srcs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(openSourceWorkers, len(srcs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(srcs); i = int(next.Add(1) - 1) {
				out[i], errs[i] = openSource1(srcs[i], i)
				if errs[i] != nil {
					next.Store(int64(len(srcs))) // stop at the first failure seen
				}
			}
		}()
	}
	wg.Wait()
	// the first failing source's error, as a sequential open would report
	for i := range srcs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if out[i] == nil {
			continue // not opened: a source before it failed
		}
		if v := out[i].f.Footer.Version; v != out[0].f.Footer.Version {
			return nil, unsupported("%s is version %s, %s is %s", out[i].Name, v, out[0].Name, out[0].f.Footer.Version)
		}
	}
	return out, nil
}

// openSource1 opens source i and checks it can be copied from.
func openSource1(s CopySource, i int) (*openSource, error) {
	if s.R == nil || s.File == nil {
		return nil, fmt.Errorf("lancewrite: copy: source %d (%s) has no reader or DataFile", i, s.Name)
	}
	f, err := lancefile.Open(s.R, s.Size, s.Name)
	if err != nil {
		if errors.Is(err, lancefile.ErrUnsupportedVersion) {
			return nil, fmt.Errorf("%w: %w", ErrCopyUnsupported, err)
		}
		return nil, fmt.Errorf("lancewrite: copy: open %s: %w", s.Name, err)
	}
	o := &openSource{CopySource: s, f: f, byID: map[int32]int{}}
	df := s.File
	if len(df.Fields) != len(df.ColumnIndices) {
		return nil, fmt.Errorf("lancewrite: copy: %s: DataFile has %d fields but %d column indices", s.Name, len(df.Fields), len(df.ColumnIndices))
	}
	for k, id := range df.Fields {
		ci := df.ColumnIndices[k]
		if ci < 0 {
			continue // field without a column (e.g. a struct in 2.1)
		}
		if int(ci) >= len(f.Columns) {
			return nil, fmt.Errorf("lancewrite: copy: %s: field %d maps to column %d of %d", s.Name, id, ci, len(f.Columns))
		}
		o.byID[id] = int(ci)
	}
	if f.Footer.NumGlobalBuffers != 1 {
		return nil, unsupported("%s has %d global buffers", s.Name, f.Footer.NumGlobalBuffers)
	}
	for _, fl := range f.Fields() {
		if v, ok := fl.GetMetadata()["lance-encoding:blob"]; ok && strings.EqualFold(string(v), "true") {
			return nil, unsupported("%s: blob field %q", s.Name, fl.GetName())
		}
	}
	for _, c := range f.Columns {
		if len(c.Meta.GetBufferOffsets()) > 0 {
			return nil, unsupported("%s: column %d has column buffers", s.Name, c.Index)
		}
		for pi, p := range c.Meta.GetPages() {
			if err := checkPage(f, p); err != nil {
				return nil, fmt.Errorf("%s column %d page %d: %w", s.Name, c.Index, pi, err)
			}
		}
	}
	return o, nil
}

// checkPage refuses pages a verbatim copy could break: blob pages (they hold
// absolute file positions) and encodings of another message type.
func checkPage(f *lancefile.File, p *file2pb.ColumnMetadata_Page) error {
	a, err := lancefile.PageEncoding(p.GetEncoding())
	if err != nil {
		if errors.Is(err, lancefile.ErrUnsupportedEncoding) {
			return fmt.Errorf("%w: %w", ErrCopyUnsupported, err)
		}
		return err
	}
	name := a.GetTypeUrl()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if f.Format == lancefile.Format20 {
		if name != "lance.encodings.ArrayEncoding" {
			return unsupported("page encoding %q in a 2.0 file", a.GetTypeUrl())
		}
		return nil
	}
	if name != "lance.encodings21.PageLayout" {
		return unsupported("page encoding %q in a 2.1 file", a.GetTypeUrl())
	}
	pl, err := layoutOf(a)
	if err != nil {
		return err
	}
	if pl.GetBlobLayout() != nil {
		return unsupported("blob page")
	}
	if pl.GetLayout() == nil {
		return unsupported("page layout of an unknown kind")
	}
	return nil
}

// outColumns lists the field ids that get a physical column, in order:
// leaves (and packed structs, blobs) for 2.1, every field for 2.0.
func outColumns(fields []*filepb.Field, v20 bool) ([]*filepb.Field, error) {
	if v20 {
		return fields, nil
	}
	children := map[int32][]*filepb.Field{}
	var tops []*filepb.Field
	for _, f := range fields {
		if f.GetParentId() < 0 {
			tops = append(tops, f)
		} else {
			children[f.GetParentId()] = append(children[f.GetParentId()], f)
		}
	}
	var out []*filepb.Field
	var walk func(f *filepb.Field)
	walk = func(f *filepb.Field) {
		kids := children[f.GetId()]
		md := f.GetMetadata()
		packed := strings.EqualFold(string(md["lance-encoding:packed"]), "true") || strings.EqualFold(string(md["packed"]), "true")
		if len(kids) == 0 || packed || strings.EqualFold(string(md["lance-encoding:blob"]), "true") {
			out = append(out, f)
			return
		}
		for _, k := range kids {
			walk(k)
		}
	}
	for _, t := range tops {
		walk(t)
	}
	return out, nil
}

// copier writes relocated pages into a new container.
type copier struct {
	ctx    context.Context
	c      *container
	buf    []byte
	cols   []*file2pb.ColumnMetadata
	pages  int
	copied int64
}

func newCopier(ctx context.Context, dst io.Writer) *copier {
	return &copier{ctx: ctx, c: newContainer(dst), buf: make([]byte, copyBufSize)}
}

// copyPage appends one source page, its buffers streamed and realigned.
func (cp *copier) copyPage(src *openSource, p *file2pb.ColumnMetadata_Page, priority uint64) (*file2pb.ColumnMetadata_Page, error) {
	np := proto.Clone(p).(*file2pb.ColumnMetadata_Page)
	np.Priority = priority
	for i, off := range p.GetBufferOffsets() {
		if err := cp.ctx.Err(); err != nil {
			return nil, err
		}
		size := p.GetBufferSizes()[i]
		cp.c.alignCopy(off, size)
		np.BufferOffsets[i] = uint64(cp.c.pos)
		if err := cp.c.copyRuns(src.R, src.Name, []byteRun{{off, size}}, cp.buf); err != nil {
			return nil, err
		}
		cp.copied += int64(size)
	}
	cp.pages++
	return np, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// CopyColumns merges files with the same row count column-wise: for every
// column of the output schema out (Lance fields, pre-order, the table's
// ids), the pages of the source column holding that field id — found
// through the source's DataFile.fields/column_indices, never by position —
// are copied verbatim with relocated buffers. The output gets a new schema
// (out) and footer. Every output column must come from exactly one source.
func CopyColumns(ctx context.Context, dst io.Writer, srcs []CopySource, out []*filepb.Field) (Result, error) {
	ss, err := openSources(srcs)
	if err != nil {
		return Result{}, err
	}
	v20 := ss[0].f.Format == lancefile.Format20
	if _, err := buildTree(out); err != nil {
		if errors.Is(err, ErrUnsupportedType) {
			return Result{}, fmt.Errorf("%w: %w", ErrCopyUnsupported, err)
		}
		return Result{}, err
	}
	cols, err := outColumns(out, v20)
	if err != nil {
		return Result{}, err
	}
	rows := ss[0].f.NumRows()
	for _, s := range ss[1:] {
		if s.f.NumRows() != rows {
			return Result{}, unsupported("%s has %d rows, %s has %d", s.Name, s.f.NumRows(), ss[0].Name, rows)
		}
	}
	cp := newCopier(ctx, dst)
	res := Result{NumRows: rows}
	for ci, fl := range cols {
		var from *openSource
		col := -1
		for _, s := range ss {
			if c, ok := s.byID[fl.GetId()]; ok {
				if from != nil {
					return Result{}, unsupported("field %d (%q) is in both %s and %s", fl.GetId(), fl.GetName(), from.Name, s.Name)
				}
				from, col = s, c
			}
		}
		if from == nil {
			return Result{}, unsupported("no source holds field %d (%q)", fl.GetId(), fl.GetName())
		}
		if sf := from.f.Field(fl.GetId()); sf != nil && sf.GetLogicalType() != fl.GetLogicalType() {
			return Result{}, unsupported("%s: field %d is %q in the file, %q in the output schema", from.Name, fl.GetId(), sf.GetLogicalType(), fl.GetLogicalType())
		}
		src := from.f.Columns[col].Meta
		cm := &file2pb.ColumnMetadata{Encoding: src.GetEncoding()}
		for _, p := range src.GetPages() {
			np, err := cp.copyPage(from, p, p.GetPriority())
			if err != nil {
				return Result{}, err
			}
			cm.Pages = append(cm.Pages, np)
		}
		cp.cols = append(cp.cols, cm)
		res.Fields = append(res.Fields, fl.GetId())
		res.ColumnIndices = append(res.ColumnIndices, int32(ci))
	}
	return cp.finish(ss[0], out, rows, res)
}

func (cp *copier) finish(first *openSource, fields []*filepb.Field, rows uint64, res Result) (Result, error) {
	return cp.finishWith(first, fields, rows, res, ConcatOptions{})
}

// finishWith writes opts.GlobalBuffers as global buffers 1.. and the tail,
// with opts.SchemaMetadata when set (else first's).
func (cp *copier) finishWith(first *openSource, fields []*filepb.Field, rows uint64, res Result, opts ConcatOptions) (Result, error) {
	v := first.f.Footer.Version
	var md map[string][]byte
	if s := first.f.Descriptor.GetSchema(); s != nil {
		md = s.GetMetadata()
	}
	if opts.SchemaMetadata != nil {
		md = opts.SchemaMetadata
	}
	for _, b := range opts.GlobalBuffers {
		off := cp.c.buffer(b)
		cp.c.extra = append(cp.c.extra, [2]uint64{off, uint64(len(b))})
	}
	if err := cp.c.finish(fields, md, rows, cp.cols, v.Major, v.Minor); err != nil {
		return Result{}, err
	}
	res.Size = cp.c.pos
	res.RangeBytes = cp.c.ranged
	res.PagesCopied, res.BytesCopied = cp.pages, cp.copied
	res.Major, res.Minor = 2, 1
	if first.f.Format == lancefile.Format20 {
		res.Minor = 0
	}
	return res, nil
}

// ConcatRows concatenates files row-wise: the output holds the rows of
// srcs[0], then srcs[1], ... Every source must have the same DataFile
// fields and column indices and the same schema; pages are copied verbatim
// with priorities shifted by the rows before them. The output schema is the
// first source's and its DataFile entry takes Result.Fields/ColumnIndices.
func ConcatRows(ctx context.Context, dst io.Writer, srcs ...CopySource) (Result, error) {
	return ConcatRowsWith(ctx, dst, ConcatOptions{}, srcs...)
}

// ConcatOptions are what ConcatRowsWith writes besides the sources' pages.
type ConcatOptions struct {
	// SchemaMetadata, when not nil, is the output's schema metadata
	// (else the first source's).
	SchemaMetadata map[string][]byte
	// GlobalBuffers are written as global buffers 1, 2, ... after the
	// pages (global buffer 0 is the schema), as lance's
	// FileWriter::add_global_buffer places them. Lance index files name
	// such buffers by position in their schema metadata.
	GlobalBuffers [][]byte
}

// ConcatRowsWith is ConcatRows with the output's schema metadata and
// global buffers given: the pieces of a file written in parts (each a
// Lance file of the same schema) become the whole file, whose metadata
// describes all the rows.
func ConcatRowsWith(ctx context.Context, dst io.Writer, opts ConcatOptions, srcs ...CopySource) (Result, error) {
	ss, err := openSources(srcs)
	if err != nil {
		return Result{}, err
	}
	first := ss[0]
	fields := first.f.Fields()
	for _, s := range ss[1:] {
		if !equalInts(s.File.Fields, first.File.Fields) || !equalInts(s.File.ColumnIndices, first.File.ColumnIndices) {
			return Result{}, unsupported("%s and %s hold different fields or column orders", first.Name, s.Name)
		}
		if len(s.f.Fields()) != len(fields) {
			return Result{}, unsupported("%s and %s have different schemas", first.Name, s.Name)
		}
		for i, f := range s.f.Fields() {
			g := fields[i]
			if f.GetId() != g.GetId() || f.GetParentId() != g.GetParentId() || f.GetLogicalType() != g.GetLogicalType() {
				return Result{}, unsupported("%s and %s have different schemas (field %d)", first.Name, s.Name, f.GetId())
			}
		}
		if len(s.f.Columns) != len(first.f.Columns) {
			return Result{}, unsupported("%s and %s have different column counts", first.Name, s.Name)
		}
	}
	var rows uint64
	for _, s := range ss {
		s.start = rows
		rows += s.f.NumRows()
	}
	v20 := first.f.Format == lancefile.Format20
	cp := newCopier(ctx, dst)
	for c := range first.f.Columns {
		enc := first.f.Columns[c].Meta.GetEncoding()
		cm := &file2pb.ColumnMetadata{Encoding: enc}
		// 2.0 struct headers: one page spanning the whole file (lance's rule)
		fl := first.f.Field(first.f.Columns[c].FieldID)
		header := v20 && fl != nil && fl.GetLogicalType() == "struct"
		var headerLen uint64 // a header spans its column's entries: rows, or items under a list
		for _, s := range ss {
			headerLen += s.f.Columns[c].Rows
		}
		for _, s := range ss {
			sc := s.f.Columns[c].Meta
			if !proto.Equal(sc.GetEncoding(), enc) {
				return Result{}, unsupported("column %d encodings differ between %s and %s", c, first.Name, s.Name)
			}
			if header {
				if s != first {
					continue
				}
				if len(sc.GetPages()) != 1 || len(sc.GetPages()[0].GetBufferOffsets()) != 0 {
					return Result{}, unsupported("%s: 2.0 struct header column %d has %d pages", s.Name, c, len(sc.GetPages()))
				}
				np, err := cp.copyPage(s, sc.GetPages()[0], 0)
				if err != nil {
					return Result{}, err
				}
				np.Length = headerLen
				cm.Pages = append(cm.Pages, np)
				continue
			}
			for _, p := range sc.GetPages() {
				np, err := cp.copyPage(s, p, p.GetPriority()+s.start)
				if err != nil {
					return Result{}, err
				}
				cm.Pages = append(cm.Pages, np)
			}
		}
		cp.cols = append(cp.cols, cm)
	}
	res := Result{NumRows: rows, Fields: append([]int32(nil), first.File.Fields...), ColumnIndices: append([]int32(nil), first.File.ColumnIndices...)}
	return cp.finishWith(first, fields, rows, res, opts)
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
