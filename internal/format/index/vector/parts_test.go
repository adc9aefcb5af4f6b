package vector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/indexpb"
)

// synthSegment is a made-up vector segment laid out as lance 8.0.0 lays
// out its files (see files.go), so parts can be checked without node: the
// oracle tests do the same on segments real Lance built.
type synthSegment struct {
	x *IndexFile
	s *StorageFile
}

const synthDim = 8

func openBytes(t *testing.T, b []byte, name string) *lancefile.File {
	t.Helper()
	f, err := lancefile.Open(bytes.NewReader(b), int64(len(b)), name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return f
}

func writeFile(t *testing.T, sc *arrow.Schema, md map[string][]byte, ver lancewrite.Version, recs []arrow.RecordBatch, bufs [][]byte) []byte {
	t.Helper()
	fields, err := lancewrite.FieldsFromArrow(sc, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := lancewrite.NewWriter(&out, fields, lancewrite.Options{Version: ver, PageBytes: 16 << 10, SchemaMetadata: md})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range bufs {
		if got, err := w.AddGlobalBuffer(b); err != nil || got != i+1 {
			t.Fatalf("global buffer %d: %d, %v", i+1, got, err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func ivfBuffer(t *testing.T, lengths []uint32) []byte {
	t.Helper()
	ivf := withLengths(&indexpb.IVF{CentroidsTensor: &indexpb.Tensor{DataType: indexpb.Tensor_FLOAT32, Shape: []uint32{uint32(len(lengths)), synthDim}, Data: make([]byte, 4*synthDim*len(lengths))}}, lengths)
	b, err := proto.Marshal(ivf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newSynthSegment writes a segment whose partition p holds rows[p] rows
// with row addresses p<<32 | i: IVF_PQ (FLAT sub-index, transposed 8-bit
// PQ codes, a codebook global buffer) or IVF_HNSW_SQ (8-bit SQ codes; the
// old index.idx has no graph rows, a remap builds them).
func newSynthSegment(t *testing.T, hnsw bool, rows []int, ver lancewrite.Version) synthSegment {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, uint64(len(rows))))
	lengths := make([]uint32, len(rows))
	code, width := "__pq_code", 4
	sm := `{"dimension":8,"codebook_position":2,"nbits":8,"num_sub_vectors":4,"distance_type":"l2","transposed":true}`
	if hnsw {
		code, width = "__sq_code", synthDim
		sm = `{"dim":8,"num_bits":8,"bounds":{"start":-1.0,"end":1.0}}`
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: RowIDColumn, Type: arrow.PrimitiveTypes.Uint64},
		{Name: code, Type: arrow.FixedSizeListOf(int32(width), arrow.PrimitiveTypes.Uint8)},
	}, nil)
	var recs []arrow.RecordBatch
	for p, n := range rows {
		lengths[p] = uint32(n)
		if n == 0 {
			continue
		}
		ids := make([]uint64, n)
		codes := make([]byte, n*width)
		for i := range ids {
			ids[i] = uint64(p)<<32 | uint64(i)
		}
		for i := range codes {
			codes[i] = byte(rng.IntN(256))
		}
		if !hnsw {
			tr := make([]byte, len(codes))
			transpose(tr, codes, n, width)
			codes = tr
		}
		idc := array.NewUint64Data(array.NewData(arrow.PrimitiveTypes.Uint64, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Uint64Traits.CastToBytes(ids))}, nil, 0, 0))
		ch := array.NewData(arrow.PrimitiveTypes.Uint8, n*width, []*memory.Buffer{nil, memory.NewBufferBytes(codes)}, nil, 0, 0)
		cd := array.NewData(sc.Field(1).Type, n, []*memory.Buffer{nil}, []arrow.ArrayData{ch}, 0, 0)
		recs = append(recs, array.NewRecordBatch(sc, []arrow.Array{idc, array.MakeFromData(cd)}, int64(n)))
	}
	bufs := [][]byte{ivfBuffer(t, lengths)}
	if !hnsw {
		book := &indexpb.Tensor{DataType: indexpb.Tensor_FLOAT32, Shape: []uint32{256, synthDim}, Data: make([]byte, 4*256*synthDim)}
		b, err := proto.Marshal(book)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	aux := writeFile(t, sc, map[string][]byte{keyIVF: []byte("1"), keyDistance: []byte("l2"), keyStorageMetadata: []byte(fmt.Sprintf("[%q]", sm))}, ver, recs, bufs)
	for _, r := range recs {
		r.Release()
	}
	// index.idx: FLAT holds no rows (lancewrite needs a field; this file
	// is copied, never read); the HNSW one starts without graphs.
	xsc := arrow.NewSchema([]arrow.Field{{Name: "__flat", Type: arrow.PrimitiveTypes.Uint32}}, nil)
	sub, key, typ := `""`, keyFlat, "IVF_PQ"
	if hnsw {
		xsc = arrow.NewSchema([]arrow.Field{
			{Name: "__vector_id", Type: arrow.PrimitiveTypes.Uint32},
			{Name: "__neighbors", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint32)},
			{Name: "_distance", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		}, nil)
		sub, key, typ = `"{\"entry_point\":0,\"params\":{\"max_level\":7,\"m\":8,\"ef_construction\":40,\"prefetch_distance\":2},\"level_offsets\":[0]}"`, keyHNSW, "IVF_HNSW_SQ"
	}
	subs := make([]string, len(rows))
	for i := range subs {
		subs[i] = sub
	}
	md := map[string][]byte{keyIVF: []byte("1"), keyIndex: []byte(`{"type":"` + typ + `","distance_type":"l2"}`), key: []byte("[" + joinStrings(subs) + "]")}
	idx := writeFile(t, xsc, md, ver, nil, [][]byte{ivfBuffer(t, make([]uint32, len(rows)))})
	x, err := OpenIndexFile(openBytes(t, idx, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStorageFile(openBytes(t, aux, AuxiliaryFileName))
	if err != nil {
		t.Fatal(err)
	}
	return synthSegment{x: x, s: s}
}

func joinStrings(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

// dropEvery maps row address a to a+1<<40 and drops every k-th row of
// each partition, and every row of partition drop.
type dropEvery struct {
	k    uint64
	drop uint64
}

func (m dropEvery) Map(a uint64) (uint64, bool) {
	if a>>32 == m.drop || (a&0xffffffff)%m.k == 0 {
		return 0, false
	}
	return a + 1<<40, true
}

// remapInParts remaps seg in the given number of parts and joins them.
func remapInParts(t *testing.T, seg synthSegment, m index.Mapping, parts int) (Result, []byte, []byte) {
	t.Helper()
	ctx := context.Background()
	ranges := index.CutRanges(seg.s.PartitionLengths(), parts)
	pieces := make([]PartPieces, len(ranges))
	for i, r := range ranges {
		var aux, idx bytes.Buffer
		if _, err := RemapPart(ctx, seg.x, seg.s, m, r, &aux, &idx, 9); err != nil {
			t.Fatalf("part %v: %v", r, err)
		}
		pieces[i].Storage = openBytes(t, aux.Bytes(), fmt.Sprintf("piece-%d-aux", i))
		if seg.x.SubIndex == "HNSW" {
			pieces[i].Index = openBytes(t, idx.Bytes(), fmt.Sprintf("piece-%d-idx", i))
		} else if idx.Len() != 0 {
			t.Fatalf("part %v of a FLAT sub-index wrote an index piece", r)
		}
	}
	var aux, idx bytes.Buffer
	res, err := JoinParts(ctx, seg.x, seg.s, pieces, &aux, &idx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Storage.Size != int64(aux.Len()) || res.IndexSize != int64(idx.Len()) {
		t.Fatalf("join reports sizes %d/%d, wrote %d/%d", res.Storage.Size, res.IndexSize, aux.Len(), idx.Len())
	}
	return res, aux.Bytes(), idx.Bytes()
}

// sameSegments compares two segments' files: schema metadata and global
// buffers equal byte for byte, and every partition's rows equal.
func sameSegments(t *testing.T, wantAux, wantIdx, gotAux, gotIdx []byte) {
	t.Helper()
	for _, pair := range [][2][]byte{{wantAux, gotAux}, {wantIdx, gotIdx}} {
		a, b := openBytes(t, pair[0], "one-task"), openBytes(t, pair[1], "parts")
		if a.NumRows() != b.NumRows() || len(a.GlobalBuffers) != len(b.GlobalBuffers) || a.Format != b.Format {
			t.Fatalf("rows %d vs %d, global buffers %d vs %d, format %v vs %v", a.NumRows(), b.NumRows(), len(a.GlobalBuffers), len(b.GlobalBuffers), a.Format, b.Format)
		}
		if !maps.EqualFunc(meta(a), meta(b), bytes.Equal) {
			t.Fatalf("schema metadata differs:\n%q\n%q", meta(a), meta(b))
		}
		for i := 1; i < len(a.GlobalBuffers); i++ {
			x, err := a.ReadBuffer(a.GlobalBuffers[i])
			if err != nil {
				t.Fatal(err)
			}
			y, err := b.ReadBuffer(b.GlobalBuffers[i])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(x, y) {
				t.Fatalf("global buffer %d differs", i)
			}
		}
		if a.NumRows() == 0 {
			continue
		}
		ivf, _, err := readIVF(a)
		if err != nil {
			t.Fatal(err)
		}
		for p := range ivf.GetLengths() {
			ra, err := readPartition(context.Background(), a, ivf, p)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := readPartition(context.Background(), b, ivf, p)
			if err != nil {
				t.Fatal(err)
			}
			if ra.NumRows() != rb.NumRows() {
				t.Fatalf("partition %d: %d rows vs %d", p, ra.NumRows(), rb.NumRows())
			}
			for c := range int(ra.NumCols()) {
				if !array.Equal(ra.Column(c), rb.Column(c)) {
					t.Fatalf("partition %d column %s differs", p, ra.ColumnName(c))
				}
			}
			ra.Release()
			rb.Release()
		}
	}
}

// TestRemapPartsEqualOneTask: a segment remapped in 1, 2, 3 and 7 parts
// and joined equals the one-task remap (same metadata and global buffers
// byte for byte, same rows per partition), for an IVF_PQ and an
// IVF_HNSW_SQ segment in both file versions, with an empty partition in
// the old segment and one the mapping empties.
func TestRemapPartsEqualOneTask(t *testing.T) {
	rows := []int{300, 0, 900, 500, 40, 1000, 250, 1}
	for _, hnsw := range []bool{false, true} {
		for _, ver := range []lancewrite.Version{lancewrite.V2_0, lancewrite.V2_1} {
			t.Run(fmt.Sprintf("hnsw=%v/v%v", hnsw, ver), func(t *testing.T) {
				seg := newSynthSegment(t, hnsw, rows, ver)
				m := dropEvery{k: 7, drop: 3}
				var aux, idx bytes.Buffer
				one, err := Remap(context.Background(), seg.x, seg.s, m, &aux, &idx, 9)
				if err != nil {
					t.Fatal(err)
				}
				if one.Storage.Lengths[3] != 0 || one.Storage.Lengths[1] != 0 {
					t.Fatalf("lengths %v: partitions 1 and 3 should be empty", one.Storage.Lengths)
				}
				for _, n := range []int{1, 2, 3, 7} {
					res, gotAux, gotIdx := remapInParts(t, seg, m, n)
					if !slices.Equal(res.Storage.Lengths, one.Storage.Lengths) || res.Storage.Rows != one.Storage.Rows {
						t.Fatalf("%d parts: lengths %v rows %d, one task %v %d", n, res.Storage.Lengths, res.Storage.Rows, one.Storage.Lengths, one.Storage.Rows)
					}
					sameSegments(t, aux.Bytes(), idx.Bytes(), gotAux, gotIdx)
				}
			})
		}
	}
}

// TestRemapPartsAllDropped: when the mapping drops every row the joined
// segment has no rows, as the one-task remap's.
func TestRemapPartsAllDropped(t *testing.T) {
	for _, hnsw := range []bool{false, true} {
		seg := newSynthSegment(t, hnsw, []int{10, 20, 30}, lancewrite.V2_1)
		m := dropEvery{k: 1, drop: 99}
		var aux, idx bytes.Buffer
		if _, err := Remap(context.Background(), seg.x, seg.s, m, &aux, &idx, 9); err != nil {
			t.Fatal(err)
		}
		res, gotAux, gotIdx := remapInParts(t, seg, m, 3)
		if res.Storage.Rows != 0 {
			t.Fatalf("rows %d", res.Storage.Rows)
		}
		sameSegments(t, aux.Bytes(), idx.Bytes(), gotAux, gotIdx)
	}
}

// TestJoinPartsRefusesBadTiling: a missing, repeated or misplaced piece
// is refused as corrupt, never joined.
func TestJoinPartsRefusesBadTiling(t *testing.T) {
	ctx := context.Background()
	seg := newSynthSegment(t, false, []int{100, 200, 300, 400}, lancewrite.V2_1)
	m := dropEvery{k: 5, drop: 99}
	var ps []PartPieces
	for _, r := range index.CutRanges(seg.s.PartitionLengths(), 3) {
		var aux bytes.Buffer
		if _, err := RemapPart(ctx, seg.x, seg.s, m, r, &aux, nil, 1); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, PartPieces{Storage: openBytes(t, aux.Bytes(), "piece")})
	}
	for name, bad := range map[string][]PartPieces{
		"missing":  {ps[0], ps[2]},
		"repeated": {ps[0], ps[1], ps[1], ps[2]},
		"order":    {ps[1], ps[0], ps[2]},
		"short":    {ps[0], ps[1]},
	} {
		_, err := JoinParts(ctx, seg.x, seg.s, bad, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// A piece of another segment (other partition count).
	other := newSynthSegment(t, false, []int{100, 200, 300}, lancewrite.V2_1)
	var aux bytes.Buffer
	if _, err := RemapPart(ctx, other.x, other.s, m, index.PartRange{Lo: 0, Hi: 3}, &aux, nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := JoinParts(ctx, seg.x, seg.s, []PartPieces{{Storage: openBytes(t, aux.Bytes(), "foreign")}}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("foreign piece: %v, want ErrCorrupt", err)
	}
	if _, err := RemapPart(ctx, seg.x, seg.s, m, index.PartRange{Lo: 2, Hi: 9}, &bytes.Buffer{}, nil, 1); err == nil {
		t.Error("a part past the last partition was written")
	}
}
