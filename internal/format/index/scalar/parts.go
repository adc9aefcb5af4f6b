package scalar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A btree segment remapped in parts: each part remaps a range of the
// segment's pages (RemapPart) into a piece, a page_data.lance of the pairs
// those pages keep (deleted rows dropped, row addresses mapped, order
// kept); the join (JoinParts) concatenates the pieces by page copy into
// page_data.lance and writes page_lookup.lance from their values, cut into
// pages of batch_size rows. Lance reads btree page i as rows
// [i*batch_size, (i+1)*batch_size) of page_data.lance, whatever the file's
// own pages, so these are the files a one-task remap (RemapBTree) writes.
// Bitmap and labelList segments are remapped in one task.

// keyBTreePart is the schema metadata entry of a piece: the pages of the
// old segment it remapped (btreePart as JSON).
const keyBTreePart = "lanced:btree_part"

// btreePart describes a piece: pages [First, First+Count) of a segment of
// Pages pages.
type btreePart struct {
	Pages int `json:"pages"`
	First int `json:"first"`
	Count int `json:"count"`
}

// btreeRemapper is the index.PartRemapper of the btree index.
type btreeRemapper struct{ remapper }

// writerOptions are the options of a BTreeWriter writing b's files again,
// page_data.lance with schema metadata dataMeta.
func (b *BTree) writerOptions(dataMeta map[string][]byte) BTreeOptions {
	ver := lancewrite.V2_1
	if b.Data.Format == lancefile.Format20 {
		ver = lancewrite.V2_0
	}
	return BTreeOptions{DataFields: b.Data.Fields(), LookupFields: b.Lookup.Fields(), DataMeta: dataMeta, LookupMeta: meta(b.Lookup),
		BatchSize: b.BatchSize, Version: ver}
}

// Parts implements index.PartRemapper: at most n ranges of the segment's
// pages, of about equal rows.
func (btreeRemapper) Parts(ctx context.Context, old index.SegmentReader, n int) ([]index.PartRange, error) {
	bt, err := openBTreeSegment(ctx, old)
	if err != nil {
		return nil, noRemapper(err)
	}
	sizes := make([]uint64, bt.NumPages)
	for i := range sizes {
		sizes[i] = min(bt.BatchSize, bt.Data.NumRows()-uint64(i)*bt.BatchSize)
	}
	return index.CutRanges(sizes, n), nil
}

// RemapPart implements index.PartRemapper: pages [r.Lo, r.Hi) as one
// page_data.lance piece.
func (br btreeRemapper) RemapPart(ctx context.Context, req index.RemapRequest, r index.PartRange) (index.RemapResult, error) {
	var out index.RemapResult
	bt, err := br.open(ctx, req)
	if err != nil {
		return out, err
	}
	var res RemapResult
	err = index.WriteFiles(ctx, req.New, []string{BTreeDataFileName}, func(w []io.Writer) error {
		var err error
		res, err = RemapBTreePages(ctx, bt, req.Mapping, r, w[0])
		return err
	})
	if err != nil {
		return out, noRemapper(err)
	}
	out.Rows, out.Dropped = res.Rows, res.Dropped
	return out, nil
}

// open checks req's segment and opens its old btree.
func (br btreeRemapper) open(ctx context.Context, req index.RemapRequest) (*BTree, error) {
	if err := br.Check(req.Segment); err != nil {
		return nil, err
	}
	bt, err := openBTreeSegment(ctx, req.Old)
	return bt, noRemapper(err)
}

// RemapBTreePages writes, to data, the pairs of pages r of b with m
// applied (deleted rows dropped, row addresses mapped, order kept): a
// piece of a remap in parts, a page_data.lance in b's fields and file
// version whose schema metadata says which pages it holds. Memory: two
// pages.
func RemapBTreePages(ctx context.Context, b *BTree, m index.Mapping, r index.PartRange, data io.Writer) (RemapResult, error) {
	var res RemapResult
	if m == nil {
		return res, fmt.Errorf("scalar: remap of %s without a mapping", b.Data.Name())
	}
	if r.Lo < 0 || r.Hi > b.NumPages || r.Lo >= r.Hi {
		return res, fmt.Errorf("scalar: part of pages [%d,%d) of a btree with %d", r.Lo, r.Hi, b.NumPages)
	}
	pm, err := json.Marshal(btreePart{Pages: b.NumPages, First: r.Lo, Count: r.Hi - r.Lo})
	if err != nil {
		return res, err
	}
	dm := maps.Clone(meta(b.Data))
	if dm == nil {
		dm = map[string][]byte{}
	}
	dm[keyBTreePart] = pm
	bw, err := NewBTreeWriter(data, b.writerOptions(dm))
	if err != nil {
		return res, err
	}
	off := uint64(r.Lo) * b.BatchSize
	pages, err := b.Data.NewReader(ctx, lancefile.ReadOptions{BatchRows: int(b.BatchSize), ChunkReads: true, Offset: off,
		Limit: min(uint64(r.Hi)*b.BatchSize, b.Data.NumRows()) - off})
	if err != nil {
		return res, err
	}
	defer pages.Release()
	mg := &merger{bw: bw, res: &res}
	for p := r.Lo; p < r.Hi; p++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := mg.loadOld(b, pages, p, m); err != nil {
			return res, err
		}
		if mg.oldVals != nil {
			if err := bw.Write(mg.oldVals, mg.oldIDs); err != nil {
				mg.releaseOld()
				return res, err
			}
			res.Rows += uint64(len(mg.oldIDs))
		}
		mg.releaseOld()
	}
	wr, err := bw.Close(io.Discard)
	if err != nil {
		return res, err
	}
	res.Files = []File{{Name: BTreeDataFileName, Size: wr.DataSize}}
	return res, nil
}

// JoinParts implements index.PartRemapper: the pieces of every page range
// joined into the segment's two files (JoinBTree).
func (br btreeRemapper) JoinParts(ctx context.Context, req index.RemapRequest, parts []index.SegmentReader) (index.RemapResult, error) {
	var out index.RemapResult
	bt, err := br.open(ctx, req)
	if err != nil {
		return out, err
	}
	pieces := make([]*lancefile.File, len(parts))
	for i, p := range parts {
		if pieces[i], err = index.OpenSegmentFile(ctx, p, BTreeDataFileName); err != nil {
			return out, err
		}
	}
	var res RemapResult
	err = index.WriteFiles(ctx, req.New, []string{BTreeDataFileName, BTreeLookupFileName}, func(w []io.Writer) error {
		var err error
		res, err = JoinBTree(ctx, bt, pieces, w[0], w[1])
		return err
	})
	if err != nil {
		return out, noRemapper(err)
	}
	out.Rows = res.Rows
	return out, nil
}

// JoinBTree writes the remapped segment of b from the pieces
// RemapBTreePages wrote for every range of its pages, in page order:
// page_data.lance to data (the pieces' pages copied back to back, b's
// schema metadata) and page_lookup.lance to lookup (each batch_size rows'
// first and last value and null count, read from the pieces' rows). No
// page is decoded for data. The pieces must tile b's pages: a missing,
// repeated or foreign piece is refused (ErrCorrupt).
func JoinBTree(ctx context.Context, b *BTree, pieces []*lancefile.File, data, lookup io.Writer) (RemapResult, error) {
	var res RemapResult
	next := 0
	for i, f := range pieces {
		var bp btreePart
		raw, ok := meta(f)[keyBTreePart]
		if !ok || json.Unmarshal(raw, &bp) != nil || bp.Pages != b.NumPages || bp.First != next || bp.Count <= 0 || next+bp.Count > b.NumPages || f.Format != b.Data.Format {
			return res, errorf(f, ErrCorrupt, "piece %d (%s) is not pages %d.. of this %d-page btree", i, raw, next, b.NumPages)
		}
		next += bp.Count
	}
	if next != b.NumPages {
		return res, fmt.Errorf("scalar: %w: the pieces hold %d of %d pages", ErrCorrupt, next, b.NumPages)
	}
	lw, err := NewBTreeWriter(nil, b.writerOptions(nil))
	if err != nil {
		return res, err
	}
	var srcs []lancewrite.CopySource
	for _, f := range pieces {
		if f.NumRows() == 0 {
			continue
		}
		// One DataFile entry for all: the pieces are one writer's.
		srcs = append(srcs, lancewrite.CopySource{R: f.ReaderAt(), Size: f.Size(), Name: f.Name(), File: &tablepb.DataFile{}})
		if err := lookupRows(ctx, lw, f, b.BatchSize); err != nil {
			return res, err
		}
	}
	if len(srcs) > 0 {
		dr, err := lancewrite.ConcatRowsWith(ctx, data, lancewrite.ConcatOptions{SchemaMetadata: maps.Clone(meta(b.Data))}, srcs...)
		if err != nil {
			return res, err
		}
		res.Files = append(res.Files, File{Name: BTreeDataFileName, Size: dr.Size})
	} else {
		ew, err := NewBTreeWriter(data, b.writerOptions(meta(b.Data)))
		if err != nil {
			return res, err
		}
		er, err := ew.Close(io.Discard)
		if err != nil {
			return res, err
		}
		res.Files = append(res.Files, File{Name: BTreeDataFileName, Size: er.DataSize})
	}
	lr, err := lw.Close(lookup)
	if err != nil {
		return res, err
	}
	res.Rows, res.Keys = lr.Rows, uint64(lr.Pages)
	res.Files = append(res.Files, File{Name: BTreeLookupFileName, Size: lr.LookupSize})
	return res, nil
}

// lookupRows hands every row of piece f to lw, which keeps only each
// page's bounds and null count.
func lookupRows(ctx context.Context, lw *BTreeWriter, f *lancefile.File, batch uint64) error {
	rd, err := f.NewReader(ctx, lancefile.ReadOptions{BatchRows: int(batch), ChunkReads: true})
	if err != nil {
		return err
	}
	defer rd.Release()
	for rd.Next() {
		rec := rd.RecordBatch()
		ids, ok := rec.Column(1).(*array.Uint64)
		if !ok || ids.NullN() > 0 {
			return errorf(f, ErrCorrupt, "ids read as %s with %d nulls", rec.Column(1).DataType(), rec.Column(1).NullN())
		}
		if err := lw.Write(rec.Column(0), ids.Uint64Values()); err != nil {
			return err
		}
	}
	return rd.Err()
}
