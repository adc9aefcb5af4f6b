package lancewrite

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
)

// Merging small mini-block pages. A column of many small pages (the copy
// rule said no) is written as fewer, bigger pages without decoding its
// values where the pages allow it: consecutive mini-block pages whose
// layouts are equal but for their item counts (the same value compression,
// levels and, for FSST, symbol table; per-chunk parameters such as bit
// widths live in each chunk) and whose dictionaries are byte for byte
// equal are one run. Their chunks are appended to one page in order, only
// the chunk table and the item count are made anew. Every chunk but a
// page's last holds a power of two of values; a source page's last chunk
// (any count) is cut into chunks of descending powers of two when another
// page follows it in the run: a slice of the values for flat and
// variable-width values, a decode and bit-pack of that one chunk for
// inline bit-packing, where each chunk fills a block of 1024 values: such
// a cut is made only while its padding (a block per extra chunk) costs
// less than a page more would (FilterOptions.PageCost); otherwise the
// merged page ends there. Rows deleted in a page are cut out as the
// re-chunking of a single page does (rechunkPage). A merged page is closed
// once it holds PageBytes.

// pageMerger is a run of mini-block pages being merged.
type pageMerger struct {
	pc     *pageCutter
	key    *enc21pb.MiniBlockLayout // the run's layout with NumItems zero
	dict   []byte                   // the run's dictionary (nil: none)
	source int                      // the source of the run's first page
}

// withCost sets the padding a cut of a page's last chunk may cost (the
// page rule's cost of a page).
func (pc *pageCutter) withCost(pageCost int64) *pageCutter {
	pc.splitCost = max(pageCost, 0)
	return pc
}

// mergeable opens a page that lost some or none of its rows (source rows
// [a, a+n)) for merging: its chunk table, its layout with NumItems zero
// and its dictionary; nil when it cannot be merged.
func mergeable(s *filterSrc, pg *file2pb.ColumnMetadata_Page, a, n uint64) (*mbPage, *enc21pb.MiniBlockLayout, []byte, error) {
	anyEnc, err := lancefile.PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, nil, nil, err
	}
	var pl enc21pb.PageLayout
	if err := proto.Unmarshal(anyEnc.GetValue(), &pl); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: page layout: %v", lancefile.ErrCorrupt, err)
	}
	mp, err := openMiniBlock(s, pg, &pl, a, n)
	if mp == nil || err != nil {
		return nil, nil, nil, err
	}
	key := proto.Clone(mp.mb).(*enc21pb.MiniBlockLayout)
	key.NumItems = 0
	var dict []byte
	if len(mp.bufs) == 3 {
		if dict, err = readBuffer(s, mp.bufs[2]); err != nil {
			return nil, nil, nil, err
		}
	}
	return mp, key, dict, nil
}

// merge adds a page that lost some or none of its rows (source rows [a,
// a+n)) to the column's run of merged pages; false when the page cannot be
// merged (the caller re-encodes it). A run starts only where the next page
// can join it: a run of one page would keep the small page the page rule
// is there to remove.
func (cr *colRun) merge(si int, s *filterSrc, pg *file2pb.ColumnMetadata_Page, a, n uint64) (bool, error) {
	mp, key, dict, err := mergeable(s, pg, a, n)
	if mp == nil || err != nil {
		return false, err
	}
	same := func(k *enc21pb.MiniBlockLayout, d []byte) bool { return proto.Equal(key, k) && bytes.Equal(dict, d) }
	if mg := cr.mg; mg != nil && !same(mg.key, mg.dict) {
		if err := cr.endMerge(); err != nil {
			return false, err
		}
	}
	if cr.mg == nil {
		ns, npg := cr.nextSrc, cr.nextPage
		if npg == nil {
			return false, nil
		}
		// a page whose last chunk cannot be cut would end the merged page
		// right away
		if t := mp.lastLive; !newPageCutter(mp).withCost(cr.opts.PageCost).cheapCut(s, mp.chunks[t], a+uint64(mp.chunks[t].First)) {
			return false, nil
		}
		na, nn := npg.GetPriority(), npg.GetLength()
		if ns.deadIn(na, na+nn) == nn {
			return false, nil
		}
		nmp, nkey, ndict, err := mergeable(ns, npg, na, nn)
		if err != nil {
			return false, err
		}
		if nmp == nil || !same(nkey, ndict) {
			return false, nil
		}
	}
	if cr.mg == nil {
		if err := cr.flush(); err != nil { // re-encoded rows before this page
			return false, err
		}
		pc := newPageCutter(mp).withCost(cr.opts.PageCost)
		pc.dict = dict
		cr.mg = &pageMerger{pc: pc, key: key, dict: dict, source: si}
	}
	mg, pc := cr.mg, cr.mg.pc
	if mg.source != si {
		mg.source = -1
	}
	// the state to go back to should a cut chunk not fit
	saved, savedTail, savedPages := pc.cur, pc.tail, len(pc.pages)
	if err := pc.addPage(s, mp, a); err != nil {
		return false, err
	}
	if pc.unfit {
		pc.unfit, pc.pages, pc.tail = false, pc.pages[:savedPages], savedTail
		saved.meta, saved.data = saved.meta[:len(saved.meta):len(saved.meta)], saved.data[:len(saved.data):len(saved.data)]
		pc.cur = saved
		return false, nil
	}
	if len(pc.cur.data) >= cr.opts.PageBytes {
		if _, err := pc.flushTail(false); err != nil {
			return false, err
		}
		if err := pc.finish(); err != nil {
			return false, err
		}
	}
	return true, cr.emitMerged()
}

// endMerge closes the run of merged pages, if any.
func (cr *colRun) endMerge() error {
	mg := cr.mg
	if mg == nil {
		return nil
	}
	if _, err := mg.pc.flushTail(false); err != nil {
		return err
	}
	if err := mg.pc.finish(); err != nil {
		return err
	}
	err := cr.emitMerged()
	cr.mg = nil
	return err
}

// emitMerged hands the finished merged pages on.
func (cr *colRun) emitMerged() error {
	mg := cr.mg
	for _, op := range mg.pc.pages {
		op.col = cr.p.col
		op.ev = PageEvent{Column: cr.p.col, Source: mg.source, SourcePage: -1, Path: PathMerge, Rows: op.rows}
		if err := emit(cr.ctx, cr.out, cr.bud, op); err != nil {
			return err
		}
	}
	mg.pc.pages = nil
	return nil
}
