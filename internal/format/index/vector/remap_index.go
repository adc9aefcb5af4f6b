package vector

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
)

// Result describes a remapped segment: the storage file and index.idx.
type Result struct {
	Storage StorageResult
	// IndexSize is the size of the index.idx written.
	IndexSize int64
}

// Remap writes a remapped segment: auxiliary.idx to storageOut and
// index.idx to indexOut. A FLAT sub-index's index.idx is copied; an HNSW
// sub-index gets each partition's graph rebuilt from the remapped storage,
// as lance's remap does (HNSW::remap rebuilds through index_vectors with
// the partition's stored build parameters). seed makes the HNSW level draw
// reproducible. Memory: one partition (its storage rows and graph).
func Remap(ctx context.Context, x *IndexFile, s *StorageFile, m index.Mapping, storageOut, indexOut io.Writer, seed uint64) (Result, error) {
	var res Result
	if len(x.IVF.GetLengths()) != s.NumPartitions() {
		return res, errorf(x.File, ErrCorrupt, "index has %d partitions, storage %s %d", len(x.IVF.GetLengths()), s.File.Name(), s.NumPartitions())
	}
	if x.SubIndex == "FLAT" {
		sr, err := RemapStorage(ctx, s, m, storageOut, nil)
		if err != nil {
			return res, err
		}
		res.Storage = sr
		if err := CopyIndexFile(x, indexOut); err != nil {
			return res, err
		}
		res.IndexSize = x.File.Size()
		return res, nil
	}
	hb, err := newHNSWRebuild(x, s, indexOut, seed, maps.Clone(meta(x.File)))
	if err != nil {
		return res, err
	}
	sr, err := RemapStorage(ctx, s, m, storageOut, hb.partition)
	if err != nil {
		return res, err
	}
	res.Storage = sr
	if res.IndexSize, err = hb.finish(); err != nil {
		return res, err
	}
	return res, nil
}

// hnswRebuild writes index.idx partition by partition as the storage remap
// calls it back.
type hnswRebuild struct {
	x        *IndexFile
	s        *StorageFile
	w        *lancewrite.Writer
	schema   *arrow.Schema
	params   json.RawMessage
	maxLevel int
	m, ef    int
	seed     uint64
	lengths  []uint32
	meta     []string
	dist     func(rows []byte, width int) func(a, b uint32) float32
}

// newHNSWRebuild starts index.idx (schema metadata md) for the graphs of
// the partitions that follow.
func newHNSWRebuild(x *IndexFile, s *StorageFile, out io.Writer, seed uint64, md map[string][]byte) (*hnswRebuild, error) {
	if x.SubIndex != "HNSW" {
		return nil, errorf(x.File, ErrUnsupported, "sub-index %s", x.SubIndex)
	}
	// Cosine storages hold normalized vectors and measure them with L2
	// (lance's SQ and PQ distance calculators treat Cosine as L2).
	if s.Distance != "l2" && s.Distance != "cosine" {
		return nil, errorf(s.File, ErrUnsupported, "HNSW graph rebuild for distance %q (only l2 and cosine)", s.Distance)
	}
	hb := &hnswRebuild{x: x, s: s, seed: seed}
	for _, pm := range x.PartitionMeta {
		if pm == "" {
			continue
		}
		var meta struct {
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(pm), &meta); err != nil {
			return nil, errorf(x.File, ErrCorrupt, "%s: %v", keyHNSW, err)
		}
		var p struct {
			MaxLevel int `json:"max_level"`
			M        int `json:"m"`
			Ef       int `json:"ef_construction"`
		}
		if err := json.Unmarshal(meta.Params, &p); err != nil {
			return nil, errorf(x.File, ErrCorrupt, "%s params: %v", keyHNSW, err)
		}
		if p.MaxLevel < 1 || p.MaxLevel > math.MaxUint16 || p.M < 2 || p.Ef < 1 {
			return nil, errorf(x.File, ErrUnsupported, "HNSW params %s", meta.Params)
		}
		hb.params, hb.maxLevel, hb.m, hb.ef = meta.Params, p.MaxLevel, p.M, p.Ef
		break
	}
	if hb.params == nil {
		return nil, errorf(x.File, ErrUnsupported, "no partition carries HNSW build parameters")
	}
	var err error
	if hb.dist, err = s.distance(); err != nil {
		return nil, err
	}
	if hb.schema, err = x.File.Schema(); err != nil {
		return nil, err
	}
	hb.w, err = newFileWriter(x.File, out, md)
	if err != nil {
		return nil, err
	}
	return hb, nil
}

// partition builds and writes the graph of partition p's kept rows.
func (hb *hnswRebuild) partition(p int, rec arrow.RecordBatch, kept []int) error {
	if len(kept) == 0 {
		hb.lengths = append(hb.lengths, 0)
		hb.meta = append(hb.meta, "")
		return nil
	}
	var codes arrow.Array
	for i, f := range rec.Schema().Fields() {
		if f.Name == hb.s.codeColumnName() {
			codes = rec.Column(i)
		}
	}
	if codes == nil {
		return errorf(hb.s.File, ErrCorrupt, "partition %d: no code column", p)
	}
	src, w, _, err := fixedBytes(codes)
	if err != nil {
		return errorf(hb.s.File, ErrUnsupported, "partition %d codes: %v", p, err)
	}
	n := int(rec.NumRows())
	rows := src
	if hb.s.Quantization == QuantPQ && hb.s.PQTransposed {
		rows = make([]byte, n*w)
		untranspose(rows, src, n, w)
	}
	picked := make([]byte, len(kept)*w)
	for k, i := range kept {
		copy(picked[k*w:], rows[i*w:(i+1)*w])
	}
	rng := rand.New(rand.NewPCG(hb.seed, uint64(p)))
	g := buildHNSW(len(kept), hb.maxLevel, hb.m, hb.ef, hb.dist(picked, w), rng)
	rec2, err := hb.batch(g)
	if err != nil {
		return err
	}
	defer rec2.Release()
	if err := hb.w.Write(rec2); err != nil {
		return err
	}
	offs := g.levelOffsets()
	parts := make([]string, len(offs))
	for i, o := range offs {
		parts[i] = fmt.Sprint(o)
	}
	hb.meta = append(hb.meta, fmt.Sprintf(`{"entry_point":0,"params":%s,"level_offsets":[%s]}`, hb.params, strings.Join(parts, ",")))
	hb.lengths = append(hb.lengths, uint32(rec2.NumRows()))
	return nil
}

// batch lays the graph out like lance's HNSW::to_batch: level by level,
// nodes in id order, each with its ranked neighbours and their distances.
func (hb *hnswRebuild) batch(g *hnswGraph) (arrow.RecordBatch, error) {
	sc := hb.schema
	if sc.NumFields() != 3 {
		return nil, errorf(hb.x.File, ErrUnsupported, "HNSW index schema %s", sc)
	}
	nt, ok1 := sc.Field(1).Type.(*arrow.ListType)
	dt, ok2 := sc.Field(2).Type.(*arrow.ListType)
	if sc.Field(0).Type.ID() != arrow.UINT32 || !ok1 || !ok2 || nt.Elem().ID() != arrow.UINT32 || dt.Elem().ID() != arrow.FLOAT32 {
		return nil, errorf(hb.x.File, ErrUnsupported, "HNSW index schema %s", sc)
	}
	mem := memory.DefaultAllocator
	ids := array.NewUint32Builder(mem)
	nb := array.NewListBuilderWithField(mem, nt.ElemField())
	db := array.NewListBuilderWithField(mem, dt.ElemField())
	defer ids.Release()
	defer nb.Release()
	defer db.Release()
	nv, dv := nb.ValueBuilder().(*array.Uint32Builder), db.ValueBuilder().(*array.Float32Builder)
	for level := 0; level < g.maxLevel; level++ {
		for id, lv := range g.levels {
			if len(lv) <= level {
				continue
			}
			ids.Append(uint32(id))
			nb.Append(true)
			db.Append(true)
			for _, e := range lv[level] {
				nv.Append(e.id)
				dv.Append(e.dist)
			}
		}
	}
	cols := []arrow.Array{ids.NewArray(), nb.NewArray(), db.NewArray()}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	return array.NewRecordBatch(sc, cols, int64(cols[0].Len())), nil
}

func (hb *hnswRebuild) finish() (int64, error) {
	if err := copyGlobalBuffers(hb.x.File, hb.x.IVFBuffer, withLengths(hb.x.IVF, hb.lengths), hb.w); err != nil {
		return 0, err
	}
	pm, err := json.Marshal(hb.meta)
	if err != nil {
		return 0, err
	}
	hb.w.SetSchemaMetadata(keyHNSW, pm)
	res, err := hb.w.Close()
	if err != nil {
		return 0, err
	}
	return res.Size, nil
}

// distance returns the distance between two stored rows, as lance's
// storage computes it for graph construction (dist_calculator_from_id):
// SQ: squared L2 of the 8-bit codes scaled back by the bounds; PQ: squared
// L2 between the codebook reconstructions.
func (s *StorageFile) distance() (func(rows []byte, width int) func(a, b uint32) float32, error) {
	switch s.Quantization {
	case QuantSQ:
		start, end, err := s.sqBounds()
		if err != nil {
			return nil, err
		}
		if s.codeWidth() <= 0 {
			return nil, errorf(s.File, ErrUnsupported, "SQ codes are not a fixed-size list of bytes")
		}
		r := float32(end - start)
		scale := r * r / (255 * 255)
		return func(rows []byte, w int) func(a, b uint32) float32 {
			return func(a, b uint32) float32 {
				x, y := rows[int(a)*w:int(a+1)*w], rows[int(b)*w:int(b+1)*w]
				var sum uint32
				for i := range x {
					d := int32(x[i]) - int32(y[i])
					sum += uint32(d * d)
				}
				return float32(sum) * scale
			}
		}, nil
	case QuantPQ:
		book, err := s.pqCodebook()
		if err != nil {
			return nil, err
		}
		bits, subs := s.PQBits, s.PQSubVectors
		codeBytes := subs
		if bits == 4 {
			codeBytes = subs / 2
		}
		if codeBytes == 0 || (bits == 4 && subs%2 != 0) || s.codeWidth() != codeBytes {
			return nil, errorf(s.File, ErrCorrupt, "PQ codes of %d bytes for %d sub-vectors of %d bits", s.codeWidth(), subs, bits)
		}
		return func(rows []byte, w int) func(a, b uint32) float32 {
			n := len(rows) / w
			dim := len(book) / (subs * (1 << bits)) * subs
			recon := make([]float32, n*dim)
			for i := 0; i < n; i++ {
				pqReconstruct(recon[i*dim:(i+1)*dim], book, rows[i*w:(i+1)*w], bits, subs, dim)
			}
			return func(a, b uint32) float32 {
				x, y := recon[int(a)*dim:int(a+1)*dim], recon[int(b)*dim:int(b+1)*dim]
				var sum float32
				for i := range x {
					d := x[i] - y[i]
					sum += d * d
				}
				return sum
			}
		}, nil
	default:
		return nil, errorf(s.File, ErrUnsupported, "HNSW over %s storage", s.Quantization)
	}
}

// sqBounds reads the 8-bit SQ storage metadata's bounds.
func (s *StorageFile) sqBounds() (start, end float64, err error) {
	var sq struct {
		NumBits int `json:"num_bits"`
		Bounds  *struct {
			Start float64 `json:"start"`
			End   float64 `json:"end"`
		} `json:"bounds"`
	}
	if err := json.Unmarshal([]byte(s.Metadata[0]), &sq); err != nil || sq.Bounds == nil || sq.NumBits != 8 {
		return 0, 0, errorf(s.File, ErrUnsupported, "SQ storage metadata %s (want 8 bits and bounds)", s.Metadata[0])
	}
	return sq.Bounds.Start, sq.Bounds.End, nil
}

// codeWidth is the byte width of one row's codes (a fixed-size list of
// uint8), or -1.
func (s *StorageFile) codeWidth() int {
	f := s.File.Field(s.CodeField)
	if f == nil {
		return -1
	}
	var w int
	if _, err := fmt.Sscanf(f.GetLogicalType(), "fixed_size_list:uint8:%d", &w); err != nil {
		return -1
	}
	return w
}

// pqCodebook reads the PQ codebook tensor (float32) from the global buffer
// the storage metadata's codebook_position names.
func (s *StorageFile) pqCodebook() ([]float32, error) {
	var md struct {
		Pos *int `json:"codebook_position"`
	}
	if err := json.Unmarshal([]byte(s.Metadata[0]), &md); err != nil || md.Pos == nil || *md.Pos <= 0 || *md.Pos >= len(s.File.GlobalBuffers) {
		return nil, errorf(s.File, ErrUnsupported, "PQ storage metadata without a valid codebook_position: %s", s.Metadata[0])
	}
	b, err := s.File.ReadBuffer(s.File.GlobalBuffers[*md.Pos])
	if err != nil {
		return nil, err
	}
	t := &indexpb.Tensor{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, errorf(s.File, ErrCorrupt, "PQ codebook tensor: %v", err)
	}
	if t.GetDataType() != indexpb.Tensor_FLOAT32 {
		return nil, errorf(s.File, ErrUnsupported, "PQ codebook of %s", t.GetDataType())
	}
	data := t.GetData()
	want := 1 << s.PQBits
	if len(data)%4 != 0 || len(data)/4%(want*s.PQSubVectors) != 0 {
		return nil, errorf(s.File, ErrCorrupt, "PQ codebook of %d bytes for %d sub-vectors x %d centroids", len(data), s.PQSubVectors, want)
	}
	out := make([]float32, len(data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, nil
}

// pqReconstruct writes the codebook centroids of one row's codes (lance's
// get_centroids: sub-vector i's centroid c at [(i*K + c)*sw, +sw), K = 2^bits;
// 4-bit codes hold two sub-vectors per byte, low nibble first).
func pqReconstruct(dst, book []float32, code []byte, bits, subs, dim int) {
	k := 1 << bits
	sw := dim / subs
	put := func(sub, c int) {
		copy(dst[sub*sw:(sub+1)*sw], book[(sub*k+c)*sw:(sub*k+c+1)*sw])
	}
	for i, c := range code {
		if bits == 4 {
			put(2*i, int(c&0xf))
			put(2*i+1, int(c>>4))
		} else {
			put(i, int(c))
		}
	}
}
