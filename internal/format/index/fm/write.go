package fm

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// fileFields are the fields lance 8.0.0 gives a partition file.
func fileFields() []*filepb.Field {
	f := func(id int32, name, typ string, enc filepb.Encoding) *filepb.Field {
		return &filepb.Field{Name: name, Id: id, ParentId: -1, LogicalType: typ, Encoding: enc}
	}
	return []*filepb.Field{
		f(0, ColNodeID, "uint32", filepb.Encoding_PLAIN),
		f(1, ColBlockID, "uint32", filepb.Encoding_PLAIN),
		f(2, ColWords, "large_binary", filepb.Encoding_VAR_BINARY),
		f(3, ColPrefixRank, "uint64", filepb.Encoding_PLAIN),
		f(4, ColBitLen, "uint64", filepb.Encoding_PLAIN),
	}
}

var fileSchema = arrow.NewSchema([]arrow.Field{
	{Name: ColNodeID, Type: arrow.PrimitiveTypes.Uint32},
	{Name: ColBlockID, Type: arrow.PrimitiveTypes.Uint32},
	{Name: ColWords, Type: arrow.BinaryTypes.LargeBinary},
	{Name: ColPrefixRank, Type: arrow.PrimitiveTypes.Uint64},
	{Name: ColBitLen, Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// batchRows bounds the rows (32 KiB of words each) buffered before they
// are handed to the file writer.
const batchRows = 32

// rowBatch accumulates rows of a partition file.
type rowBatch struct {
	node, block  *array.Uint32Builder
	words        *array.BinaryBuilder
	prefix, blen *array.Uint64Builder
	n            int
}

func newRowBatch() *rowBatch {
	mem := memory.DefaultAllocator
	return &rowBatch{node: array.NewUint32Builder(mem), block: array.NewUint32Builder(mem),
		words: array.NewBinaryBuilder(mem, arrow.BinaryTypes.LargeBinary), prefix: array.NewUint64Builder(mem), blen: array.NewUint64Builder(mem)}
}

func (r *rowBatch) add(node, block uint32, words []uint64, prefix, bitLen uint64) {
	r.node.Append(node)
	r.block.Append(block)
	raw := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(raw[8*i:], w)
	}
	r.words.Append(raw)
	r.prefix.Append(prefix)
	r.blen.Append(bitLen)
	r.n++
}

// flush writes the rows gathered (if any) to w.
func (r *rowBatch) flush(w *lancewrite.Writer) error {
	if r.n == 0 {
		return nil
	}
	cols := []arrow.Array{r.node.NewArray(), r.block.NewArray(), r.words.NewArray(), r.prefix.NewArray(), r.blen.NewArray()}
	rec := array.NewRecordBatch(fileSchema, cols, int64(r.n))
	for _, c := range cols {
		c.Release()
	}
	r.n = 0
	defer rec.Release()
	return w.Write(rec)
}

func (r *rowBatch) release() {
	r.node.Release()
	r.block.Release()
	r.words.Release()
	r.prefix.Release()
	r.blen.Release()
}

// metadata is the partition file's schema metadata, as lance writes it
// (write_fmindex): counts in decimal, tables and row lists in hex.
func (p *partition) metadata(waveletRows, saBlocks int) map[string][]byte {
	num := func(v int) []byte { return []byte(strconv.Itoa(v)) }
	var ct []uint64
	ct = append(ct, p.cTable[:]...)
	enc := func(b []byte) []byte {
		out := make([]byte, hex.EncodedLen(len(b)))
		hex.Encode(out, b)
		return out
	}
	return map[string][]byte{
		KeyNumBWTNodes:       num(len(p.nodes)),
		KeyBWTLen:            num(p.bwtLen),
		KeyNumSABlocks:       num(saBlocks),
		KeySASamplesLen:      num(len(p.saSamples)),
		KeyTotalWaveletRows:  num(waveletRows),
		KeySASampleRate:      num(SASampleRate),
		KeyAlphabetSize:      num(AlphabetSize),
		KeyCTable:            hexU64s(ct),
		KeyHuffmanCodes:      enc(encodeCodes(&p.codes)),
		KeyTreeTopology:      enc(encodeTopology(p.children)),
		KeyRowIDs:            hexU64s(p.rows),
		KeyDocStartPositions: hexU64s(p.starts),
	}
}

// write writes the partition file: per wavelet node (in id order) its bit
// vector in blocks of BlockWords words, each with the set bits before it
// (prefix_rank) and the vector's length (bit_len), a node of no bit as
// one empty row; then the suffix array samples in blocks of BlockWords,
// node_id SANodeID, prefix_rank 0, bit_len the number of samples.
func (p *partition) write(ctx context.Context, out io.Writer) error {
	waveletRows, saBlocks := 0, (len(p.saSamples)+BlockWords-1)/BlockWords
	for _, words := range p.nodes {
		waveletRows += max(1, (len(words)+BlockWords-1)/BlockWords)
	}
	w, err := lancewrite.NewWriter(out, fileFields(), lancewrite.Options{Version: lancewrite.V2_1, PageBytes: index.FilePageBytes,
		SchemaMetadata: p.metadata(waveletRows, saBlocks)})
	if err != nil {
		return err
	}
	rb := newRowBatch()
	defer rb.release()
	emit := func(node, block uint32, words []uint64, prefix, bitLen uint64) error {
		rb.add(node, block, words, prefix, bitLen)
		if rb.n < batchRows {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return rb.flush(w)
	}
	for id, words := range p.nodes {
		if len(words) == 0 {
			if err := emit(uint32(id), 0, nil, 0, p.lens[id]); err != nil {
				return err
			}
			continue
		}
		var rank uint64
		for blk, a := 0, 0; a < len(words); blk, a = blk+1, a+BlockWords {
			chunk := words[a:min(a+BlockWords, len(words))]
			if err := emit(uint32(id), uint32(blk), chunk, rank, p.lens[id]); err != nil {
				return err
			}
			rank += popcount(chunk)
		}
	}
	for blk, a := 0, 0; a < len(p.saSamples); blk, a = blk+1, a+BlockWords {
		chunk := p.saSamples[a:min(a+BlockWords, len(p.saSamples))]
		if err := emit(SANodeID, uint32(blk), chunk, 0, uint64(len(p.saSamples))); err != nil {
			return err
		}
	}
	if err := rb.flush(w); err != nil {
		return err
	}
	_, err = w.Close()
	return err
}
