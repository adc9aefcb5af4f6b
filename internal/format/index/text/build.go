package text

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/lancewrite"
)

// ErrTooLarge: the documents of one catch-up pass its memory bound; plan
// it over fewer fragments.
var ErrTooLarge = errors.New("fts index: catch-up documents past the task's memory bound")

// tokenPostings is one token's postings in a partition being built.
type tokenPostings struct {
	docs, freqs []uint32
	positions   [][]uint32 // per doc; nil without positions
}

// PartitionBuilder builds one new partition from documents the way lance
// 8.0.0's IndexWorker does (builder.rs): documents in the order they are
// added get doc ids 0, 1, ...; a null document is skipped; a token's id is
// the order of its first occurrence; a document's token count is the
// number of tokens the analyzer yields. Memory: every posting (and
// position) of the added documents, bounded by maxBytes.
type PartitionBuilder struct {
	a            *Analyzer
	withPosition bool
	maxBytes     int64
	bytes        int64

	ids       map[string]uint32
	tokens    []string
	postings  []tokenPostings
	rows      []uint64
	numTokens []uint32
	seen      map[uint32]int // per document: token id -> index in its postings
}

// NewPartitionBuilder returns a builder for the analyzer's params.
func NewPartitionBuilder(a *Analyzer, maxBytes int64) *PartitionBuilder {
	return &PartitionBuilder{a: a, withPosition: a.p.WithPosition, maxBytes: maxBytes, ids: map[string]uint32{}, seen: map[uint32]int{}}
}

// Docs is the number of documents added.
func (b *PartitionBuilder) Docs() int { return len(b.rows) }

// Add tokenizes one document (its row id, or address) into the partition.
func (b *PartitionBuilder) Add(row uint64, doc string) error {
	docID := uint32(len(b.rows))
	clear(b.seen)
	n := uint32(0)
	err := b.a.Tokens(doc, func(tok string, pos uint32) error {
		n++
		id, ok := b.ids[tok]
		if !ok {
			id = uint32(len(b.tokens))
			b.ids[tok] = id
			b.tokens = append(b.tokens, tok)
			b.postings = append(b.postings, tokenPostings{})
			b.bytes += int64(len(tok)) + 64
		}
		p := &b.postings[id]
		k, ok := b.seen[id]
		if !ok {
			k = len(p.docs)
			b.seen[id] = k
			p.docs = append(p.docs, docID)
			p.freqs = append(p.freqs, 0)
			if b.withPosition {
				p.positions = append(p.positions, nil)
			}
			b.bytes += 8
		}
		p.freqs[k]++
		if b.withPosition {
			p.positions[k] = append(p.positions[k], pos)
			b.bytes += 4
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.rows = append(b.rows, row)
	b.numTokens = append(b.numTokens, n)
	b.bytes += 12
	if b.bytes > b.maxBytes {
		return fmt.Errorf("%w: %d documents hold over %d bytes of postings", ErrTooLarge, len(b.rows), b.maxBytes)
	}
	return nil
}

// AddColumn adds every value of a string column (nulls skipped, as lance
// skips them) with the row ids of its rows.
func (b *PartitionBuilder) AddColumn(values arrow.Array, ids []uint64) error {
	type strs interface {
		arrow.Array
		Value(int) string
	}
	col, ok := values.(strs)
	if !ok {
		return fmt.Errorf("%w: column of type %s (lanced indexes utf8 and large_utf8 text)", ErrUnsupported, values.DataType())
	}
	if col.Len() != len(ids) {
		return fmt.Errorf("%d values for %d row ids", col.Len(), len(ids))
	}
	for i := range ids {
		if col.IsNull(i) {
			continue
		}
		if err := b.Add(ids[i], col.Value(i)); err != nil {
			return err
		}
	}
	return nil
}

// Write writes the partition's docs, posting and token files with the
// schemas (and schema metadata, but the posting groups) of tmpl, a
// partition of the same segment.
func (b *PartitionBuilder) Write(ctx context.Context, tmpl PartitionFiles, out PartitionWriters) (PartitionResult, error) {
	res := PartitionResult{Docs: uint64(len(b.rows)), Tokens: uint64(len(b.tokens))}
	var err error
	if res.DocsSize, err = b.writeDocs(tmpl, out.Docs); err != nil {
		return res, err
	}
	if res.InvertSize, err = b.writeInvert(ctx, tmpl, out.Invert); err != nil {
		return res, err
	}
	res.TokensSize, err = b.writeTokens(tmpl, out.Tokens)
	return res, err
}

func (b *PartitionBuilder) writeDocs(tmpl PartitionFiles, out io.Writer) (int64, error) {
	sc, w, err := writerLike(tmpl.Docs, out)
	if err != nil {
		return 0, err
	}
	if sc.NumFields() != 2 || sc.Field(0).Type.ID() != arrow.UINT64 || sc.Field(1).Type.ID() != arrow.UINT32 {
		return 0, errorf(tmpl.Docs, ErrUnsupported, "docs schema %s", sc)
	}
	mem := memory.DefaultAllocator
	for a := 0; a < len(b.rows); a += docsBatchRows {
		e := min(a+docsBatchRows, len(b.rows))
		rb, nb := array.NewUint64Builder(mem), array.NewUint32Builder(mem)
		rb.AppendValues(b.rows[a:e], nil)
		nb.AppendValues(b.numTokens[a:e], nil)
		r, n := rb.NewArray(), nb.NewArray()
		rb.Release()
		nb.Release()
		rec := array.NewRecordBatch(sc, []arrow.Array{r, n}, int64(e-a))
		r.Release()
		n.Release()
		err := w.Write(rec)
		rec.Release()
		if err != nil {
			return 0, err
		}
	}
	res, err := w.Close()
	return res.Size, err
}

// encodePositions is lance's compress_positions: the count, each full
// chunk of blockSize positions delta bit-packed, then the rest as raw u32s.
func encodePositions(pos []uint32, scratch []uint32, emit func([]byte)) {
	emit(binary.LittleEndian.AppendUint32(nil, uint32(len(pos))))
	full := len(pos) / blockSize * blockSize
	for a := 0; a < full; a += blockSize {
		emit(appendSorted(nil, pos[a:a+blockSize], scratch))
	}
	if rest := pos[full:]; len(rest) > 0 {
		var buf []byte
		for _, p := range rest {
			buf = binary.LittleEndian.AppendUint32(buf, p)
		}
		emit(buf)
	}
}

func (b *PartitionBuilder) writeInvert(ctx context.Context, tmpl PartitionFiles, out io.Writer) (int64, error) {
	sc, err := tmpl.Invert.Schema()
	if err != nil {
		return 0, err
	}
	cols, err := invertLayout(tmpl.Invert, sc)
	if err != nil {
		return 0, err
	}
	if (cols.position >= 0) != b.withPosition {
		return 0, errorf(tmpl.Invert, ErrUnsupported, "posting schema %s does not match with_position %v", sc, b.withPosition)
	}
	opts := writerOpts(tmpl.Invert)
	delete(opts.SchemaMetadata, keyGroupOffsets)
	w, err := lancewrite.NewWriter(out, tmpl.Invert.Fields(), opts)
	if err != nil {
		return 0, err
	}
	o := newInvertOutput(sc, cols)
	defer o.release()
	var total uint64
	for _, n := range b.numTokens {
		total += uint64(n)
	}
	rm := invertRemap{numTokens: b.numTokens, numDocs: len(b.rows), scratch: make([]uint32, blockSize)}
	if len(b.rows) > 0 {
		rm.avgdl = float32(total) / float32(len(b.rows))
	}
	for id := range b.postings {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		p := &b.postings[id]
		o.startPostings()
		if o.pos != nil {
			o.pos.Append(true)
		}
		idfScale := float32(idf(len(p.docs), rm.numDocs) * (bm25K1 + 1))
		maxScore := float32(-math.MaxFloat32)
		size := 0
		for a := 0; a < len(p.docs); a += blockSize {
			e := min(a+blockSize, len(p.docs))
			rm.kdocs, rm.kfreqs = append(rm.kdocs[:0], p.docs[a:e]...), append(rm.kfreqs[:0], p.freqs[a:e]...)
			size += o.appendBlock(&rm, idfScale, &maxScore)
		}
		if o.pos != nil {
			for _, pos := range p.positions {
				o.posDocs.Append(true)
				encodePositions(pos, rm.scratch, func(v []byte) {
					o.batchBytes += len(v)
					o.posBin.Append(v)
				})
			}
		}
		o.maxScore.Append(maxScore)
		o.length.Append(uint32(len(p.docs)))
		rm.group(size)
		rm.written++
		o.rows++
		if o.full() {
			if err := o.flush(w); err != nil {
				return 0, err
			}
		}
	}
	if err := o.flush(w); err != nil {
		return 0, err
	}
	if len(rm.groupStarts) > 0 {
		gid, err := w.AddGlobalBuffer(encodeGroupStarts(rm.groupStarts))
		if err != nil {
			return 0, err
		}
		w.SetSchemaMetadata(keyGroupOffsets, []byte(strconv.Itoa(gid)))
	}
	res, err := w.Close()
	return res.Size, err
}

func (b *PartitionBuilder) writeTokens(tmpl PartitionFiles, out io.Writer) (int64, error) {
	order := make([]uint32, len(b.tokens))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(x, y uint32) int { return strings.Compare(b.tokens[x], b.tokens[y]) })
	fb := newFSTBuilder()
	var total uint64
	for _, id := range order {
		total += uint64(len(b.tokens[id]))
		if err := fb.insert([]byte(b.tokens[id]), uint64(id)); err != nil {
			return 0, err
		}
	}
	return writeTokenFile(tmpl.Tokens, fb.finish(), uint32(len(b.tokens)), total, out)
}
