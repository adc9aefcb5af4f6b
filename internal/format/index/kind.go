package index

import (
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Kind names an index type the way @lancedb/lancedb's Index constructors do.
type Kind string

// Index kinds lance 8.0.0 builds.
const (
	KindBTree     Kind = "btree"
	KindBitmap    Kind = "bitmap"
	KindLabelList Kind = "labelList"
	KindFTS       Kind = "fts"
	KindFM        Kind = "fm"
	KindIVFFlat   Kind = "ivfFlat"
	KindIVFPQ     Kind = "ivfPq"
	KindIVFRQ     Kind = "ivfRq"
	KindIVFSQ     Kind = "ivfSq"
	KindHNSWSQ    Kind = "hnswSq"
	KindHNSWPQ    Kind = "hnswPq"
	KindHNSWFlat  Kind = "hnswFlat"
	// KindVector is a vector index whose details do not name its storage
	// (written before lance recorded it); its type is only in its files.
	KindVector Kind = "vector"
	// KindFragReuse is the fragment-reuse system index (__lance_frag_reuse).
	KindFragReuse Kind = "fragReuse"
	// KindMemWAL is the MemWAL system index (__lance_mem_wal).
	KindMemWAL Kind = "memWal"
	// KindUnknown is any other type: lanced never rewrites it.
	KindUnknown Kind = "unknown"
)

// System index names.
const (
	FragReuseName = "__lance_frag_reuse"
	MemWALName    = "__lance_mem_wal"
)

// IsVector reports whether Lance treats the index as a vector index (its
// details are VectorIndexDetails): a vector index whose effective coverage
// is empty is dropped by Lance's next Delete/Update/Merge/Project commit.
func (k Kind) IsVector() bool {
	switch k {
	case KindIVFFlat, KindIVFPQ, KindIVFRQ, KindIVFSQ, KindHNSWSQ, KindHNSWPQ, KindHNSWFlat, KindVector:
		return true
	}
	return false
}

// IsSystem reports whether the index is one of Lance's system indices,
// which cover no column and are never remapped.
func (k Kind) IsSystem() bool { return k == KindFragReuse || k == KindMemWAL }

// Type URL suffixes of index_details written by lance 8.0.0 (it writes
// leading-"/" URLs; Lance's reader matches with ends_with, and so do we).
const (
	urlBTree     = "BTreeIndexDetails"
	urlBitmap    = "BitmapIndexDetails"
	urlLabelList = "LabelListIndexDetails"
	urlInverted  = "InvertedIndexDetails"
	urlFM        = "FMIndexDetails"
	urlVector    = "VectorIndexDetails"
	urlFragReuse = "FragmentReuseIndexDetails"
)

// Field numbers of lance 8.0.0's VectorIndexDetails that tell the index
// type apart, as observed in the manifests it writes: hnsw (3) holds the
// graph parameters; exactly one of pq (4), sq (5), rq (6), flat (8) names
// the storage. The protos published before 8.0.0 declare the message empty.
const (
	vdHNSW protowire.Number = 3
	vdPQ   protowire.Number = 4
	vdSQ   protowire.Number = 5
	vdRQ   protowire.Number = 6
	vdFlat protowire.Number = 8
)

// Detect returns the kind of an index segment.
func Detect(ix *tablepb.IndexMetadata) Kind {
	switch ix.GetName() {
	case FragReuseName:
		return KindFragReuse
	case MemWALName:
		return KindMemWAL
	}
	url := ix.GetIndexDetails().GetTypeUrl()
	switch {
	case url == "":
		return KindUnknown
	case strings.HasSuffix(url, urlBTree):
		return KindBTree
	case strings.HasSuffix(url, urlBitmap):
		return KindBitmap
	case strings.HasSuffix(url, urlLabelList):
		return KindLabelList
	case strings.HasSuffix(url, urlInverted):
		return KindFTS
	case strings.HasSuffix(url, urlFM):
		return KindFM
	case strings.HasSuffix(url, urlFragReuse):
		return KindFragReuse
	case strings.HasSuffix(url, urlVector):
		return vectorKind(ix.GetIndexDetails().GetValue())
	}
	return KindUnknown
}

// vectorKind reads the storage and graph fields of VectorIndexDetails.
func vectorKind(b []byte) Kind {
	var hnsw, pq, sq, rq, flat bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return KindVector
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return KindVector
		}
		b = b[n:]
		switch num {
		case vdHNSW:
			hnsw = true
		case vdPQ:
			pq = true
		case vdSQ:
			sq = true
		case vdRQ:
			rq = true
		case vdFlat:
			flat = true
		}
	}
	switch {
	case hnsw && pq:
		return KindHNSWPQ
	case hnsw && sq:
		return KindHNSWSQ
	case hnsw && flat:
		return KindHNSWFlat
	case pq:
		return KindIVFPQ
	case sq:
		return KindIVFSQ
	case rq:
		return KindIVFRQ
	case flat:
		return KindIVFFlat
	}
	// Details without a storage field (an index written before lance
	// recorded it, or an HNSW over a storage this release does not know).
	return KindVector
}

// RQNumBits returns the bits per dimension of an IVF_RQ segment, as
// VectorIndexDetails records them (rq (6), its field 1); false when the
// details do not say.
func RQNumBits(ix *tablepb.IndexMetadata) (uint64, bool) {
	if !strings.HasSuffix(ix.GetIndexDetails().GetTypeUrl(), urlVector) {
		return 0, false
	}
	rq, ok := field(ix.GetIndexDetails().GetValue(), vdRQ, protowire.BytesType)
	if !ok {
		return 0, false
	}
	v, ok := field(rq, 1, protowire.VarintType)
	if !ok {
		return 0, false
	}
	n, m := protowire.ConsumeVarint(v)
	return n, m > 0
}

// field returns the raw value of the first field num of wire type typ in
// the protobuf message b (a length-delimited field without its length).
func field(b []byte, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(n, t, b)
		if l < 0 {
			return nil, false
		}
		if n == num && t == typ {
			if t == protowire.BytesType {
				v, _ := protowire.ConsumeBytes(b[:l])
				return v, true
			}
			return b[:l], true
		}
		b = b[l:]
	}
	return nil, false
}
