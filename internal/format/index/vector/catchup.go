package vector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
)

// Catch-up: rows appended after an index was built are added to it with
// the index's trained model, as lance's optimize_indices does with the
// options lancedb's optimize() passes (OptimizeOptions::default(), see
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/optimize.rs
// and IvfIndexBuilder::new_incremental, build_partitions,
// take_partition_batches and merge_partitions in
// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/vector/builder.rs):
// the new rows become a delta segment with the existing centroids and
// quantizer, unless a partition (counting every segment's rows and the new
// ones) passes the split bound or falls under the join bound, in which case
// lance rebuilds the partition layout and merges every segment into one.
// Observed on lance 8.0.0's optimize() (oracle tests): an IVF_FLAT whose
// partitions all stay above a quarter of 4096 rows gets a delta segment; an
// IVF_PQ with partitions under a quarter of 8192 rows gets one merged
// segment with its smallest partition joined into the others. Layout
// (Layout) follows the same bounds: a split is left to lance (ErrSplit); a
// join merges every segment into one, per partition the segments' stored
// rows (codes kept as stored) then the new rows, but keeps every partition
// (joining needs the raw vectors of the joined rows from the table), which
// is the same model and still a valid index.
//
// Each new vector goes through the transforms lance's IvfTransformer
// chains (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/vector/ivf.rs):
// normalized for cosine (then measured with L2), dropped when not finite,
// assigned to the nearest centroid, and for PQ under L2/cosine quantized as
// the residual to that centroid (ProductQuantizer::use_residual), each
// sub-vector to its nearest codebook entry; SQ scales each value into the
// stored bounds (scale_to_u8); FLAT stores the (normalized) vector.

// ErrSplit means the catch-up would push a partition past the size at
// which lance's optimize splits it (and then merges every segment, which is
// a retrain lanced does not do): the index needs Lance's optimize().
var ErrSplit = errors.New("vector index: partition needs a split")

// maxPartitionSizeFactor and targetPartitionSize are lance's split rule
// (MAX_PARTITION_SIZE_FACTOR and IndexType::target_partition_size in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/lib.rs).
const maxPartitionSizeFactor = 4

func targetPartitionSize(indexType string) uint64 {
	switch indexType {
	case "IVF_FLAT", "IVF_RQ":
		return 4096
	case "IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ":
		return 1 << 20
	}
	return 8192
}

// Model is the trained model of a vector index segment: its centroids and
// quantizer, as index.idx and auxiliary.idx hold them.
type Model struct {
	x         *IndexFile
	s         *StorageFile
	dim       int
	parts     int
	centroids []float32
	dot       bool // assign and quantize by dot distance; else squared L2
	normalize bool // cosine: vectors are normalized first
	residual  bool // PQ codes the residual to the centroid
	book      []float32
	bookT     []float32 // book per sub-vector, column-major (nearestColumns)
	sqStart   float64
	sqEnd     float64
	rq        *rqModel
	codeWidth int // bytes per stored row code (FLAT: 4*dim)
	factors   int // float32 factors stored per row (RQ: 3; multi-bit 5)
	exWidth   int // bytes of ex codes stored per row (multi-bit RQ)
}

// NewModel reads the trained model of a segment. Supported: IVF_FLAT,
// IVF_PQ, IVF_SQ, their HNSW variants and IVF_RQ (see rq.go) over float32
// vectors with l2, cosine or dot distance; anything else is ErrUnsupported.
func NewModel(x *IndexFile, s *StorageFile) (*Model, error) {
	m := &Model{x: x, s: s, parts: len(x.IVF.GetLengths())}
	if s.NumPartitions() != m.parts {
		return nil, errorf(s.File, ErrCorrupt, "storage has %d partitions, index %d", s.NumPartitions(), m.parts)
	}
	switch x.Distance {
	case "l2":
	case "cosine":
		m.normalize = true
	case "dot":
		m.dot = true
	default:
		return nil, errorf(x.File, ErrUnsupported, "catch-up for distance %q", x.Distance)
	}
	t := x.IVF.GetCentroidsTensor()
	if t == nil || t.GetDataType() != indexpb.Tensor_FLOAT32 || len(t.GetShape()) != 2 {
		return nil, errorf(x.File, ErrUnsupported, "catch-up needs float32 centroids of shape [partitions, dim]")
	}
	if int(t.GetShape()[0]) != m.parts || len(t.GetData()) != 4*m.parts*int(t.GetShape()[1]) {
		return nil, errorf(x.File, ErrCorrupt, "centroids of shape %v and %d bytes for %d partitions", t.GetShape(), len(t.GetData()), m.parts)
	}
	m.dim = int(t.GetShape()[1])
	m.centroids = float32s(t.GetData())
	if len(s.File.TopFields()) != 2 && s.Quantization != QuantRQ {
		return nil, errorf(s.File, ErrUnsupported, "catch-up of %s storage with %d columns", s.Quantization, len(s.File.TopFields()))
	}
	m.codeWidth = s.codeWidth()
	switch s.Quantization {
	case QuantFlat:
		f := s.File.Field(s.CodeField)
		if f == nil || f.GetLogicalType() != fmt.Sprintf("fixed_size_list:float:%d", m.dim) {
			return nil, errorf(s.File, ErrUnsupported, "FLAT storage of %v, want %d float32 values", f.GetLogicalType(), m.dim)
		}
		m.codeWidth = 4 * m.dim
	case QuantPQ:
		book, err := s.pqCodebook()
		if err != nil {
			return nil, err
		}
		k := 1 << s.PQBits
		if s.PQSubVectors == 0 || m.dim%s.PQSubVectors != 0 || len(book) != k*m.dim {
			return nil, errorf(s.File, ErrUnsupported, "PQ codebook of %d values for dim %d, %d sub-vectors of %d bits", len(book), m.dim, s.PQSubVectors, s.PQBits)
		}
		want := s.PQSubVectors
		if s.PQBits == 4 {
			want /= 2
		}
		if m.codeWidth != want || (s.PQBits == 4 && s.PQSubVectors%2 != 0) {
			return nil, errorf(s.File, ErrCorrupt, "PQ codes of %d bytes for %d sub-vectors of %d bits", m.codeWidth, s.PQSubVectors, s.PQBits)
		}
		m.book = book
		if k%8 == 0 && useSIMD { // only the vector kernels read the column-major copy
			sw := m.dim / s.PQSubVectors
			m.bookT = make([]float32, 0, len(book))
			for sub := 0; sub < s.PQSubVectors; sub++ {
				m.bookT = append(m.bookT, transposeVectors(book[sub*k*sw:(sub+1)*k*sw], k, sw)...)
			}
		}
		m.residual = !m.dot
	case QuantSQ:
		var err error
		if m.sqStart, m.sqEnd, err = s.sqBounds(); err != nil {
			return nil, err
		}
		if m.codeWidth != m.dim {
			return nil, errorf(s.File, ErrUnsupported, "SQ codes of %d bytes for dim %d", m.codeWidth, m.dim)
		}
	case QuantRQ:
		var err error
		if m.rq, err = newRQModel(s, m.dim, m.centroids, m.dot); err != nil {
			return nil, err
		}
		if m.codeWidth != m.dim/8 {
			return nil, errorf(s.File, ErrCorrupt, "RQ codes of %d bytes for dim %d", m.codeWidth, m.dim)
		}
		m.factors, m.exWidth = rqBaseFactors, m.rq.exWidth
		if m.exWidth > 0 {
			m.factors = rqTotalFactors
		}
	default:
		return nil, errorf(s.File, ErrUnsupported, "catch-up of %s storage", s.Quantization)
	}
	if m.codeWidth <= 0 {
		return nil, errorf(s.File, ErrUnsupported, "codes are not a fixed-size list")
	}
	if x.SubIndex == "HNSW" && s.Quantization == QuantFlat {
		return nil, errorf(x.File, ErrUnsupported, "catch-up of HNSW over FLAT storage")
	}
	return m, nil
}

// Shares checks that another segment of the index (its index.idx x and
// auxiliary.idx s) holds codes of this model: the same distance, index
// type, centroids and quantizer (PQ codebook, SQ bounds), so its stored
// rows can be merged with rows this model encodes. Segments lance's
// optimize() adds as deltas share their model; an error names what
// differs.
func (m *Model) Shares(x *IndexFile, s *StorageFile) error {
	switch {
	case x.Distance != m.x.Distance || x.Type != m.x.Type || x.SubIndex != m.x.SubIndex:
		return errorf(x.File, ErrUnsupported, "segment is %s/%s (%s), the model %s/%s (%s)", x.Type, x.SubIndex, x.Distance, m.x.Type, m.x.SubIndex, m.x.Distance)
	case s.Quantization != m.s.Quantization || s.codeWidth() != m.s.codeWidth() || s.NumPartitions() != m.parts:
		return errorf(s.File, ErrUnsupported, "segment stores %s codes of %d bytes in %d partitions, the model %s of %d in %d", s.Quantization, s.codeWidth(), s.NumPartitions(), m.s.Quantization, m.s.codeWidth(), m.parts)
	}
	if t := x.IVF.GetCentroidsTensor(); t == nil || !bytes.Equal(t.GetData(), m.x.IVF.GetCentroidsTensor().GetData()) {
		return errorf(x.File, ErrUnsupported, "segment has other IVF centroids than the model (trained apart): merging needs a retrain")
	}
	switch s.Quantization {
	case QuantPQ:
		book, err := s.pqCodebook()
		if err != nil {
			return err
		}
		if !slices.Equal(book, m.book) || s.PQBits != m.s.PQBits || s.PQSubVectors != m.s.PQSubVectors {
			return errorf(s.File, ErrUnsupported, "segment has another PQ codebook than the model: merging needs a retrain")
		}
	case QuantSQ:
		start, end, err := s.sqBounds()
		if err != nil {
			return err
		}
		if start != m.sqStart || end != m.sqEnd {
			return errorf(s.File, ErrUnsupported, "segment has SQ bounds [%g, %g], the model [%g, %g]: merging needs a retrain", start, end, m.sqStart, m.sqEnd)
		}
	case QuantRQ:
		a, err := parseRQMetadata(s)
		if err != nil {
			return err
		}
		b, _ := parseRQMetadata(m.s)
		if a.RotationType != b.RotationType || a.CodeDim != b.CodeDim || a.NumBits != b.NumBits || a.QueryEstimator != b.QueryEstimator || !bytes.Equal(a.Signs, b.Signs) || s.RQPacked != m.s.RQPacked {
			return errorf(s.File, ErrUnsupported, "segment has another RaBitQ rotation than the model: merging needs a retrain")
		}
	}
	return nil
}

// Dim is the vector dimension the model expects.
func (m *Model) Dim() int { return m.dim }

// Partitions is the number of IVF partitions.
func (m *Model) Partitions() int { return m.parts }

// Type is the index type (lance:index "type"), e.g. IVF_PQ.
func (m *Model) Type() string { return m.x.Type }

func float32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// nearest returns the index of the nearest of the n vectors of width len(v)
// in set (the first on ties, like lance's argmin), by the model's distance:
// squared L2, or dot distance (1 - x·y).
func (m *Model) nearest(set []float32, n int, v []float32) int {
	if m.dot {
		return nearestDot(set, n, v)
	}
	return nearestL2(set, n, v)
}

// prepare applies lance's transforms before assignment to v in place:
// normalized for cosine; false when the result is not finite (lance drops
// the vector).
func (m *Model) prepare(v []float32) bool {
	if m.normalize {
		var n float32
		for _, x := range v {
			n += x * x
		}
		n = float32(math.Sqrt(float64(n)))
		for i := range v {
			v[i] /= n
		}
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// encode assigns v to its partition and writes its stored code into code
// (Model's code width) and, for RQ, its factors into factors, returning
// the partition and v's distance to its centroid (the model's distance);
// false when lance's transforms drop the vector (not finite after
// normalizing). v is
// modified (normalized, residual); buf is scratch of 1 << PQBits values (PQ
// codebook distances) or, for RQ, of the dimension.
func (m *Model) encode(v []float32, code, ex []byte, factors, buf []float32, exs *rqExScratch) (int, float32, bool) {
	if !m.prepare(v) {
		return 0, 0, false
	}
	p := m.nearest(m.centroids, m.parts, v)
	dist := m.distance(v, p)
	switch m.s.Quantization {
	case QuantFlat:
		for i, x := range v {
			binary.LittleEndian.PutUint32(code[4*i:], math.Float32bits(x))
		}
	case QuantSQ:
		r := m.sqEnd - m.sqStart
		for i, x := range v {
			if r == 0 {
				code[i] = 0
				continue
			}
			f := (float64(x) - m.sqStart) * 255 / r
			switch {
			case math.IsNaN(f) || f <= 0:
				code[i] = 0
			case f >= 255:
				code[i] = 255
			default:
				code[i] = byte(f)
			}
		}
	case QuantRQ:
		c := m.centroids[p*m.dim : (p+1)*m.dim]
		var normSq float32
		for i := range v {
			v[i] -= c[i]
			normSq += float32(v[i] * v[i])
		}
		// lance's res_norm_square: L2, the squared distance to the
		// centroid (|v-c|^2); dot, |v-c|^2 too (norm_squared_fsl).
		m.rq.encode(v, p, normSq, code, ex, factors, buf, exs)
	case QuantPQ:
		if m.residual {
			c := m.centroids[p*m.dim : (p+1)*m.dim]
			for i := range v {
				v[i] -= c[i]
			}
		}
		k := 1 << m.s.PQBits
		subs := m.s.PQSubVectors
		sw := m.dim / subs
		for sub := 0; sub < subs; sub++ {
			sv := v[sub*sw : (sub+1)*sw]
			c, ok := 0, false
			if m.bookT != nil {
				c, ok = nearestColumns(m.bookT[sub*k*sw:(sub+1)*k*sw], k, sv, buf, m.dot)
			}
			if !ok {
				c = m.nearest(m.book[sub*k*sw:(sub+1)*k*sw], k, sv)
			}
			if m.s.PQBits == 4 {
				if sub%2 == 0 {
					code[sub/2] = byte(c)
				} else {
					code[sub/2] |= byte(c) << 4
				}
			} else {
				code[sub] = byte(c)
			}
		}
	}
	return p, dist, true
}

// Delta collects encoded rows per partition and writes them as one new
// segment. Memory: 8 bytes plus the code width (and, for RQ, 12 bytes of
// factors) per row added; a caller bounds it by the rows it adds (one
// catch-up task's fragments).
type Delta struct {
	m       *Model
	ids     [][]uint64
	codes   [][]byte
	factors [][]float32 // RQ: the model's factors per row
	ex      [][]byte    // multi-bit RQ: the blocked ex codes per row
	// Workers is how many goroutines encode one added batch (0: GOMAXPROCS).
	Workers int
	// per-batch scratch, reused: each row's partition (-1: dropped), code
	// and factors
	part []int32
	code []byte
	exc  []byte
	fact []float32
	// Rows counts the rows added; Dropped those lance's transforms drop
	// (null or not finite).
	Rows, Dropped uint64
	// Far counts the added rows farther from their nearest centroid than
	// the bound SetDriftBound set (see DriftReference); far is per-batch
	// scratch.
	Far      uint64
	farBound float32
	measure  bool
	far      []bool
}

// SetDriftBound makes Add count the rows whose distance to their nearest
// centroid is above bound (Far).
func (d *Delta) SetDriftBound(bound float32) {
	d.farBound, d.measure = bound, true
}

// NewDelta starts an empty delta segment on the model.
func (m *Model) NewDelta() *Delta {
	return &Delta{m: m, ids: make([][]uint64, m.parts), codes: make([][]byte, m.parts), factors: make([][]float32, m.parts), ex: make([][]byte, m.parts)}
}

// Bytes is the memory the collected rows hold.
func (d *Delta) Bytes() int64 {
	return int64(d.Rows) * int64(8+d.m.codeWidth+d.m.exWidth+4*d.m.factors)
}

// encodeChunkRows is the fewest rows worth a goroutine of their own.
const encodeChunkRows = 64

// Add encodes the vectors of a column (a fixed-size list of float32 of
// the model's dimension) with their row ids. Null vectors are dropped, as
// lance's optimize scans new rows with "column IS NOT NULL". The batch is
// encoded by up to Workers goroutines over contiguous row ranges, then
// appended in row order (the result does not depend on Workers); memory
// beyond the kept codes is one batch's partitions and codes.
// vectorValues checks that col holds float32 vectors of the model's
// dimension and returns them with its values and the offset of its first
// row's first value; what names the caller in errors.
func (m *Model) vectorValues(col arrow.Array, what string) (*array.FixedSizeList, []float32, int, error) {
	fl, ok := col.(*array.FixedSizeList)
	if !ok {
		return nil, nil, 0, fmt.Errorf("%w: %s vectors are %s, want a fixed-size list", ErrUnsupported, what, col.DataType())
	}
	if n := fl.DataType().(*arrow.FixedSizeListType).Len(); int(n) != m.dim {
		return nil, nil, 0, fmt.Errorf("%w: vectors of dimension %d, the index has %d", ErrCorrupt, n, m.dim)
	}
	vals, ok := fl.ListValues().(*array.Float32)
	if !ok {
		return nil, nil, 0, fmt.Errorf("%w: %s of %s vectors (float32 only)", ErrUnsupported, what, fl.DataType())
	}
	all := vals.Float32Values()
	base := fl.Data().Offset() * m.dim
	if len(all) < base+fl.Len()*m.dim {
		return nil, nil, 0, fmt.Errorf("%w: %d vector values for %d rows of dimension %d", ErrCorrupt, len(all)-base, fl.Len(), m.dim)
	}
	return fl, all, base, nil
}

func (d *Delta) Add(ids []uint64, col arrow.Array) error {
	if col.Len() != len(ids) {
		return fmt.Errorf("%w: catch-up vectors: %d rows for %d ids", ErrUnsupported, col.Len(), len(ids))
	}
	fl, all, base, err := d.m.vectorValues(col, "catch-up")
	if err != nil {
		return err
	}
	n, dim, cw, ew := len(ids), d.m.dim, d.m.codeWidth, d.m.exWidth
	if cap(d.part) < n {
		d.part = make([]int32, n)
	}
	if cap(d.code) < n*cw {
		d.code = make([]byte, n*cw)
	}
	if cap(d.exc) < n*ew {
		d.exc = make([]byte, n*ew)
	}
	nf := d.m.factors
	if cap(d.fact) < n*nf {
		d.fact = make([]float32, n*nf)
	}
	if cap(d.far) < n {
		d.far = make([]bool, n)
	}
	part, code, exc, fact, far := d.part[:n], d.code[:n*cw], d.exc[:n*ew], d.fact[:n*nf], d.far[:n]
	encode := func(lo, hi int) {
		vec := make([]float32, dim)
		var buf []float32
		var exs *rqExScratch
		switch {
		case d.m.bookT != nil:
			buf = make([]float32, 1<<d.m.s.PQBits)
		case d.m.rq != nil:
			buf, exs = make([]float32, dim), d.m.rq.newExScratch(dim)
		}
		for i := lo; i < hi; i++ {
			part[i] = -1
			if fl.IsNull(i) {
				continue
			}
			copy(vec, all[base+i*dim:base+(i+1)*dim])
			if p, dist, ok := d.m.encode(vec, code[i*cw:(i+1)*cw], exc[i*ew:(i+1)*ew], fact[i*nf:(i+1)*nf], buf, exs); ok {
				part[i] = int32(p)
				far[i] = d.measure && dist > d.farBound
			}
		}
	}
	workers := d.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, n/encodeChunkRows))
	if workers == 1 {
		encode(0, n)
	} else {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			lo, hi := n*w/workers, n*(w+1)/workers
			wg.Go(func() { encode(lo, hi) })
		}
		wg.Wait()
	}
	for i, id := range ids {
		p := part[i]
		if p < 0 {
			d.Dropped++
			continue
		}
		d.ids[p] = append(d.ids[p], id)
		d.codes[p] = append(d.codes[p], code[i*cw:(i+1)*cw]...)
		d.factors[p] = append(d.factors[p], fact[i*nf:(i+1)*nf]...)
		d.ex[p] = append(d.ex[p], exc[i*ew:(i+1)*ew]...)
		d.Rows++
		if far[i] {
			d.Far++
		}
	}
	return nil
}

// Layout decides, from the rows every existing segment holds per partition
// (existing[p]) plus the delta's, how lance's optimize would lay the
// catch-up out: ErrSplit when a partition passes lance's split bound
// (MAX_PARTITION_SIZE_FACTOR x the type's target partition size); merge
// (with the reason) when the smallest partition is under a quarter of the
// target, where lance joins it and merges every segment; else a delta.
func (d *Delta) Layout(existing []uint64) (merge bool, why string, err error) {
	target := targetPartitionSize(d.m.x.Type)
	limit := maxPartitionSizeFactor * target
	smallest, at := uint64(math.MaxUint64), -1
	for p := range d.ids {
		n := uint64(len(d.ids[p]))
		if p < len(existing) {
			n += existing[p]
		}
		if n > limit {
			return false, "", fmt.Errorf("%w: partition %d would hold %d rows > %d (%d x %s's target partition size); lance's optimize() splits it and merges every segment", ErrSplit, p, n, limit, maxPartitionSizeFactor, d.m.x.Type)
		}
		if n < smallest {
			smallest, at = n, p
		}
	}
	if len(d.ids) > 1 && smallest < target/4 {
		return true, fmt.Sprintf("partition %d holds %d rows < %d (a quarter of %s's target partition size): lance joins it and merges every segment", at, smallest, target/4, d.m.x.Type), nil
	}
	return false, "", nil
}

// Write writes the new segment: auxiliary.idx to storageOut (the model's
// storage schema, metadata and global buffers; per partition the stored
// rows of each of bases in order, then the delta's rows) and index.idx to
// indexOut (FLAT: the model's index.idx, which holds only the centroids;
// HNSW: one graph per partition built over its rows with the index's
// stored build parameters). bases are the segments merged into the new one
// (none for a delta; their storage must match the model's); memory is one
// partition of theirs at a time. seed makes the HNSW levels reproducible.
// A nil indexOut writes auxiliary.idx alone (an intermediate delta that
// only a later Write reads as a base: no graphs built).
func (d *Delta) Write(ctx context.Context, bases []*StorageFile, storageOut, indexOut io.Writer, seed uint64) (Result, error) {
	var res Result
	m := d.m
	s := m.s
	for _, base := range bases {
		if base.NumPartitions() != m.parts || base.Quantization != s.Quantization || base.codeWidth() != s.codeWidth() ||
			base.PQTransposed != s.PQTransposed || len(base.File.TopFields()) != len(s.File.TopFields()) {
			return res, errorf(base.File, ErrUnsupported, "segment to merge does not match the model's storage (%s, %d partitions)", base.Quantization, base.NumPartitions())
		}
	}
	var hb *hnswRebuild
	if m.x.SubIndex == "HNSW" && indexOut != nil {
		var err error
		if hb, err = newHNSWRebuild(m.x, s, indexOut, seed, maps.Clone(meta(m.x.File))); err != nil {
			return res, err
		}
	}
	wr, err := newFileWriter(s.File, storageOut, maps.Clone(meta(s.File)))
	if err != nil {
		return res, err
	}
	sc, err := s.File.Schema()
	if err != nil {
		return res, err
	}
	// The bases are read in partition order, each through one sequential
	// reader (a page shared by partitions is decoded once), sharing one
	// read-ahead budget.
	streams := make([]*partitionStream, len(bases))
	for i, base := range bases {
		if streams[i], err = base.newPartitionStream(ctx, index.PartRange{Lo: 0, Hi: base.NumPartitions()}, index.MergeReadWindow(len(bases))); err != nil {
			return res, err
		}
		defer streams[i].release()
	}
	for p := range d.ids {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rec, err := d.partition(ctx, sc, streams, p)
		if err != nil {
			return res, err
		}
		n := uint64(rec.NumRows())
		if rec.NumRows() > 0 {
			err = wr.Write(rec)
		}
		if err == nil && hb != nil {
			kept := make([]int, rec.NumRows())
			for i := range kept {
				kept[i] = i
			}
			err = hb.partition(p, rec, kept)
		}
		rec.Release()
		if err != nil {
			return res, err
		}
		// The partition is written: free it.
		res.Storage.Lengths = append(res.Storage.Lengths, uint32(n))
		res.Storage.Rows += n
		d.ids[p], d.codes[p], d.factors[p], d.ex[p] = nil, nil, nil, nil
	}
	if res.Storage.Size, err = s.finish(wr, res.Storage.Lengths); err != nil {
		return res, err
	}
	if hb != nil {
		res.IndexSize, err = hb.finish()
		return res, err
	}
	if indexOut == nil {
		return res, nil
	}
	if err := CopyIndexFile(m.x, indexOut); err != nil {
		return res, err
	}
	res.IndexSize = m.x.File.Size()
	return res, nil
}

// partition builds partition p's storage record in the storage schema:
// the bases' rows of the partition, then the delta's.
func (d *Delta) partition(ctx context.Context, sc *arrow.Schema, bases []*partitionStream, p int) (arrow.RecordBatch, error) {
	m := d.m
	// Sized for the partition's rows up front (no doubling).
	n := len(d.ids[p])
	for _, ps := range bases {
		n += int(ps.s.IVF.GetLengths()[p])
	}
	var r storedRows
	if n > len(d.ids[p]) {
		r = storedRows{ids: make([]uint64, 0, n), codes: make([]byte, 0, n*m.codeWidth), factors: make([]float32, 0, n*m.factors), ex: make([]byte, 0, n*m.exWidth)}
	}
	for _, ps := range bases {
		base := ps.s
		if base.IVF.GetLengths()[p] == 0 {
			continue
		}
		rec, err := ps.read(ctx, p)
		if err != nil {
			return nil, err
		}
		b := baseRows(base, rec, m.factors, m.exWidth)
		if b == nil {
			rec.Release()
			return nil, errorf(base.File, ErrUnsupported, "partition %d: row ids, codes or factors unreadable", p)
		}
		// Copied out before the record (which b's slices view) is freed.
		r.ids = append(r.ids, b.ids...)
		r.codes = append(r.codes, b.codes...)
		r.factors = append(r.factors, b.factors...)
		r.ex = append(r.ex, b.ex...)
		rec.Release()
	}
	if r.ids == nil {
		r = storedRows{ids: d.ids[p], codes: d.codes[p], factors: d.factors[p], ex: d.ex[p]}
	} else {
		r.ids = append(r.ids, d.ids[p]...)
		r.codes = append(r.codes, d.codes[p]...)
		r.factors = append(r.factors, d.factors[p]...)
		r.ex = append(r.ex, d.ex[p]...)
	}
	return m.storageRecord(sc, r)
}

// storedRows are a partition's rows: ids, codes row-major (and, for RQ,
// factors row by row and multi-bit ex codes row-major).
type storedRows struct {
	ids     []uint64
	codes   []byte
	factors []float32
	ex      []byte
}

// storageRecord builds the storage record of rows r in the storage schema
// sc.
func (m *Model) storageRecord(sc *arrow.Schema, r storedRows) (arrow.RecordBatch, error) {
	s := m.s
	n := len(r.ids)
	codes := r.codes
	cols := make([]arrow.Array, sc.NumFields())
	release := func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}
	for i, f := range sc.Fields() {
		switch fi := slices.Index(rqFactorColumns, f.Name); {
		case f.Name == RowIDColumn:
			if f.Type.ID() != arrow.UINT64 {
				release()
				return nil, errorf(s.File, ErrUnsupported, "%s is %s", RowIDColumn, f.Type)
			}
			ids := append([]uint64(nil), r.ids...)
			cols[i] = array.NewUint64Data(array.NewData(arrow.PrimitiveTypes.Uint64, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Uint64Traits.CastToBytes(ids))}, nil, 0, 0))
		case f.Name == s.codeColumnName() || (m.exWidth > 0 && f.Name == rqExCodeColumn):
			t, ok := f.Type.(*arrow.FixedSizeListType)
			if !ok {
				release()
				return nil, errorf(s.File, ErrUnsupported, "code column %s is %s", f.Name, f.Type)
			}
			codes := codes
			switch {
			case f.Name == rqExCodeColumn:
				codes = r.ex
			case s.Quantization == QuantPQ && s.PQTransposed:
				tr := make([]byte, len(codes))
				transpose(tr, codes, n, m.codeWidth)
				codes = tr
			case s.Quantization == QuantRQ && s.RQPacked:
				pk := make([]byte, len(codes))
				rqPack(pk, codes, n, m.codeWidth)
				codes = pk
			}
			// Bytes per row: the list's length times its element's width
			// (1 for uint8 codes, 4 for IVF_FLAT's float32 vectors).
			ew, ok := t.Elem().(arrow.FixedWidthDataType)
			if !ok {
				release()
				return nil, errorf(s.File, ErrUnsupported, "code column %s is %s", f.Name, f.Type)
			}
			if len(codes) != n*int(t.Len())*ew.Bytes() {
				release()
				return nil, errorf(s.File, ErrCorrupt, "column %s: %d bytes for %d rows of %d × %s", f.Name, len(codes), n, t.Len(), t.Elem())
			}
			ch := array.NewData(t.Elem(), n*int(t.Len()), []*memory.Buffer{nil, memory.NewBufferBytes(codes)}, nil, 0, 0)
			ld := array.NewData(t, n, []*memory.Buffer{nil}, []arrow.ArrayData{ch}, 0, 0)
			cols[i] = array.MakeFromData(ld)
			ch.Release()
			ld.Release()
		case fi >= 0 && fi < m.factors && f.Type.ID() == arrow.FLOAT32:
			col := make([]float32, n)
			for row := range col {
				col[row] = r.factors[row*m.factors+fi]
			}
			cols[i] = array.NewFloat32Data(array.NewData(arrow.PrimitiveTypes.Float32, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Float32Traits.CastToBytes(col))}, nil, 0, 0))
		default:
			release()
			return nil, errorf(s.File, ErrUnsupported, "storage column %s", f.Name)
		}
	}
	rec := array.NewRecordBatch(sc, cols, int64(n))
	release()
	return rec, nil
}

// baseRows returns a stored partition's row ids, row codes (row-major)
// and, with nf factor columns (RQ), the factors row by row and, with ex
// codes of exWidth bytes (multi-bit RQ), the ex codes row-major; nil when
// a column is missing or unreadable.
func baseRows(s *StorageFile, rec arrow.RecordBatch, nf, exWidth int) *storedRows {
	n := int(rec.NumRows())
	r := &storedRows{}
	if nf > 0 {
		r.factors = make([]float32, n*nf)
	}
	found := 0
	for i, f := range rec.Schema().Fields() {
		switch fi := slices.Index(rqFactorColumns, f.Name); {
		case f.Name == RowIDColumn:
			if c, ok := rec.Column(i).(*array.Uint64); ok && c.NullN() == 0 {
				r.ids = c.Uint64Values()
			}
		case f.Name == s.codeColumnName():
			rows := RowCodes(s, rec.Column(i))
			if len(rows) != n {
				return nil
			}
			for _, c := range rows {
				r.codes = append(r.codes, c...)
			}
		case exWidth > 0 && f.Name == rqExCodeColumn:
			src, w, _, err := fixedBytes(rec.Column(i))
			if err != nil || w != exWidth || len(src) < n*w {
				return nil
			}
			r.ex = src[:n*w]
		case fi >= 0 && fi < nf:
			c, ok := rec.Column(i).(*array.Float32)
			if !ok || c.NullN() > 0 {
				return nil
			}
			for row, v := range c.Float32Values() {
				r.factors[row*nf+fi] = v
			}
			found++
		}
	}
	if found != nf || len(r.ids) != n || (n > 0 && r.codes == nil) || (exWidth > 0 && r.ex == nil) {
		return nil
	}
	return r
}

// RowCodes returns each row's stored code of a partition's code column,
// row-major (PQ codes untransposed, RQ codes unpacked); nil for an
// unreadable column.
func RowCodes(s *StorageFile, codes arrow.Array) [][]byte {
	src, w, _, err := fixedBytes(codes)
	if err != nil {
		return nil
	}
	n := codes.Len()
	rows := src
	switch {
	case s.Quantization == QuantPQ && s.PQTransposed:
		rows = make([]byte, n*w)
		untranspose(rows, src, n, w)
	case s.Quantization == QuantRQ && s.RQPacked:
		rows = make([]byte, n*w)
		rqUnpack(rows, src, n, w)
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = rows[i*w : (i+1)*w]
	}
	return out
}
