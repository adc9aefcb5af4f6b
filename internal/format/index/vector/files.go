package vector

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
)

// File names inside an index directory (_indices/<uuid>/).
const (
	IndexFileName     = "index.idx"
	AuxiliaryFileName = "auxiliary.idx"
)

// Schema metadata keys of the v3 vector index files, see
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/vector/builder.rs
// (merge_partitions).
const (
	keyIndex           = "lance:index"      // index.idx: {"type":..,"distance_type":..}
	keyIVF             = "lance:ivf"        // both: global buffer index of the IVF protobuf
	keyFlat            = "lance:flat"       // index.idx: per-partition sub-index metadata (FLAT)
	keyHNSW            = "lance:hnsw"       // index.idx: per-partition HNSW metadata
	keyDistance        = "distance_type"    // auxiliary.idx
	keyStorageMetadata = "storage_metadata" // auxiliary.idx: JSON array with the quantizer metadata

	// RowIDColumn is the row-address column of the storage file.
	RowIDColumn = "_rowid"
)

// ErrUnsupported marks an index whose layout this package does not know; the
// caller must not remap it (keep its fragments instead).
var ErrUnsupported = errors.New("vector index: unsupported")

// ErrCorrupt marks an index file that contradicts itself.
var ErrCorrupt = errors.New("vector index: corrupt")

// Quantization is the storage kind of auxiliary.idx.
type Quantization string

const (
	QuantFlat Quantization = "FLAT" // raw vectors, column "flat"
	QuantPQ   Quantization = "PQ"   // product quantization, column "__pq_code" (transposed per partition)
	QuantSQ   Quantization = "SQ"   // scalar quantization, column "__sq_code"
	QuantRQ   Quantization = "RQ"   // RaBitQ, column "_rabit_codes" (packed per partition) + factor columns
)

// codeColumns names the code column of each storage kind.
var codeColumns = map[string]Quantization{
	"flat":         QuantFlat,
	"__pq_code":    QuantPQ,
	"__sq_code":    QuantSQ,
	"_rabit_codes": QuantRQ,
}

// IndexFile is index.idx of an IVF vector index: the IVF model (centroids)
// and the sub-index per partition (FLAT: nothing; HNSW: graphs).
type IndexFile struct {
	File *lancefile.File
	// Type is lance:index "type", e.g. IVF_PQ, IVF_HNSW_SQ.
	Type string
	// Distance is lance:index "distance_type" (l2, cosine, dot, hamming).
	Distance string
	// IVF holds the centroids and per-partition sub-index row ranges.
	IVF *indexpb.IVF
	// IVFBuffer is the global buffer that holds IVF.
	IVFBuffer int
	// SubIndex is "FLAT" or "HNSW"; PartitionMeta its per-partition JSON.
	SubIndex      string
	PartitionMeta []string
}

// StorageFile is auxiliary.idx: per partition the row ids and their codes.
type StorageFile struct {
	File         *lancefile.File
	Distance     string
	Quantization Quantization
	// IVF holds per-partition row offsets and lengths into the file.
	IVF       *indexpb.IVF
	IVFBuffer int
	// Metadata is the storage_metadata JSON array (one quantizer metadata
	// JSON string); RQ and PQ details are parsed from its first entry.
	Metadata []string
	// CodeField/RowIDField are the field ids of the code and row-id columns.
	CodeField, RowIDField int32
	// PQ: bits per code, sub-vectors, whether codes are transposed.
	PQBits, PQSubVectors int
	PQTransposed         bool
	// RQ: whether codes are packed in 32-row blocks.
	RQPacked bool
}

// NumPartitions is the number of IVF partitions.
func (s *StorageFile) NumPartitions() int { return len(s.IVF.GetLengths()) }

func meta(f *lancefile.File) map[string][]byte { return f.Descriptor.GetSchema().GetMetadata() }

func errorf(f *lancefile.File, sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", sentinel, f.Name(), fmt.Sprintf(format, args...))
}

// readIVF decodes the IVF protobuf the "lance:ivf" metadata points at.
func readIVF(f *lancefile.File) (*indexpb.IVF, int, error) {
	raw, ok := meta(f)[keyIVF]
	if !ok {
		return nil, 0, errorf(f, ErrUnsupported, "no %q schema metadata (not a v3 IVF index file)", keyIVF)
	}
	pos, err := strconv.Atoi(string(raw))
	if err != nil || pos <= 0 || pos >= len(f.GlobalBuffers) {
		return nil, 0, errorf(f, ErrCorrupt, "%s = %q is not a global buffer of the file (it has %d)", keyIVF, raw, len(f.GlobalBuffers))
	}
	b, err := f.ReadBuffer(f.GlobalBuffers[pos])
	if err != nil {
		return nil, 0, err
	}
	ivf := &indexpb.IVF{}
	if err := proto.Unmarshal(b, ivf); err != nil {
		return nil, 0, errorf(f, ErrCorrupt, "decode IVF protobuf: %v", err)
	}
	if len(ivf.GetOffsets()) != len(ivf.GetLengths()) {
		return nil, 0, errorf(f, ErrCorrupt, "IVF has %d offsets but %d lengths", len(ivf.GetOffsets()), len(ivf.GetLengths()))
	}
	var end uint64
	for i, o := range ivf.GetOffsets() {
		if o != end {
			return nil, 0, errorf(f, ErrCorrupt, "IVF partition %d starts at row %d, expected %d", i, o, end)
		}
		end += uint64(ivf.GetLengths()[i])
	}
	if end != f.NumRows() {
		return nil, 0, errorf(f, ErrCorrupt, "IVF partitions hold %d rows, file has %d", end, f.NumRows())
	}
	return ivf, pos, nil
}

// OpenIndexFile reads index.idx's metadata (no partition data).
func OpenIndexFile(f *lancefile.File) (*IndexFile, error) {
	m := meta(f)
	var hdr struct {
		Type     string `json:"type"`
		Distance string `json:"distance_type"`
	}
	raw, ok := m[keyIndex]
	if !ok {
		return nil, errorf(f, ErrUnsupported, "no %q schema metadata (legacy or non-IVF index)", keyIndex)
	}
	if err := json.Unmarshal(raw, &hdr); err != nil {
		return nil, errorf(f, ErrCorrupt, "%s: %v", keyIndex, err)
	}
	ivf, pos, err := readIVF(f)
	if err != nil {
		return nil, err
	}
	x := &IndexFile{File: f, Type: hdr.Type, Distance: hdr.Distance, IVF: ivf, IVFBuffer: pos}
	for key, sub := range map[string]string{keyFlat: "FLAT", keyHNSW: "HNSW"} {
		if raw, ok := m[key]; ok {
			if x.SubIndex != "" {
				return nil, errorf(f, ErrCorrupt, "both %s and %s sub-index metadata", keyFlat, keyHNSW)
			}
			x.SubIndex = sub
			if err := json.Unmarshal(raw, &x.PartitionMeta); err != nil {
				return nil, errorf(f, ErrCorrupt, "%s: %v", key, err)
			}
		}
	}
	if x.SubIndex == "" {
		return nil, errorf(f, ErrUnsupported, "index type %s: no FLAT or HNSW sub-index metadata", hdr.Type)
	}
	if len(x.PartitionMeta) != len(ivf.GetLengths()) {
		return nil, errorf(f, ErrCorrupt, "%d partitions but %d sub-index metadata entries", len(ivf.GetLengths()), len(x.PartitionMeta))
	}
	return x, nil
}

// OpenStorageFile reads auxiliary.idx's metadata (no partition data).
func OpenStorageFile(f *lancefile.File) (*StorageFile, error) {
	m := meta(f)
	ivf, pos, err := readIVF(f)
	if err != nil {
		return nil, err
	}
	s := &StorageFile{File: f, Distance: string(m[keyDistance]), IVF: ivf, IVFBuffer: pos, CodeField: -1, RowIDField: -1}
	if raw, ok := m[keyStorageMetadata]; ok {
		if err := json.Unmarshal(raw, &s.Metadata); err != nil {
			return nil, errorf(f, ErrCorrupt, "%s: %v", keyStorageMetadata, err)
		}
	}
	for _, fl := range f.TopFields() {
		if fl.GetName() == RowIDColumn {
			s.RowIDField = fl.GetId()
		} else if q, ok := codeColumns[fl.GetName()]; ok {
			if s.Quantization != "" {
				return nil, errorf(f, ErrUnsupported, "two code columns (%s and %s)", s.Quantization, q)
			}
			s.Quantization, s.CodeField = q, fl.GetId()
		}
	}
	if s.RowIDField < 0 || s.Quantization == "" {
		return nil, errorf(f, ErrUnsupported, "storage without a %s column and a known code column", RowIDColumn)
	}
	if len(s.Metadata) == 0 {
		return nil, errorf(f, ErrUnsupported, "no %s", keyStorageMetadata)
	}
	switch s.Quantization {
	case QuantPQ:
		var pq struct {
			NBits         *int  `json:"nbits"`
			NumSubVectors *int  `json:"num_sub_vectors"`
			Transposed    *bool `json:"transposed"`
		}
		if err := json.Unmarshal([]byte(s.Metadata[0]), &pq); err != nil {
			return nil, errorf(f, ErrCorrupt, "PQ storage metadata: %v", err)
		}
		if pq.NBits == nil || pq.NumSubVectors == nil || pq.Transposed == nil {
			return nil, errorf(f, ErrUnsupported, "PQ storage metadata without nbits/num_sub_vectors/transposed: %s", s.Metadata[0])
		}
		s.PQBits, s.PQSubVectors, s.PQTransposed = *pq.NBits, *pq.NumSubVectors, *pq.Transposed
		if s.PQBits != 8 && s.PQBits != 4 {
			return nil, errorf(f, ErrUnsupported, "PQ with %d bits", s.PQBits)
		}
	case QuantRQ:
		var rq struct {
			Packed *bool `json:"packed"`
		}
		if err := json.Unmarshal([]byte(s.Metadata[0]), &rq); err != nil {
			return nil, errorf(f, ErrCorrupt, "RQ storage metadata: %v", err)
		}
		if rq.Packed == nil {
			return nil, errorf(f, ErrUnsupported, "RQ storage metadata without packed: %s", s.Metadata[0])
		}
		s.RQPacked = *rq.Packed
	}
	return s, nil
}

// CopyIndexFile writes index.idx of a FLAT sub-index unchanged to w: its
// content (centroids, empty per-partition sub-indices) does not depend on
// row ids, and lance's remap writes the same centroids and metadata. An
// HNSW index.idx must be rebuilt (Remap).
func CopyIndexFile(x *IndexFile, w io.Writer) error {
	if x.SubIndex != "FLAT" {
		return errorf(x.File, ErrUnsupported, "index type %s: a %s sub-index must be rebuilt, not copied", x.Type, x.SubIndex)
	}
	_, err := io.Copy(w, io.NewSectionReader(x.File.ReaderAt(), 0, x.File.Size()))
	return err
}
