package oracle

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Canonical encoding behind Digest, per row of a column:
//
//	null                      0x00
//	valid                     0x01 then the value:
//	  bool                    1 byte (0/1)
//	  float16/32/64           IEEE bits little-endian; every NaN as the one quiet NaN
//	  other fixed width       the value's bytes as Arrow stores them (little-endian
//	                          ints, dates, times, timestamps, durations, decimals,
//	                          fixed-size binary)
//	  utf8 / binary (any      uvarint length, bytes
//	  offset width, views)
//	  list / large_list /     uvarint element count, then each element encoded
//	  list_view / fixed_size  recursively (an element can itself be null)
//	  list / map
//	  struct                  each child's encoding in field order (a null struct
//	                          is just 0x00; its children's slots are ignored)
//	  dictionary              the encoding of the referenced dictionary value
//	  extension               the encoding of its storage
//	  anything else           uvarint length, JSON of GetOneForMarshal
//
// The digest of a column is sha256( canonicalType + "\n" + row encodings ),
// hex. canonicalType names the logical type: utf8/large_utf8/string_view are
// all "utf8", binary/large_binary/binary_view "binary", list/large_list/
// list_view "list<...>"; dictionaries and extensions are their value/storage
// type; field names inside lists and field nullability are ignored, struct
// field names are kept. Integer widths, signedness, time units, time zones,
// decimal precision/scale and fixed sizes are kept: they are different data.
// So identical logical data gives identical digests whatever the chunking,
// slicing or offset width, and any change of value, nullness, order or row
// count changes the digest.

// Digest returns the per-column digest of tbl, keyed by column name.
func Digest(tbl arrow.Table) map[string]string {
	out := make(map[string]string, tbl.NumCols())
	for i := 0; i < int(tbl.NumCols()); i++ {
		col := tbl.Column(i)
		out[col.Name()] = digestChunks(col.DataType(), col.Data().Chunks())
	}
	return out
}

// DigestRecords is Digest for record batches that share schema (for
// example, our own reader's output).
func DigestRecords(schema *arrow.Schema, recs []arrow.RecordBatch) map[string]string {
	out := make(map[string]string, schema.NumFields())
	for i, f := range schema.Fields() {
		chunks := make([]arrow.Array, 0, len(recs))
		for _, r := range recs {
			chunks = append(chunks, r.Column(i))
		}
		out[f.Name] = digestChunks(f.Type, chunks)
	}
	return out
}

// CanonicalType is the logical type name Digest hashes (see above).
func CanonicalType(dt arrow.DataType) string {
	switch t := dt.(type) {
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		return "utf8"
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType:
		return "binary"
	case *arrow.FixedSizeListType:
		return fmt.Sprintf("fixed_size_list<%d,%s>", t.Len(), CanonicalType(t.Elem()))
	case *arrow.MapType:
		return fmt.Sprintf("map<%s,%s>", CanonicalType(t.KeyType()), CanonicalType(t.ItemType()))
	case arrow.ListLikeType:
		return "list<" + CanonicalType(t.Elem()) + ">"
	case *arrow.StructType:
		parts := make([]string, t.NumFields())
		for i, f := range t.Fields() {
			parts[i] = f.Name + ":" + CanonicalType(f.Type)
		}
		return "struct<" + strings.Join(parts, ",") + ">"
	case *arrow.DictionaryType:
		return CanonicalType(t.ValueType)
	case arrow.ExtensionType:
		return CanonicalType(t.StorageType())
	case *arrow.TimestampType:
		return fmt.Sprintf("timestamp[%s,%s]", t.Unit, t.TimeZone)
	default:
		return dt.String()
	}
}

func digestChunks(dt arrow.DataType, chunks []arrow.Array) string {
	h := sha256.New()
	e := newEncoder(h)
	e.w.WriteString(CanonicalType(dt))
	e.w.WriteByte('\n')
	for _, c := range chunks {
		for i := 0; i < c.Len(); i++ {
			e.value(c, i)
		}
	}
	if err := e.w.Flush(); err != nil {
		panic(err) // writes to a hash never fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

type encoder struct {
	w       *bufio.Writer
	scratch [binary.MaxVarintLen64]byte
}

func newEncoder(w io.Writer) *encoder {
	return &encoder{w: bufio.NewWriterSize(w, 64<<10)}
}

func (e *encoder) uvarint(v uint64) {
	n := binary.PutUvarint(e.scratch[:], v)
	e.w.Write(e.scratch[:n])
}

func (e *encoder) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	e.w.Write(b)
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.scratch[:8], v)
	e.w.Write(e.scratch[:8])
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.scratch[:4], v)
	e.w.Write(e.scratch[:4])
}

// value writes the canonical encoding of arr[i].
func (e *encoder) value(arr arrow.Array, i int) {
	if arr.IsNull(i) {
		e.w.WriteByte(0)
		return
	}
	switch a := arr.(type) {
	case *array.Dictionary:
		e.value(a.Dictionary(), a.GetValueIndex(i))
		return
	case array.ExtensionArray:
		e.value(a.Storage(), i)
		return
	}
	e.w.WriteByte(1)
	switch a := arr.(type) {
	case *array.Boolean:
		if a.Value(i) {
			e.w.WriteByte(1)
		} else {
			e.w.WriteByte(0)
		}
	case *array.Float32:
		v := a.Value(i)
		if v != v {
			e.u32(0x7fc00000)
		} else {
			e.u32(math.Float32bits(v))
		}
	case *array.Float64:
		v := a.Value(i)
		if v != v {
			e.u64(0x7ff8000000000000)
		} else {
			e.u64(math.Float64bits(v))
		}
	case *array.Float16:
		v := a.Value(i)
		if v.IsNaN() {
			e.w.Write([]byte{0x00, 0x7e})
		} else {
			b := v.ToLEBytes()
			e.w.Write(b[:])
		}
	case *array.String:
		e.bytes([]byte(a.Value(i)))
	case *array.LargeString:
		e.bytes([]byte(a.Value(i)))
	case *array.StringView:
		e.bytes([]byte(a.Value(i)))
	case *array.Binary:
		e.bytes(a.Value(i))
	case *array.LargeBinary:
		e.bytes(a.Value(i))
	case *array.BinaryView:
		e.bytes(a.Value(i))
	case *array.Struct:
		for j := 0; j < a.NumField(); j++ {
			e.value(a.Field(j), i)
		}
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		e.uvarint(uint64(end - start))
		child := a.ListValues()
		for k := start; k < end; k++ {
			e.value(child, int(k))
		}
	default:
		if fw, ok := arr.DataType().(arrow.FixedWidthDataType); ok && fw.BitWidth() >= 8 && fw.BitWidth()%8 == 0 && len(arr.Data().Buffers()) >= 2 {
			width := fw.BitWidth() / 8
			buf := arr.Data().Buffers()[1].Bytes()
			off := (arr.Data().Offset() + i) * width
			e.w.Write(buf[off : off+width])
			return
		}
		b, err := json.Marshal(arr.GetOneForMarshal(i))
		if err != nil {
			b = []byte(arr.ValueStr(i))
		}
		e.bytes(b)
	}
}

// rowEncoding returns the canonical encoding of one value (for diffs).
func rowEncoding(arr arrow.Array, i int) []byte {
	var sb strings.Builder
	e := newEncoder(&sb)
	e.value(arr, i)
	_ = e.w.Flush()
	return []byte(sb.String())
}
