package text

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
)

// BM25 constants of lance's scorer
// (https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/inverted/scorer.rs).
const (
	bm25K1 float32 = 1.2
	bm25B  float32 = 0.75
)

const (
	keyGroupOffsets = "posting_group_offsets_buf"
	colTokenFST     = "_token_fst_bytes"

	// Posting groups (read-path cache entries of consecutive posting lists):
	// a group is cut once the bytes of its posting blocks (positions not
	// counted) reach groupBytes or it holds groupTokens lists (lance's
	// LANCE_FTS_POSTING_GROUP_* defaults; the same cuts as lance's writer,
	// checked against its files).
	groupBytes  = 4096
	groupTokens = 256

	docsBatchRows = 64 << 10
	// Posting lists are read invertReadRows at a time (only their bytes:
	// lance writes the whole invert file as one page) and written in
	// batches of at most invertBatchRows lists or invertBatchBytes bytes
	// (lance writes 256 lists per batch): a frequent token's list alone
	// can be megabytes.
	invertReadRows   = 1
	invertBatchRows  = 256
	invertBatchBytes = 1 << 20
)

// idf is lance's BM25 inverse document frequency, in f32 like lance.
func idf(tokenDocs, numDocs int) float32 {
	n := float32(numDocs)
	t := float32(tokenDocs)
	return float32(math.Log(float64(float32(float32(n-t+0.5)/float32(t+0.5)) + 1)))
}

// blockScore is the BM25 upper bound of a block lance stores in front of
// it: the block's best freq/(freq+norm) times idf·(K1+1).
func blockScore(docs, freqs []uint32, numTokens []uint32, avgdl, idfScale float32) float32 {
	best := float32(-math.MaxFloat32)
	for i, d := range docs {
		dl := float32(numTokens[d])
		norm := float32(bm25K1 * float32(float32(1.0-bm25B)+float32(float32(bm25B*dl)/avgdl)))
		f := float32(freqs[i])
		if s := float32(f / float32(f+norm)); s > best {
			best = s
		}
	}
	return float32(best * idfScale)
}

// PartitionFiles are the three files of one partition.
type PartitionFiles struct {
	Docs, Invert, Tokens *lancefile.File
}

// PartitionWriters receive the remapped partition's files.
type PartitionWriters struct {
	Docs, Invert, Tokens io.Writer
}

// PartitionResult describes one remapped partition.
type PartitionResult struct {
	// Docs and DroppedDocs count the kept and dropped documents; Tokens and
	// DroppedTokens the kept and dropped posting lists.
	Docs, DroppedDocs, Tokens, DroppedTokens uint64
	// DocsSize, InvertSize and TokensSize are the written files' sizes.
	DocsSize, InvertSize, TokensSize int64
}

func writerOpts(f *lancefile.File) lancewrite.Options {
	v := lancewrite.V2_1
	if f.Format == lancefile.Format20 {
		v = lancewrite.V2_0
	}
	return lancewrite.Options{PageBytes: index.FilePageBytes, Version: v, SchemaMetadata: maps.Clone(meta(f))}
}

// writerLike opens a writer for a file with f's fields and schema metadata.
func writerLike(f *lancefile.File, out io.Writer) (*arrow.Schema, *lancewrite.Writer, error) {
	sc, err := f.Schema()
	if err != nil {
		return nil, nil, err
	}
	w, err := lancewrite.NewWriter(out, f.Fields(), writerOpts(f))
	return sc, w, err
}

// CheckSegment reports whether RemapPartition can remap a segment with
// this metadata: lance 8.0.0's default layout (FST token set, fixed32
// posting tails, per-document positions). Other layouts are
// ErrUnsupported with the reason.
func CheckSegment(m *Metadata) error {
	if m.TokenSetFormat != "fst" {
		return fmt.Errorf("%w: token_set_format %q (only \"fst\")", ErrUnsupported, m.TokenSetFormat)
	}
	if m.PostingTailCodec != "fixed32_v1" {
		return fmt.Errorf("%w: posting_tail_codec %q (only \"fixed32_v1\", the FTS format version 1 lance 8.0.0 writes by default)", ErrUnsupported, m.PostingTailCodec)
	}
	return nil
}

// RemapPartition writes partition files remapped through m the way lance's
// remap does (InnerBuilder::remap in
// https://github.com/lancedb/lance/blob/main/rust/lance-index/src/scalar/inverted/builder.rs):
// docs keep their order, deleted rows' docs go and later doc ids shift
// down; every posting list drops those docs and is re-blocked with block
// max scores from the new doc statistics; a list left empty is dropped and
// later token ids shift down; the token dictionary follows.
//
// Memory: the dropped doc ids (a bitmap), one u32 token count per kept doc,
// one batch of posting lists and the token dictionary (one value in lance's
// format).
func RemapPartition(ctx context.Context, in PartitionFiles, m index.Mapping, out PartitionWriters) (PartitionResult, error) {
	var res PartitionResult
	// Docs.
	dschema, err := in.Docs.Schema()
	if err != nil {
		return res, err
	}
	dw, err := lancewrite.NewWriter(out.Docs, in.Docs.Fields(), writerOpts(in.Docs))
	if err != nil {
		return res, err
	}
	mem := memory.DefaultAllocator
	rb := array.NewUint64Builder(mem)
	nb := array.NewUint32Builder(mem)
	defer rb.Release()
	defer nb.Release()
	flushDocs := func() error {
		if rb.Len() == 0 {
			return nil
		}
		r, n := rb.NewArray(), nb.NewArray()
		defer r.Release()
		defer n.Release()
		rec := array.NewRecordBatch(dschema, []arrow.Array{r, n}, int64(r.Len()))
		defer rec.Release()
		return dw.Write(rec)
	}
	var numTokens []uint32
	var totalTokens uint64
	removed, err := RemapDocs(ctx, in.Docs, m, func(row uint64, n uint32) error {
		rb.Append(row)
		nb.Append(n)
		numTokens = append(numTokens, n)
		totalTokens += uint64(n)
		if rb.Len() >= docsBatchRows {
			return flushDocs()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if dschema.NumFields() != 2 || dschema.Field(0).Type.ID() != arrow.UINT64 || dschema.Field(1).Type.ID() != arrow.UINT32 {
		return res, errorf(in.Docs, ErrUnsupported, "docs schema %s", dschema)
	}
	if err := flushDocs(); err != nil {
		return res, err
	}
	dr, err := dw.Close()
	if err != nil {
		return res, err
	}
	res.Docs, res.DroppedDocs, res.DocsSize = uint64(len(numTokens)), removed.GetCardinality(), dr.Size

	// Posting lists.
	removedTokens, invSize, err := remapInvert(ctx, in.Invert, removed, numTokens, totalTokens, out.Invert)
	if err != nil {
		return res, err
	}
	res.InvertSize = invSize
	res.DroppedTokens = removedTokens.GetCardinality()
	res.Tokens = in.Invert.NumRows() - res.DroppedTokens

	// Token dictionary.
	if res.TokensSize, err = remapTokens(ctx, in.Tokens, in.Invert.NumRows(), removedTokens, out.Tokens); err != nil {
		return res, err
	}
	return res, nil
}

// invertColumns are the posting file's columns in lance 8.0.0's V1 layout.
type invertColumns struct {
	posting, maxScore, length, position int // record column indices; position -1 without positions
}

func invertLayout(f *lancefile.File, sc *arrow.Schema) (invertColumns, error) {
	c := invertColumns{posting: -1, maxScore: -1, length: -1, position: -1}
	for i, fl := range sc.Fields() {
		switch fl.Name {
		case colPosting:
			lt, ok := fl.Type.(*arrow.ListType)
			if !ok || lt.Elem().ID() != arrow.LARGE_BINARY {
				return c, errorf(f, ErrUnsupported, "%s is %s, want list<large_binary>", fl.Name, fl.Type)
			}
			c.posting = i
		case colMaxScore:
			if fl.Type.ID() != arrow.FLOAT32 {
				return c, errorf(f, ErrUnsupported, "%s is %s", fl.Name, fl.Type)
			}
			c.maxScore = i
		case colLength:
			if fl.Type.ID() != arrow.UINT32 {
				return c, errorf(f, ErrUnsupported, "%s is %s", fl.Name, fl.Type)
			}
			c.length = i
		case colPosition:
			lt, ok := fl.Type.(*arrow.ListType)
			var inner *arrow.ListType
			if ok {
				inner, ok = lt.Elem().(*arrow.ListType)
			}
			if !ok || inner.Elem().ID() != arrow.LARGE_BINARY {
				return c, errorf(f, ErrUnsupported, "%s is %s, want list<list<large_binary>> (per-document positions)", fl.Name, fl.Type)
			}
			c.position = i
		default:
			return c, errorf(f, ErrUnsupported, "posting column %q (not lance 8.0.0's format version 1)", fl.Name)
		}
	}
	if c.posting < 0 || c.maxScore < 0 || c.length < 0 || sc.NumFields() != 3+btoi(c.position >= 0) {
		return c, errorf(f, ErrUnsupported, "posting schema %s", sc)
	}
	return c, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// remapInvert rewrites the posting file f without the documents in removed,
// renumbering the rest to their rank among the kept ones. It returns the
// tokens left without a document (their posting lists are dropped) and the
// size of the file written to out.
func remapInvert(ctx context.Context, f *lancefile.File, removed *roaring.Bitmap, numTokens []uint32, totalTokens uint64, out io.Writer) (*roaring.Bitmap, int64, error) {
	sc, err := f.Schema()
	if err != nil {
		return nil, 0, err
	}
	cols, err := invertLayout(f, sc)
	if err != nil {
		return nil, 0, err
	}
	opts := writerOpts(f)
	delete(opts.SchemaMetadata, keyGroupOffsets)
	w, err := lancewrite.NewWriter(out, f.Fields(), opts)
	if err != nil {
		return nil, 0, err
	}
	o := newInvertOutput(sc, cols)
	defer o.release()
	rm := invertRemap{
		f: f, removed: removed, numTokens: numTokens,
		numDocs: len(numTokens), avgdl: float32(totalTokens) / float32(len(numTokens)),
		removedTokens: roaring.New(), scratch: make([]uint32, blockSize),
	}

	r, err := f.NewReader(ctx, lancefile.ReadOptions{BatchRows: invertReadRows, ChunkReads: true})
	if err != nil {
		return nil, 0, err
	}
	defer r.Release()
	for r.Next() {
		in, err := readInvertBatch(f, r.RecordBatch(), cols)
		if err != nil {
			return nil, 0, err
		}
		for i := 0; i < in.rows; i++ {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
			if err := rm.token(in, i, o); err != nil {
				return nil, 0, err
			}
			if o.full() {
				if err := o.flush(w); err != nil {
					return nil, 0, err
				}
			}
		}
	}
	if err := r.Err(); err != nil {
		return nil, 0, err
	}
	if rm.read != f.NumRows() {
		return nil, 0, errorf(f, ErrCorrupt, "read %d posting lists of %d", rm.read, f.NumRows())
	}
	if err := o.flush(w); err != nil {
		return nil, 0, err
	}
	if len(rm.groupStarts) > 0 {
		id, err := w.AddGlobalBuffer(encodeGroupStarts(rm.groupStarts))
		if err != nil {
			return nil, 0, err
		}
		w.SetSchemaMetadata(keyGroupOffsets, []byte(strconv.Itoa(id)))
	}
	wr, err := w.Close()
	if err != nil {
		return nil, 0, err
	}
	return rm.removedTokens, wr.Size, nil
}

// invertBatch is one read batch of the posting file, its columns typed.
type invertBatch struct {
	rows    int
	post    *array.List        // per token: its encoded blocks
	blocks  *array.LargeBinary // the blocks of every token
	lens    *array.Uint32      // per token: its number of documents
	pos     *array.List        // per token: its documents' position lists; nil without positions
	posDocs *array.List        // per document: its position blocks
	posBin  *array.LargeBinary // the position blocks
}

func readInvertBatch(f *lancefile.File, rec arrow.RecordBatch, cols invertColumns) (invertBatch, error) {
	in := invertBatch{rows: int(rec.NumRows())}
	var ok1, ok2 bool
	in.post, ok1 = rec.Column(cols.posting).(*array.List)
	in.lens, ok2 = rec.Column(cols.length).(*array.Uint32)
	if !ok1 || !ok2 {
		return in, errorf(f, ErrCorrupt, "posting columns are %s/%s", rec.Column(cols.posting).DataType(), rec.Column(cols.length).DataType())
	}
	in.blocks, ok1 = in.post.ListValues().(*array.LargeBinary)
	if !ok1 {
		return in, errorf(f, ErrCorrupt, "posting blocks are %s", in.post.ListValues().DataType())
	}
	if cols.position >= 0 {
		in.pos, ok1 = rec.Column(cols.position).(*array.List)
		if ok1 {
			in.posDocs, ok1 = in.pos.ListValues().(*array.List)
		}
		if ok1 {
			in.posBin, ok1 = in.posDocs.ListValues().(*array.LargeBinary)
		}
		if !ok1 {
			return in, errorf(f, ErrCorrupt, "positions are %s", rec.Column(cols.position).DataType())
		}
	}
	return in, nil
}

// invertRemap carries the state of one remap through the posting lists:
// the documents removed, the scoring inputs, the token numbering and the
// token groups of the output. A posting list is streamed block by block
// (a frequent token's list holds most documents of the segment, so
// decoding it whole would make memory grow with the table).
type invertRemap struct {
	f         *lancefile.File
	removed   *roaring.Bitmap
	numTokens []uint32
	numDocs   int
	avgdl     float32

	read          uint64 // posting lists read
	written       uint32 // posting lists written (the next output token id)
	removedTokens *roaring.Bitmap

	groupStarts           []uint32
	groupSize, groupCount int

	// docs/freqs: one decoded input block; kdocs/kfreqs: the kept
	// documents not yet encoded (at most one output block).
	docs, freqs, kdocs, kfreqs, scratch []uint32
	blockBuf                            []byte
}

// token remaps the posting list of row i of in and appends it to o, or
// records the token as removed when none of its documents is kept. The
// list is read twice, a block at a time: once to count the kept documents
// (every block score depends on the token's idf, which depends on that
// count), once to renumber and encode them.
func (rm *invertRemap) token(in invertBatch, i int, o *invertOutput) error {
	a, b := in.post.ValueOffsets(i)
	length := int(in.lens.Value(i))
	if err := checkBlockCount(int(b-a), length); err != nil {
		return errorf(rm.f, ErrCorrupt, "token %d: %v", rm.read, err)
	}
	var posStart int64
	if in.pos != nil {
		pa, pb := in.pos.ValueOffsets(i)
		if int(pb-pa) != length {
			return errorf(rm.f, ErrCorrupt, "token %d: %d position lists for %d docs", rm.read, pb-pa, length)
		}
		posStart = pa
	}
	kept, err := rm.countKept(in, a, b, length)
	if err != nil {
		return err
	}
	rm.read++
	if kept == 0 {
		rm.removedTokens.Add(uint32(rm.read - 1))
		return nil
	}
	o.startPostings()
	if in.pos != nil {
		o.pos.Append(true)
	}
	idfScale := float32(idf(kept, rm.numDocs) * (bm25K1 + 1))
	maxScore := float32(-math.MaxFloat32)
	size := 0
	rm.kdocs, rm.kfreqs = rm.kdocs[:0], rm.kfreqs[:0]
	doc := 0 // the document's index in the token's list
	for k := a; k < b; k++ {
		rm.docs, rm.freqs, _ = decodeBlock(rm.docs[:0], rm.freqs[:0], in.blocks.Value(int(k)), int(k-a), length, rm.scratch)
		for j, d := range rm.docs {
			if !rm.removed.Contains(d) {
				rm.kdocs = append(rm.kdocs, d-uint32(rm.removed.Rank(d)))
				rm.kfreqs = append(rm.kfreqs, rm.freqs[j])
				if in.pos != nil {
					o.appendPositions(in, posStart+int64(doc))
				}
				if len(rm.kdocs) == blockSize {
					size += o.appendBlock(rm, idfScale, &maxScore)
				}
			}
			doc++
		}
	}
	if len(rm.kdocs) > 0 {
		size += o.appendBlock(rm, idfScale, &maxScore)
	}
	o.maxScore.Append(maxScore)
	o.length.Append(uint32(kept))
	rm.group(size)
	rm.written++
	o.rows++
	return nil
}

// countKept decodes the blocks a..b of a posting list of length documents
// and returns how many of its documents are not removed, checking that doc
// ids increase and stay below the segment's documents.
func (rm *invertRemap) countKept(in invertBatch, a, b int64, length int) (int, error) {
	kept := 0
	prev := int64(-1)
	for k := a; k < b; k++ {
		var err error
		rm.docs, rm.freqs, err = decodeBlock(rm.docs[:0], rm.freqs[:0], in.blocks.Value(int(k)), int(k-a), length, rm.scratch)
		if err != nil {
			return 0, errorf(rm.f, ErrCorrupt, "token %d: %v", rm.read, err)
		}
		for _, d := range rm.docs {
			if int64(d) <= prev {
				return 0, errorf(rm.f, ErrCorrupt, "token %d: doc ids not increasing (%d after %d)", rm.read, d, prev)
			}
			prev = int64(d)
			if rm.removed.Contains(d) {
				continue
			}
			if nd := d - uint32(rm.removed.Rank(d)); int(nd) >= rm.numDocs {
				return 0, errorf(rm.f, ErrCorrupt, "token %d: doc %d past the %d docs", rm.read, d, rm.numDocs+int(rm.removed.GetCardinality()))
			}
			kept++
		}
	}
	return kept, nil
}

// group counts a written posting list of size bytes into the current token
// group, starting a new group when it is full.
func (rm *invertRemap) group(size int) {
	if rm.groupCount == 0 {
		rm.groupStarts = append(rm.groupStarts, rm.written)
	}
	rm.groupSize += size
	rm.groupCount++
	if rm.groupSize >= groupBytes || rm.groupCount >= groupTokens {
		rm.groupSize, rm.groupCount = 0, 0
	}
}

// invertOutput builds the batches of the rewritten posting file.
type invertOutput struct {
	sc         *arrow.Schema
	cols       invertColumns
	post       *array.ListBuilder
	postBlocks *array.BinaryBuilder
	maxScore   *array.Float32Builder
	length     *array.Uint32Builder
	pos        *array.ListBuilder // nil without positions
	posDocs    *array.ListBuilder
	posBin     *array.BinaryBuilder
	rows       int
	batchBytes int
}

func newInvertOutput(sc *arrow.Schema, cols invertColumns) *invertOutput {
	mem := memory.DefaultAllocator
	o := &invertOutput{sc: sc, cols: cols}
	o.post = array.NewBuilder(mem, sc.Field(cols.posting).Type).(*array.ListBuilder)
	o.postBlocks = o.post.ValueBuilder().(*array.BinaryBuilder)
	o.maxScore = array.NewFloat32Builder(mem)
	o.length = array.NewUint32Builder(mem)
	if cols.position >= 0 {
		o.pos = array.NewBuilder(mem, sc.Field(cols.position).Type).(*array.ListBuilder)
		o.posDocs = o.pos.ValueBuilder().(*array.ListBuilder)
		o.posBin = o.posDocs.ValueBuilder().(*array.BinaryBuilder)
	}
	return o
}

func (o *invertOutput) release() {
	o.post.Release()
	o.maxScore.Release()
	o.length.Release()
	if o.pos != nil {
		o.pos.Release()
	}
}

// startPostings starts the next posting list.
func (o *invertOutput) startPostings() { o.post.Append(true) }

// appendBlock encodes rm's pending kept documents as the posting list's
// next block (a full one, or the last, shorter one), raises maxScore to its
// score, empties the pending documents and returns the encoded size.
func (o *invertOutput) appendBlock(rm *invertRemap, idfScale float32, maxScore *float32) int {
	score := blockScore(rm.kdocs, rm.kfreqs, rm.numTokens, rm.avgdl, idfScale)
	*maxScore = max(*maxScore, score)
	if len(rm.kdocs) == blockSize {
		rm.blockBuf = encodeFull(rm.blockBuf[:0], rm.kdocs, rm.kfreqs, score, rm.scratch)
	} else {
		rm.blockBuf = encodeTail(rm.blockBuf[:0], rm.kdocs, rm.kfreqs, score)
	}
	o.postBlocks.Append(rm.blockBuf)
	o.batchBytes += len(rm.blockBuf)
	rm.kdocs, rm.kfreqs = rm.kdocs[:0], rm.kfreqs[:0]
	return len(rm.blockBuf)
}

// appendPositions copies the position list of one kept document (row doc
// of in.posDocs) into the current token's positions.
func (o *invertOutput) appendPositions(in invertBatch, doc int64) {
	qa, qb := in.posDocs.ValueOffsets(int(doc))
	o.posDocs.Append(true)
	for q := qa; q < qb; q++ {
		v := in.posBin.Value(int(q))
		o.batchBytes += len(v)
		o.posBin.Append(v)
	}
}

func (o *invertOutput) full() bool {
	return o.rows >= invertBatchRows || o.batchBytes >= invertBatchBytes
}

// flush writes the rows built so far as one batch.
func (o *invertOutput) flush(w *lancewrite.Writer) error {
	if o.rows == 0 {
		return nil
	}
	arrs := make([]arrow.Array, o.sc.NumFields())
	arrs[o.cols.posting], arrs[o.cols.maxScore], arrs[o.cols.length] = o.post.NewArray(), o.maxScore.NewArray(), o.length.NewArray()
	if o.pos != nil {
		arrs[o.cols.position] = o.pos.NewArray()
	}
	rec := array.NewRecordBatch(o.sc, arrs, int64(o.rows))
	for _, a := range arrs {
		a.Release()
	}
	defer rec.Release()
	o.rows, o.batchBytes = 0, 0
	return w.Write(rec)
}

// readTokenSet reads the FST token file's single row.
func readTokenSet(ctx context.Context, f *lancefile.File) (fst []byte, t *Tokens, err error) {
	t, err = ReadTokens(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	id, ok := fieldID(f, colTokenFST)
	if !ok {
		return nil, nil, errorf(f, ErrUnsupported, "no %s column", colTokenFST)
	}
	rec, err := f.ReadAll(ctx, []int32{id})
	if err != nil {
		return nil, nil, err
	}
	defer rec.Release()
	col, ok := rec.Column(0).(*array.LargeBinary)
	if !ok || col.Len() != 1 {
		return nil, nil, errorf(f, ErrCorrupt, "%s is %s", colTokenFST, rec.Column(0).DataType())
	}
	return append([]byte(nil), col.Value(0)...), t, nil
}

func remapTokens(ctx context.Context, f *lancefile.File, numTokens uint64, removed *roaring.Bitmap, out io.Writer) (int64, error) {
	fst, t, err := readTokenSet(ctx, f)
	if err != nil {
		return 0, err
	}
	rd, err := newFSTReader(fst)
	if err != nil {
		return 0, errorf(f, ErrCorrupt, "token dictionary: %v", err)
	}
	if rd.len != numTokens {
		return 0, errorf(f, ErrCorrupt, "token dictionary has %d tokens, posting file %d", rd.len, numTokens)
	}
	nextID, total := t.NextID, t.TotalLength
	if !removed.IsEmpty() {
		b := newFSTBuilder()
		total = 0
		seen := roaring.New()
		err := rd.each(func(key []byte, val uint64) error {
			if val >= numTokens || seen.Contains(uint32(val)) {
				return fmt.Errorf("token %q has id %d (of %d, or twice)", key, val, numTokens)
			}
			seen.Add(uint32(val))
			if removed.Contains(uint32(val)) {
				return nil
			}
			total += uint64(len(key))
			return b.insert(key, val-removed.Rank(uint32(val)))
		})
		if err != nil {
			return 0, errorf(f, ErrCorrupt, "token dictionary: %v", err)
		}
		fst = b.finish()
		nextID = uint32(numTokens - removed.GetCardinality())
	}
	return writeTokenFile(f, fst, nextID, total, out)
}

// writeTokenFile writes a token file with f's schema: one row of the FST
// bytes, the next token id and the summed token length.
func writeTokenFile(f *lancefile.File, fst []byte, nextID uint32, total uint64, out io.Writer) (int64, error) {
	sc, w, err := writerLike(f, out)
	if err != nil {
		return 0, err
	}
	mem := memory.DefaultAllocator
	arrs := make([]arrow.Array, sc.NumFields())
	for i, fl := range sc.Fields() {
		switch fl.Name {
		case colTokenFST:
			b := array.NewBuilder(mem, fl.Type).(*array.BinaryBuilder)
			b.Append(fst)
			arrs[i] = b.NewArray()
			b.Release()
		case colTokenNextID:
			b := array.NewUint32Builder(mem)
			b.Append(nextID)
			arrs[i] = b.NewArray()
			b.Release()
		case colTokenTotalLength:
			b := array.NewUint64Builder(mem)
			b.Append(total)
			arrs[i] = b.NewArray()
			b.Release()
		default:
			return 0, errorf(f, ErrUnsupported, "token column %q", fl.Name)
		}
		defer arrs[i].Release()
	}
	rec := array.NewRecordBatch(sc, arrs, 1)
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		return 0, err
	}
	res, err := w.Close()
	return res.Size, err
}

// RemapMetadata writes the segment's metadata.lance for a remapped
// segment: lance's remap keeps the partitions, tokenizer params, formats
// and deleted_fragments, so the file is rewritten with the same schema
// metadata and row.
func RemapMetadata(ctx context.Context, f *lancefile.File, out io.Writer) (int64, error) {
	if _, err := ReadMetadata(ctx, f); err != nil {
		return 0, err
	}
	return writeMetadata(ctx, f, nil, out)
}
