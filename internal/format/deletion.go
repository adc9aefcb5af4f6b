package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// DeletionsDir is the directory (relative to the table root) of deletion files.
const DeletionsDir = "_deletions"

// BitmapDeletionThreshold is Lance's BITMAP_THRESDHOLD: a deletion vector
// with this many rows or more is written as a roaring bitmap, below it as an
// Arrow file.
const BitmapDeletionThreshold = 5000

// DeletionKindFor returns the file kind Lance writes for a new deletion
// vector of n rows (starting from none; an existing bitmap stays a bitmap).
func DeletionKindFor(n uint64) tablepb.DeletionFile_DeletionFileType {
	if n >= BitmapDeletionThreshold {
		return tablepb.DeletionFile_BITMAP
	}
	return tablepb.DeletionFile_ARROW_ARRAY
}

// DeletionSuffix returns "arrow" or "bin" for a deletion file kind.
func DeletionSuffix(kind tablepb.DeletionFile_DeletionFileType) string {
	if kind == tablepb.DeletionFile_BITMAP {
		return "bin"
	}
	return "arrow"
}

// DeletionFileKey returns the key, relative to the table root, of fragment
// fragID's deletion file: "_deletions/{frag}-{read_version}-{id}.{arrow|bin}"
// with unpadded decimals.
func DeletionFileKey(fragID uint64, df *tablepb.DeletionFile) string {
	return fmt.Sprintf("%s/%d-%d-%d.%s", DeletionsDir, fragID, df.GetReadVersion(), df.GetId(), DeletionSuffix(df.GetFileType()))
}

// ParseDeletionFileName parses a deletion file base name or key.
func ParseDeletionFileName(name string) (fragID, readVersion, id uint64, kind tablepb.DeletionFile_DeletionFileType, err error) {
	base := name[strings.LastIndexByte(name, '/')+1:]
	stem, ok := strings.CutSuffix(base, ".arrow")
	kind = tablepb.DeletionFile_ARROW_ARRAY
	if !ok {
		if stem, ok = strings.CutSuffix(base, ".bin"); !ok {
			return 0, 0, 0, 0, fmt.Errorf("format: %q is not a deletion file name: %w", base, ErrCorrupt)
		}
		kind = tablepb.DeletionFile_BITMAP
	}
	parts := strings.Split(stem, "-")
	if len(parts) != 3 {
		return 0, 0, 0, 0, fmt.Errorf("format: %q is not a deletion file name: %w", base, ErrCorrupt)
	}
	var nums [3]uint64
	for i, p := range parts {
		if nums[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("format: %q is not a deletion file name: %w", base, ErrCorrupt)
		}
	}
	return nums[0], nums[1], nums[2], kind, nil
}

// deletionSchema is the exact schema Lance requires of an Arrow deletion
// file: one non-nullable UInt32 column row_id, no metadata.
var deletionSchema = arrow.NewSchema([]arrow.Field{{Name: "row_id", Type: arrow.PrimitiveTypes.Uint32, Nullable: false}}, nil)

// deletionAllocLimit caps what decoding one Arrow deletion file may
// allocate (a hostile file can claim any uncompressed size). 512 MiB holds
// 128 Mi row offsets, far beyond any real fragment.
var deletionAllocLimit atomic.Int64

func init() { deletionAllocLimit.Store(512 << 20) }

// DecodeDeletionFile decodes a deletion file of the given kind into the set
// of deleted row offsets. name is used in errors only. Arrow files must hold
// exactly one batch with exactly Lance's schema and no nulls; bitmap files
// are portable 32-bit roaring bitmaps.
func DecodeDeletionFile(name string, kind tablepb.DeletionFile_DeletionFileType, data []byte) (*roaring.Bitmap, error) {
	switch kind {
	case tablepb.DeletionFile_ARROW_ARRAY:
		return decodeArrowDeletions(name, data)
	case tablepb.DeletionFile_BITMAP:
		return decodeBitmapDeletions(name, data)
	default:
		return nil, corruptf("deletion file", name, "unknown deletion file type %d", int32(kind))
	}
}

func decodeBitmapDeletions(name string, data []byte) (*roaring.Bitmap, error) {
	bm, err := DecodeRoaring(data)
	if err != nil {
		return nil, corruptf("deletion file", name, "roaring bitmap: %v", err)
	}
	return bm, nil
}

// DecodeRoaring decodes a 32-bit portable roaring bitmap (a deletion file,
// an index's fragment bitmap) from bytes that may be damaged: the sizes its
// header declares must fit in data before anything is allocated for them,
// and a bitmap the roaring package reads but that breaks the format is an
// error, not a panic or a bitmap that means something else.
func DecodeRoaring(data []byte) (bm *roaring.Bitmap, err error) {
	if err := checkRoaringSize(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("%v", r)
		}
	}()
	bm = roaring.New()
	if _, err := bm.ReadFrom(bytes.NewReader(data)); err != nil {
		return nil, err
	}
	// ReadFrom accepts containers the format forbids (overlapping or
	// unsorted runs, wrong cardinalities); such a bitmap would not mean what
	// its bytes say.
	if err := bm.Validate(); err != nil {
		return nil, err
	}
	return bm, nil
}

// checkRoaringSize checks that the container sizes a portable roaring header
// declares fit in data, before the roaring package allocates for them.
func checkRoaringSize(data []byte) error {
	if len(data) < 8 {
		return fmt.Errorf("%d bytes is too short", len(data))
	}
	cookie := binary.LittleEndian.Uint32(data)
	var n, p int
	var runs []byte
	switch {
	case cookie == 12346:
		n, p = int(binary.LittleEndian.Uint32(data[4:])), 8
	case cookie&0xffff == 12347:
		n, p = int(cookie>>16)+1, 4
		rl := (n + 7) / 8
		if p+rl > len(data) {
			return fmt.Errorf("truncated run flags")
		}
		runs, p = data[p:p+rl], p+rl
	default:
		return fmt.Errorf("bad cookie %#x", cookie)
	}
	if n > 1<<16 || p+4*n > len(data) {
		return fmt.Errorf("%d containers do not fit in %d bytes", n, len(data))
	}
	need := 0
	for k := 0; k < n; k++ {
		card := int(binary.LittleEndian.Uint16(data[p+4*k+2:])) + 1
		switch {
		case runs != nil && runs[k/8]>>(k%8)&1 == 1:
			need += 2 // at least the run count
		case card > 4096:
			need += 8192
		default:
			need += 2 * card
		}
	}
	if p+4*n+need > len(data) {
		return fmt.Errorf("containers need %d bytes, file has %d", p+4*n+need, len(data))
	}
	return nil
}

// limitAllocator refuses (by panicking, recovered in decodeArrowDeletions)
// to hand out more than a fixed total.
type limitAllocator struct {
	memory.Allocator
	left int64
}

type allocLimitExceeded struct{ size int }

func (a *limitAllocator) Allocate(size int) []byte {
	a.left -= int64(size)
	if size < 0 || a.left < 0 {
		panic(allocLimitExceeded{size})
	}
	return a.Allocator.Allocate(size)
}

func (a *limitAllocator) Reallocate(size int, b []byte) []byte {
	a.left -= int64(size - len(b))
	if size < 0 || a.left < 0 {
		panic(allocLimitExceeded{size})
	}
	return a.Allocator.Reallocate(size, b)
}

func decodeArrowDeletions(name string, data []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(allocLimitExceeded); ok {
				err = corruptf("deletion file", name, "arrow file asks for %d bytes, over the limit", e.size)
			} else {
				err = corruptf("deletion file", name, "malformed arrow file: %v", r)
			}
			bm = nil
		}
	}()
	if err := checkArrowFooter(data); err != nil {
		return nil, corruptf("deletion file", name, "not a Lance deletion arrow file: %v", err)
	}
	mem := &limitAllocator{Allocator: memory.NewGoAllocator(), left: deletionAllocLimit.Load()}
	r, err := ipc.NewFileReader(bytes.NewReader(data), ipc.WithAllocator(mem))
	if err != nil {
		return nil, corruptf("deletion file", name, "not an arrow ipc file: %v", err)
	}
	defer r.Close()
	if !r.Schema().Equal(deletionSchema) || r.Schema().HasMetadata() || r.Schema().Field(0).HasMetadata() {
		return nil, corruptf("deletion file", name, "schema is %s, want %s", r.Schema(), deletionSchema)
	}
	if r.NumRecords() != 1 {
		return nil, corruptf("deletion file", name, "%d record batches, want exactly one", r.NumRecords())
	}
	rec, err := r.RecordBatch(0)
	if err != nil {
		return nil, corruptf("deletion file", name, "read record batch: %v", err)
	}
	col, ok := rec.Column(0).(*array.Uint32)
	if !ok {
		return nil, corruptf("deletion file", name, "column is %s, want uint32", rec.Column(0).DataType())
	}
	if col.NullN() != 0 {
		return nil, corruptf("deletion file", name, "%d null row ids", col.NullN())
	}
	bm = roaring.New()
	bm.AddMany(col.Uint32Values())
	return bm, nil
}

// EncodeDeletionFile serializes deleted row offsets in the given kind: an
// Arrow IPC file (one batch, row_id UInt32 NOT NULL, ZSTD buffers, as Lance
// writes it) or a portable roaring bitmap without run containers.
func EncodeDeletionFile(kind tablepb.DeletionFile_DeletionFileType, rows *roaring.Bitmap) ([]byte, error) {
	switch kind {
	case tablepb.DeletionFile_BITMAP:
		var buf bytes.Buffer
		// A clone without run containers: lance 8.0.0 was only verified
		// on cookie 12346 files.
		bm := rows
		if bm.HasRunCompression() {
			bm = roaring.New()
			bm.AddMany(rows.ToArray())
		}
		if _, err := bm.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("format: encode bitmap deletion file: %w", err)
		}
		return buf.Bytes(), nil
	case tablepb.DeletionFile_ARROW_ARRAY:
		mem := memory.NewGoAllocator()
		b := array.NewUint32Builder(mem)
		defer b.Release()
		b.AppendValues(rows.ToArray(), nil)
		col := b.NewArray()
		defer col.Release()
		rec := array.NewRecordBatch(deletionSchema, []arrow.Array{col}, int64(col.Len()))
		defer rec.Release()
		var buf bytes.Buffer
		w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(deletionSchema), ipc.WithAllocator(mem), ipc.WithZstd())
		if err != nil {
			return nil, fmt.Errorf("format: encode arrow deletion file: %w", err)
		}
		if err := w.Write(rec); err != nil {
			return nil, fmt.Errorf("format: encode arrow deletion file: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("format: encode arrow deletion file: %w", err)
		}
		return buf.Bytes(), nil
	default:
		return nil, fmt.Errorf("format: encode deletion file: unknown type %d", int32(kind))
	}
}

// CheckDeletions verifies a decoded deletion vector against its fragment:
// the count must equal num_deleted_rows when that is recorded (0 means
// unknown) and every offset must be below physical_rows when known.
func CheckDeletions(name string, df *tablepb.DeletionFile, physicalRows uint64, rows *roaring.Bitmap) error {
	if n := df.GetNumDeletedRows(); n != 0 && n != rows.GetCardinality() {
		return corruptf("deletion file", name, "holds %d rows, manifest records num_deleted_rows=%d", rows.GetCardinality(), n)
	}
	if physicalRows != 0 && !rows.IsEmpty() && uint64(rows.Maximum()) >= physicalRows {
		return corruptf("deletion file", name, "deletes row offset %d of a fragment with %d physical rows", rows.Maximum(), physicalRows)
	}
	return nil
}

// checkArrowFooter checks, before arrow-go reads it, that the footer of
// the Arrow IPC file data describes what a Lance deletion file holds: a
// schema of one field without children or metadata, of an Int type, no
// dictionaries, one record batch. arrow-go sizes slices by the counts a
// footer claims (a 184-byte file can claim billions of schema fields), and
// an allocation that large ends the process rather than panicking, so the
// counts are checked here first. Reads past the footer's end panic, which
// the caller recovers as a malformed file.
func checkArrowFooter(data []byte) error {
	const magic = "ARROW1"
	n := len(data)
	if n < 2*len(magic)+2+4 || string(data[:len(magic)]) != magic || string(data[n-len(magic):]) != magic {
		return fmt.Errorf("not an arrow ipc file (no ARROW1 magic at both ends)")
	}
	flen := int64(int32(binary.LittleEndian.Uint32(data[n-len(magic)-4:])))
	if flen <= 0 || flen > int64(n-2*len(magic)-2-4) {
		return fmt.Errorf("footer of %d bytes in a file of %d", flen, n)
	}
	buf := data[n-len(magic)-4-int(flen) : n-len(magic)-4]
	root := flatbuffers.Table{Bytes: buf, Pos: flatbuffers.GetUOffsetT(buf)}
	// vectorLen is the length of the vector in table field slot (0 when
	// absent), checked to fit the footer at elem bytes per element.
	vectorLen := func(t flatbuffers.Table, slot flatbuffers.VOffsetT, elem int) (int, error) {
		o := flatbuffers.UOffsetT(t.Offset(slot))
		if o == 0 {
			return 0, nil
		}
		l := t.VectorLen(o)
		if start := int(t.Vector(o)); l < 0 || start+l*elem > len(buf) {
			return 0, fmt.Errorf("a vector of %d elements past the footer's %d bytes", l, len(buf))
		}
		return l, nil
	}
	table := func(t flatbuffers.Table, slot flatbuffers.VOffsetT) (flatbuffers.Table, bool) {
		o := flatbuffers.UOffsetT(t.Offset(slot))
		if o == 0 {
			return flatbuffers.Table{}, false
		}
		return flatbuffers.Table{Bytes: buf, Pos: t.Indirect(t.Pos + o)}, true
	}
	// Arrow's File.fbs and Schema.fbs: Footer {version, schema,
	// dictionaries, recordBatches, custom_metadata}; Schema {endianness,
	// fields, custom_metadata, features}; Field {name, nullable, type_type,
	// type, dictionary, children, custom_metadata}; slot = 4 + 2 × index.
	if l, err := vectorLen(root, 8, 24); err != nil || l != 0 {
		return fmt.Errorf("footer lists %d dictionaries, want none (%v)", l, err)
	}
	if l, err := vectorLen(root, 10, 24); err != nil || l != 1 {
		return fmt.Errorf("footer lists %d record batches, want one (%v)", l, err)
	}
	if l, err := vectorLen(root, 12, 4); err != nil || l != 0 {
		return fmt.Errorf("footer has %d metadata entries, want none (%v)", l, err)
	}
	schema, ok := table(root, 6)
	if !ok {
		return fmt.Errorf("footer has no schema")
	}
	if l, err := vectorLen(schema, 6, 4); err != nil || l != 1 {
		return fmt.Errorf("schema has %d fields, want one (%v)", l, err)
	}
	for _, slot := range []flatbuffers.VOffsetT{8, 10} {
		if l, err := vectorLen(schema, slot, 8); err != nil || l != 0 {
			return fmt.Errorf("schema has %d metadata entries or features, want none (%v)", l, err)
		}
	}
	o := flatbuffers.UOffsetT(schema.Offset(6))
	field := flatbuffers.Table{Bytes: buf, Pos: schema.Indirect(schema.Vector(o))}
	for _, slot := range []flatbuffers.VOffsetT{14, 16} {
		if l, err := vectorLen(field, slot, 4); err != nil || l != 0 {
			return fmt.Errorf("field has %d children or metadata entries, want none (%v)", l, err)
		}
	}
	if _, ok := table(field, 12); ok {
		return fmt.Errorf("field is dictionary-encoded, want uint32")
	}
	if tt := field.GetByteSlot(8, 0); tt != 2 { // Type union: Int = 2
		return fmt.Errorf("field has type %d, want Int (2)", tt)
	}
	return nil
}
