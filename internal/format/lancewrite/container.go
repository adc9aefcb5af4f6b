package lancewrite

import (
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

const (
	bufferAlign = 64
	padByte     = 0x48 // lance's PAD_BUFFER byte
	footerLen   = 40
	magic       = "LANC"

	pageLayoutURL     = "/lance.encodings21.PageLayout"
	arrayEncodingURL  = "/lance.encodings.ArrayEncoding"
	columnEncodingURL = "/lance.encodings.ColumnEncoding"
)

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// columnEncodingBytes is Any("/lance.encodings.ColumnEncoding", ColumnEncoding{values: Empty}),
// what lance writes for every 2.0 and 2.1 column.
var columnEncodingBytes = mustAny(columnEncodingURL, []byte{0x0a, 0x00})

func mustAny(url string, value []byte) []byte {
	b, err := marshalOpts.Marshal(&anypb.Any{TypeUrl: url, Value: value})
	if err != nil {
		panic(err)
	}
	return b
}

func directEncoding(anyBytes []byte) *file2pb.Encoding {
	return &file2pb.Encoding{Location: &file2pb.Encoding_Direct{Direct: &file2pb.DirectEncoding{Encoding: anyBytes}}}
}

// container tracks the position in the output stream and writes aligned
// buffers, then the metadata tail.
type container struct {
	w         io.Writer
	rw        RangeWriter // w, when it copies ranges of sources itself
	ranged    int64       // bytes w copied from sources itself (RangeWriter)
	pageAlign bool        // rw copies into the page cache: keep page offsets (alignCopy)
	pos       int64
	pad       [bufferAlign]byte
	err       error
	// extra holds the global buffers after buffer 0, in order (offset, size).
	extra [][2]uint64
}

func newContainer(w io.Writer) *container {
	c := &container{w: w}
	c.rw, _ = w.(RangeWriter)
	c.pageAlign = c.rw != nil
	if k, ok := w.(KernelCopier); ok {
		c.pageAlign = k.KernelCopies()
	}
	for i := range c.pad {
		c.pad[i] = padByte
	}
	return c
}

func (c *container) write(b []byte) {
	if c.err != nil || len(b) == 0 {
		return
	}
	n, err := c.w.Write(b)
	c.pos += int64(n)
	if err != nil {
		c.err = fmt.Errorf("lancewrite: write: %w", err)
	} else if n != len(b) {
		c.err = fmt.Errorf("lancewrite: write: %w", io.ErrShortWrite)
	}
}

// align pads the stream to the next multiple of 64 bytes.
func (c *container) align() {
	if r := c.pos % bufferAlign; r != 0 {
		c.write(c.pad[:bufferAlign-r])
	}
}

// buffer writes one 64-aligned buffer and returns its offset.
func (c *container) buffer(b []byte) uint64 {
	c.align()
	off := uint64(c.pos)
	c.write(b)
	return off
}

// page writes the buffers of one page and returns its metadata.
func (c *container) page(bufs [][]byte, rows, priority uint64, encodingAny []byte) *file2pb.ColumnMetadata_Page {
	p := &file2pb.ColumnMetadata_Page{
		BufferOffsets: make([]uint64, len(bufs)),
		BufferSizes:   make([]uint64, len(bufs)),
		Length:        rows,
		Encoding:      directEncoding(encodingAny),
		Priority:      priority,
	}
	for i, b := range bufs {
		p.BufferOffsets[i] = c.buffer(b)
		p.BufferSizes[i] = uint64(len(b))
	}
	return p
}

// finish writes global buffer 0 (the FileDescriptor), the column metadata,
// the offset tables and the footer.
func (c *container) finish(fields []*filepb.Field, schemaMeta map[string][]byte, rows uint64, cols []*file2pb.ColumnMetadata, major, minor uint16) error {
	desc := &filepb.FileDescriptor{Schema: &filepb.Schema{Fields: fields, Metadata: schemaMeta}, Length: rows}
	db, err := marshalOpts.Marshal(desc)
	if err != nil {
		return fmt.Errorf("lancewrite: marshal file descriptor: %w", err)
	}
	gb0 := c.buffer(db)
	type span struct{ pos, size uint64 }
	cmo := make([]span, len(cols))
	colStart := uint64(c.pos)
	for i, cm := range cols {
		b, err := marshalOpts.Marshal(cm)
		if err != nil {
			return fmt.Errorf("lancewrite: marshal column %d metadata: %w", i, err)
		}
		cmo[i] = span{uint64(c.pos), uint64(len(b))}
		c.write(b)
	}
	cmoStart := uint64(c.pos)
	tbl := make([]byte, 16*len(cols))
	for i, s := range cmo {
		binary.LittleEndian.PutUint64(tbl[16*i:], s.pos)
		binary.LittleEndian.PutUint64(tbl[16*i+8:], s.size)
	}
	c.write(tbl)
	gboStart := uint64(c.pos)
	gbo := make([]byte, 16*(1+len(c.extra)))
	binary.LittleEndian.PutUint64(gbo[0:], gb0)
	binary.LittleEndian.PutUint64(gbo[8:], uint64(len(db)))
	for i, e := range c.extra {
		binary.LittleEndian.PutUint64(gbo[16*(i+1):], e[0])
		binary.LittleEndian.PutUint64(gbo[16*(i+1)+8:], e[1])
	}
	c.write(gbo)
	var tail [footerLen]byte
	f := tail[:]
	binary.LittleEndian.PutUint64(f[0:], colStart)
	binary.LittleEndian.PutUint64(f[8:], cmoStart)
	binary.LittleEndian.PutUint64(f[16:], gboStart)
	binary.LittleEndian.PutUint32(f[24:], uint32(1+len(c.extra)))
	binary.LittleEndian.PutUint32(f[28:], uint32(len(cols)))
	binary.LittleEndian.PutUint16(f[32:], major)
	binary.LittleEndian.PutUint16(f[34:], minor)
	copy(f[36:], magic)
	c.write(tail[:])
	return c.err
}

// pageRuns writes a page whose buffer 0 is runs of src (copied, see
// copyRuns) and whose other buffers are bufs[1:], and returns its
// metadata.
func (c *container) pageRuns(src io.ReaderAt, name string, runs []byteRun, bufs [][]byte, rows, priority uint64, encodingAny []byte, buf []byte) *file2pb.ColumnMetadata_Page {
	p := c.page(nil, rows, priority, encodingAny)
	c.align()
	p.BufferOffsets = append(p.BufferOffsets, uint64(c.pos))
	start := c.pos
	if err := c.copyRuns(src, name, runs, buf); err != nil && c.err == nil {
		c.err = err
	}
	p.BufferSizes = append(p.BufferSizes, uint64(c.pos-start))
	for _, b := range bufs[1:] {
		p.BufferOffsets = append(p.BufferOffsets, c.buffer(b))
		p.BufferSizes = append(p.BufferSizes, uint64(len(b)))
	}
	return p
}
