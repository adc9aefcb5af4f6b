package lancewrite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/enc21pb"
	"github.com/lanced-dev/lanced/internal/format/pb/file2pb"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
)

// FilterConcat writes the live rows of 2.1 source files, in order, into one
// new 2.1 file, keeping encoded pages wherever their layout allows it. Every
// output column is handled on its own, page by page:
//
//   - a source page none of whose rows is deleted is copied verbatim
//     (PathCopy), with its buffers relocated and its priority shifted;
//   - a page all of whose rows are deleted is left out (PathDrop);
//   - a full-zip page without repetition (wide fixed-width values such as
//     vectors, long strings) that lost rows is filtered without decoding:
//     the zipped rows that survive are copied run by run and, for variable
//     width, the repetition index is rebuilt (PathFilter);
//   - a mini-block page without repetition that lost rows keeps the chunks
//     that lost none byte for byte and its dictionary; only the chunks that
//     lost rows are cut apart and their survivors encoded again in the
//     page's own compression (PathRechunk, see rechunkPage);
//   - any other page that lost rows is decoded, its live rows re-encoded
//     (PathReencode); consecutive re-encoded pages are merged up to the
//     page size, as a writer would.
//
// Columns whose source pages are small are re-encoded whole (the copy rule,
// FilterOptions.PageCost): a copy keeps every source page, and a column of
// many small pages costs a reader one request per page.
//
// fields are the output schema (the table's fields; the writer's column
// order); every source must hold exactly these fields (by DataFile field
// ids) in the same types. Columns are processed on up to Workers goroutines
// with their pages written as they are ready; the bytes of encoded pages
// waiting to be written are bounded by BudgetBytes. Inputs this cannot
// handle (2.0 files, blob pages, fields missing from a source) return
// ErrCopyUnsupported before anything is written to dst.
func FilterConcat(ctx context.Context, dst io.Writer, fields []*filepb.Field, srcs []FilterSource, opts FilterOptions) (FilterResult, error) {
	fp, err := PrepareFilter(fields, srcs, opts)
	if err != nil {
		return FilterResult{}, err
	}
	return fp.Write(ctx, dst)
}

// FilterPlan is a FilterConcat whose sources are open and whose columns
// are planned, waiting for its destination: PrepareFilter reads the
// sources' metadata before the output exists (a caller may overlap it with
// creating the output), Write writes the file.
type FilterPlan struct {
	w      *Writer
	fields []*filepb.Field
	plans  []*colPlan
	rows   uint64
	opts   FilterOptions
}

// PrepareFilter opens srcs and plans FilterConcat's output columns without
// writing anything. Its errors are FilterConcat's (ErrCopyUnsupported for
// inputs a copy cannot handle).
func PrepareFilter(fields []*filepb.Field, srcs []FilterSource, opts FilterOptions) (*FilterPlan, error) {
	opts.defaults()
	cs := make([]CopySource, len(srcs))
	for i, s := range srcs {
		cs[i] = s.CopySource
	}
	ss, err := openSources(cs)
	if err != nil {
		return nil, err
	}
	if ss[0].f.Format != lancefile.Format21 {
		return nil, unsupported("filtered copy needs 2.1 files, %s is %s", ss[0].Name, ss[0].f.Footer.Version)
	}
	w, err := NewWriter(nil, fields, Options{Version: V2_1, PageBytes: opts.PageBytes})
	if err != nil {
		if errors.Is(err, ErrUnsupportedType) {
			return nil, fmt.Errorf("%w: %w", ErrCopyUnsupported, err)
		}
		return nil, err
	}
	fs := make([]*filterSrc, len(ss))
	var rows uint64
	if opts.Columnwise {
		for _, s := range ss[1:] {
			if s.f.NumRows() != ss[0].f.NumRows() {
				return nil, unsupported("%s has %d rows, %s has %d", s.Name, s.f.NumRows(), ss[0].Name, ss[0].f.NumRows())
			}
		}
	}
	for i, s := range ss {
		d := srcs[i].Deleted
		if d != nil && d.IsEmpty() {
			d = nil
		}
		phys := s.f.NumRows()
		var dead uint64
		if d != nil {
			if mx := d.Maximum(); uint64(mx) >= phys {
				return nil, fmt.Errorf("lancewrite: %s: deleted row %d beyond its %d rows", s.Name, mx, phys)
			}
			dead = d.GetCardinality()
		}
		fs[i] = &filterSrc{openSource: s, deleted: d, outStart: rows}
		if opts.Columnwise {
			if d0 := fs[0].deleted; i > 0 && ((d == nil) != (d0 == nil) || (d != nil && !d.Equals(d0))) {
				return nil, fmt.Errorf("lancewrite: column-wise filter: %s and %s remove different rows", s.Name, ss[0].Name)
			}
			fs[i].outStart, rows = 0, phys-dead
			continue
		}
		rows += phys - dead
	}
	plans := make([]*colPlan, len(w.all))
	for ci, l := range w.all {
		from := fs
		if opts.Columnwise {
			if from, err = holderOf(l, fs); err != nil {
				return nil, err
			}
		}
		p, err := planColumn(l, from, opts)
		if err != nil {
			return nil, err
		}
		p.col = ci
		plans[ci] = p
	}
	return &FilterPlan{w: w, fields: fields, plans: plans, rows: rows, opts: opts}, nil
}

// Write writes the planned file to dst. A FilterPlan is written once.
func (fp *FilterPlan) Write(ctx context.Context, dst io.Writer) (FilterResult, error) {
	if fp.w.closed || fp.w.c.w != nil {
		return FilterResult{}, errors.New("lancewrite: filter plan written twice")
	}
	w, plans, rows, opts, fields := fp.w, fp.plans, fp.rows, fp.opts, fp.fields
	w.c = newContainer(dst)
	_, opts.direct = dst.(RangeWriter)
	res, err := runColumns(ctx, w, plans, opts)
	if err != nil {
		return FilterResult{}, err
	}
	for _, l := range w.all {
		res.Fields = append(res.Fields, l.n.f.Id)
	}
	for i := range w.all {
		res.ColumnIndices = append(res.ColumnIndices, int32(i))
	}
	if err := w.c.finish(fields, nil, rows, w.cols, 2, 1); err != nil {
		return FilterResult{}, err
	}
	w.closed = true
	res.NumRows = rows
	res.Size = w.c.pos
	res.RangeBytes = w.c.ranged
	res.Paths.RangeBytes = w.c.ranged
	res.Major, res.Minor = 2, 1
	return res, nil
}

// FilterSource is a source file and its deleted rows (offsets into the
// file's rows; nil or empty when none).
type FilterSource struct {
	CopySource
	Deleted *roaring.Bitmap
}

// PagePath says how an output page (or a dropped source page) was made.
type PagePath int

const (
	PathCopy     PagePath = iota // source page kept byte for byte
	PathFilter                   // source page with deleted rows cut out, not decoded
	PathReencode                 // decoded and encoded again
	PathDrop                     // source page with no live rows: nothing written
	PathRechunk                  // mini-block page: chunks kept, those that lost rows cut apart
)

func (p PagePath) String() string {
	switch p {
	case PathCopy:
		return "copy"
	case PathFilter:
		return "filter"
	case PathReencode:
		return "reencode"
	case PathDrop:
		return "drop"
	case PathRechunk:
		return "rechunk"
	}
	return fmt.Sprintf("path(%d)", int(p))
}

// PathCount is how many pages took a path and the bytes they hold in the
// output (for PathDrop: in the sources).
type PathCount struct {
	Pages int   `json:"pages"`
	Bytes int64 `json:"bytes"`
}

// PathStats counts the pages per path.
type PathStats struct {
	Copied    PathCount `json:"copied"`
	Filtered  PathCount `json:"filtered"`
	Rechunked PathCount `json:"rechunked"`
	Reencoded PathCount `json:"reencoded"`
	Dropped   PathCount `json:"dropped"`
	// DictMerged counts the re-encoded pages (also in Reencoded) written
	// from source dictionaries merged without decoding a value.
	DictMerged PathCount `json:"dict_merged"`
	// Adopted counts the files of a join made of one slice piece: the
	// piece became the file (Pages: files, Bytes: their size), nothing
	// was copied.
	Adopted    PathCount `json:"adopted_pieces"`
	ColsCopied int       `json:"columns_copied"` // columns handled page by page (the others were re-encoded whole)
	// RangeBytes of the output were copied from the sources by the
	// destination itself (a local file: straight into its direct-write
	// buffers, or copy_file_range), never through the encoder.
	RangeBytes int64 `json:"range_copied_bytes"`
}

// Add accumulates o into s.
func (s *PathStats) Add(o PathStats) {
	s.Copied.Pages += o.Copied.Pages
	s.Copied.Bytes += o.Copied.Bytes
	s.Filtered.Pages += o.Filtered.Pages
	s.Filtered.Bytes += o.Filtered.Bytes
	s.Rechunked.Pages += o.Rechunked.Pages
	s.Rechunked.Bytes += o.Rechunked.Bytes
	s.Reencoded.Pages += o.Reencoded.Pages
	s.Reencoded.Bytes += o.Reencoded.Bytes
	s.Dropped.Pages += o.Dropped.Pages
	s.Dropped.Bytes += o.Dropped.Bytes
	s.DictMerged.Pages += o.DictMerged.Pages
	s.DictMerged.Bytes += o.DictMerged.Bytes
	s.Adopted.Pages += o.Adopted.Pages
	s.Adopted.Bytes += o.Adopted.Bytes
	s.ColsCopied += o.ColsCopied
	s.RangeBytes += o.RangeBytes
}

func (s *PathStats) count(p PagePath, bytes int64) {
	c := &s.Copied
	switch p {
	case PathFilter:
		c = &s.Filtered
	case PathRechunk:
		c = &s.Rechunked
	case PathReencode:
		c = &s.Reencoded
	case PathDrop:
		c = &s.Dropped
	}
	c.Pages++
	c.Bytes += bytes
}

// PageEvent describes one output page (or dropped source page): the
// output column, the source and its page index (-1 for a re-encoded page
// that merges rows of several pages or sources), the path and the output
// rows it holds.
type PageEvent struct {
	Column, Source, SourcePage int
	Path                       PagePath
	Rows                       uint64
}

// FilterResult is a finished file plus how its pages were made.
type FilterResult struct {
	Result
	Paths PathStats
}

// FilterOptions tune FilterConcat.
type FilterOptions struct {
	// PageBytes is the page size of re-encoded pages (default DefaultPageBytes).
	PageBytes int
	// Workers is the number of columns processed at once (default GOMAXPROCS).
	Workers int
	// BudgetBytes bounds the memory of the task: encoded pages waiting for
	// the output plus every worker's buffered rows (about 3 × PageBytes
	// each). Fewer workers run when the budget does not cover them all
	// (default 64 MiB; at least one worker always runs).
	BudgetBytes int64
	// Columnwise: the sources hold the same rows (and the same deleted
	// rows) and different fields, to be merged column by column (as
	// CopyColumns does) instead of concatenated row-wise: every output
	// column comes from the one source holding its field.
	Columnwise bool
	// PageCost is what one page more than a re-encode would write is worth
	// in bytes read (a request's latency); a column is copied page by page
	// when those charges stay within a quarter of its bytes (default
	// 64 KiB). Negative copies every column.
	PageCost int64
	// OnPage, if set, is called for every output page and dropped source
	// page (serially).
	OnPage func(PageEvent)

	// direct: the destination copies byte ranges of sources itself
	// (RangeWriter), so filtered pages keep their surviving bytes as runs
	// of the source instead of reading them.
	direct bool
}

// DefaultTaskBudget is FilterOptions.BudgetBytes' default.
const DefaultTaskBudget = 64 << 20

func (o *FilterOptions) defaults() {
	if o.PageBytes <= 0 {
		o.PageBytes = DefaultPageBytes
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.BudgetBytes <= 0 {
		o.BudgetBytes = DefaultTaskBudget
	}
	if o.PageCost == 0 {
		o.PageCost = 64 << 10
	}
}

type filterSrc struct {
	*openSource
	deleted  *roaring.Bitmap
	outStart uint64 // output row of this source's first live row
}

// deadIn counts deleted rows in [a, b).
func (s *filterSrc) deadIn(a, b uint64) uint64 {
	if s.deleted == nil || a >= b {
		return 0
	}
	return rankBelow(s.deleted, b) - rankBelow(s.deleted, a)
}

// liveSpan is the smallest run of rows [a, b) holding every live row of
// the source; ok is false when none is live. A source cut down to a row
// range (every row outside it deleted) is decoded only over that range.
func (s *filterSrc) liveSpan() (a, b uint64, ok bool) {
	n := s.f.NumRows()
	live := func(x uint64) uint64 { return x - rankBelow(s.deleted, x) } // live rows below x
	total := live(n)
	if total == 0 {
		return 0, 0, false
	}
	a = uint64(sort.Search(int(n), func(x int) bool { return live(uint64(x)+1) >= 1 }))
	b = uint64(sort.Search(int(n)+1, func(x int) bool { return live(uint64(x)) >= total }))
	return a, b, true
}

// outRow is the output row of physical row r (the next live row at or after it).
func (s *filterSrc) outRow(r uint64) uint64 { return s.outStart + r - rankBelow(s.deleted, r) }

func rankBelow(bm *roaring.Bitmap, x uint64) uint64 {
	if bm == nil || x == 0 {
		return 0
	}
	return bm.Rank(uint32(x - 1))
}

// colPlan is one output column: its leaf (writer state for re-encoding),
// the column of each source, and whether it is copied page by page.
type colPlan struct {
	col     int
	leaf    *leaf
	topID   int32
	srcCol  []int
	sources []*filterSrc
	copy    bool
}

func planColumn(l *leaf, fs []*filterSrc, opts FilterOptions) (*colPlan, error) {
	p := &colPlan{leaf: l, topID: l.path[0].f.Id, srcCol: make([]int, len(fs)), sources: fs}
	id := l.n.f.Id
	enc := directEncoding(columnEncodingBytes)
	copyOK := true
	var pages, bytes uint64
	for i, s := range fs {
		ci, ok := s.byID[id]
		if !ok {
			return nil, unsupported("%s holds no column for field %d (%q)", s.Name, id, l.n.f.Name)
		}
		sf := s.f.Field(id)
		if sf == nil || sf.GetLogicalType() != l.n.f.GetLogicalType() {
			return nil, unsupported("%s: field %d is not %q in the file", s.Name, id, l.n.f.GetLogicalType())
		}
		p.srcCol[i] = ci
		col := s.f.Columns[ci]
		if !proto.Equal(col.Meta.GetEncoding(), enc) {
			copyOK = false
		}
		// pages must tile the file's rows in order
		var next uint64
		for _, pg := range col.Meta.GetPages() {
			if pg.GetPriority() != next {
				copyOK = false
			}
			next += pg.GetLength()
			if s.deadIn(pg.GetPriority(), pg.GetPriority()+pg.GetLength()) == pg.GetLength() {
				continue
			}
			pages++
			for _, b := range pg.GetBufferSizes() {
				bytes += b
			}
		}
		if next != s.f.NumRows() {
			copyOK = false
		}
	}
	if copyOK && opts.PageCost > 0 {
		re := max(1, (bytes+uint64(opts.PageBytes)-1)/uint64(opts.PageBytes))
		if pages > re && float64(pages-re)*float64(opts.PageCost) > 0.25*float64(bytes) {
			copyOK = false
		}
	}
	p.copy = copyOK
	return p, nil
}

// holderOf returns the one source holding leaf l's field (column-wise).
func holderOf(l *leaf, fs []*filterSrc) ([]*filterSrc, error) {
	var from []*filterSrc
	for _, s := range fs {
		if _, ok := s.byID[l.n.f.Id]; ok {
			from = append(from, s)
		}
	}
	if len(from) != 1 {
		return nil, unsupported("%d sources hold field %d (%q)", len(from), l.n.f.Id, l.n.f.Name)
	}
	return from, nil
}

// outPage is a page ready for the output: owned buffers, or a source page
// to stream verbatim.
type outPage struct {
	col      int
	bufs     [][]byte
	layout   []byte // Any(PageLayout) for bufs
	src      *filterSrc
	srcPage  *file2pb.ColumnMetadata_Page
	runs     []byteRun  // buffer 0 is these bytes of runsOf (bufs[0] is nil)
	runsOf   *filterSrc // the source of runs
	rows     uint64
	priority uint64
	cost     int64 // bytes of bufs, held from the budget (dropped pages: source bytes, not held)
	ev       PageEvent
	pooled   []byte // a buffer of bufs from getPageBuf, returned once written
	merged   bool   // bufs encode a merged dictionary (colRun.dictionaries)
}

// Page buffers of filtered pages (the big ones: vectors, long strings) are
// reused once written: fewer fresh allocations to zero, fault in and
// collect. The task budget bounds how many are in use at once.
var pageBufs sync.Pool

// getPageBuf returns an empty buffer with room for n bytes.
func getPageBuf(n int) []byte {
	if b, ok := pageBufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

// putPageBuf makes b available to getPageBuf (its contents are dead).
func putPageBuf(b []byte) {
	if cap(b) >= 64<<10 {
		pageBufs.Put(&b)
	}
}

// done releases what op holds once it was written or discarded.
func (op *outPage) done(bud *budget) {
	if op.holds() {
		bud.release(op.cost)
	}
	if op.pooled != nil {
		putPageBuf(op.pooled)
		op.pooled, op.bufs = nil, nil
	}
}

// holds says whether the page holds budget bytes.
func (op *outPage) holds() bool { return op.src == nil && op.ev.Path != PathDrop }

// budget is a byte semaphore.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	free  int64
	total int64
	dead  bool
}

func newBudget(n int64) *budget {
	b := &budget{free: n, total: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits for n bytes (a request over the total waits for all of
// it); false when the budget was closed.
func (b *budget) acquire(n int64) bool {
	n = min(n, b.total)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.free < n && !b.dead {
		b.cond.Wait()
	}
	if b.dead {
		return false
	}
	b.free -= n
	return true
}

func (b *budget) release(n int64) {
	n = min(n, b.total)
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
	b.cond.Broadcast()
}

func (b *budget) close() {
	b.mu.Lock()
	b.dead = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

// runColumns processes the columns on workers and writes their pages.
func runColumns(ctx context.Context, w *Writer, plans []*colPlan, opts FilterOptions) (FilterResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	perWorker := int64(3 * opts.PageBytes)
	workers := int(min(int64(opts.Workers), max(1, opts.BudgetBytes/(perWorker+int64(opts.PageBytes)))))
	workers = max(1, min(workers, len(plans)))
	// what is left of the budget after the workers' own buffers bounds
	// the pages in flight (at least one page's worth)
	bud := newBudget(max(opts.BudgetBytes-int64(workers)*perWorker, int64(opts.PageBytes)))
	out := make(chan *outPage, 4*workers)
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
		bud.close()
	}
	q := &planQueue{left: slices.Clone(plans)}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// worker 0 takes copied columns first, the others re-encoded
			// ones: the output copies pages while columns are re-encoded
			for p := q.next(i == 0 && workers > 1); p != nil; p = q.next(i == 0 && workers > 1) {
				if ctx.Err() != nil {
					return
				}
				if err := p.run(ctx, out, bud, opts); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	var res FilterResult
	cp := &copier{ctx: ctx, c: w.c, buf: make([]byte, copyBufSize)}
	for op := range out {
		if firstErr != nil || ctx.Err() != nil {
			op.done(bud)
			continue
		}
		var np *file2pb.ColumnMetadata_Page
		var size int64
		start := w.c.pos
		if op.src != nil {
			var err error
			np, err = cp.copyPage(op.src.openSource, op.srcPage, op.priority)
			if err != nil {
				fail(err)
				continue
			}
			np.Length = op.rows
		} else if op.runs != nil {
			np = w.c.pageRuns(op.runsOf.R, op.runsOf.Name, op.runs, op.bufs, op.rows, op.priority, op.layout, cp.buf)
		} else if op.bufs != nil || op.layout != nil {
			np = w.c.page(op.bufs, op.rows, op.priority, op.layout)
		}
		if w.c.err != nil {
			fail(w.c.err)
			op.done(bud)
			continue
		}
		if np != nil {
			w.cols[op.col].Pages = append(w.cols[op.col].Pages, np)
			size = w.c.pos - start
		} else {
			size = op.cost // a dropped page: its source bytes
		}
		res.Paths.count(op.ev.Path, size)
		if op.merged {
			res.Paths.DictMerged.Pages++
			res.Paths.DictMerged.Bytes += size
		}
		if opts.OnPage != nil {
			opts.OnPage(op.ev)
		}
		op.done(bud)
	}
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	for _, p := range plans {
		if p.copy {
			res.Paths.ColsCopied++
		}
	}
	return res, nil
}

// planQueue hands out the columns still to process, in order, to workers
// that prefer copied (page by page) or re-encoded columns.
type planQueue struct {
	mu   sync.Mutex
	left []*colPlan
}

// next removes and returns the first remaining plan with copy ==
// preferCopy, or else the first remaining plan; nil when none is left.
func (q *planQueue) next(preferCopy bool) *colPlan {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.left) == 0 {
		return nil
	}
	k := 0
	for i, p := range q.left {
		if p.copy == preferCopy {
			k = i
			break
		}
	}
	p := q.left[k]
	q.left = append(q.left[:k], q.left[k+1:]...)
	return p
}

// emit hands a page to the output, holding cost bytes of the budget.
func emit(ctx context.Context, out chan<- *outPage, bud *budget, op *outPage) error {
	if op.holds() && !bud.acquire(op.cost) {
		return context.Canceled
	}
	select {
	case out <- op:
		return nil
	case <-ctx.Done():
		if op.holds() {
			bud.release(op.cost)
		}
		return ctx.Err()
	}
}

// run writes one column: page by page (copy) or re-encoded whole.
func (p *colPlan) run(ctx context.Context, out chan<- *outPage, bud *budget, opts FilterOptions) error {
	p.leaf.reset()
	cr := &colRun{p: p, l: p.leaf, ctx: ctx, out: out, bud: bud, opts: opts, pendingFrom: -1, pendingPage: -1}
	if !p.copy {
		for _, s := range p.sources {
			cr.left += s.f.NumRows() - s.deadIn(0, s.f.NumRows())
		}
		if ok, err := cr.dictionaries(); ok || err != nil {
			if err != nil {
				return err
			}
			return cr.flush()
		}
		cr.l.reserve(cr.left, opts.PageBytes)
	}
	for si, s := range p.sources {
		if !p.copy {
			if a, b, ok := s.liveSpan(); ok {
				if err := cr.addRows(si, s, a, b, -1); err != nil {
					return err
				}
			}
			continue
		}
		for pi, pg := range s.f.Columns[p.srcCol[si]].Meta.GetPages() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := cr.page(si, s, pi, pg); err != nil {
				return err
			}
		}
	}
	return cr.flush()
}

// colRun is one column being written: the rows buffered for re-encoding
// and where the pages go.
type colRun struct {
	p    *colPlan
	l    *leaf
	ctx  context.Context
	out  chan<- *outPage
	bud  *budget
	opts FilterOptions
	// source and page of the rows buffered in the leaf: -1 if mixed, -2
	// after a flush
	pendingFrom, pendingPage int
	// left is how many rows of a column re-encoded whole are still to
	// be buffered (the leaf's buffers are sized for them up front)
	left uint64
	// merging: the column's pages are read as dictionary indices
	// (dictionaries), the leaf's value buffers stay unused
	merging bool
}

// page handles source page pi of source si: dropped, copied, cut (filtered
// or re-chunked) or its live rows buffered for re-encoding.
func (cr *colRun) page(si int, s *filterSrc, pi int, pg *file2pb.ColumnMetadata_Page) error {
	p := cr.p
	a, n := pg.GetPriority(), pg.GetLength()
	dead := s.deadIn(a, a+n)
	ev := PageEvent{Column: p.col, Source: si, SourcePage: pi, Rows: n - dead}
	switch {
	case dead == n:
		var sz int64
		for _, b := range pg.GetBufferSizes() {
			sz += int64(b)
		}
		ev.Path = PathDrop
		return emit(cr.ctx, cr.out, cr.bud, &outPage{col: p.col, cost: sz, ev: ev})
	case dead == 0:
		if err := cr.flush(); err != nil {
			return err
		}
		ev.Path = PathCopy
		return emit(cr.ctx, cr.out, cr.bud, &outPage{col: p.col, src: s, srcPage: pg, rows: n, priority: s.outRow(a), ev: ev})
	}
	ops, path, err := cutPage(s, pg, a, n, cr.opts.direct)
	if err != nil {
		return fmt.Errorf("%s column %d page %d: %w", s.Name, p.srcCol[si], pi, err)
	}
	if ops == nil {
		return cr.addRows(si, s, a, a+n, pi)
	}
	if err := cr.flush(); err != nil {
		return err
	}
	for _, op := range ops {
		op.col, op.ev = p.col, ev
		op.ev.Path, op.ev.Rows = path, op.rows
		if err := emit(cr.ctx, cr.out, cr.bud, op); err != nil {
			return err
		}
	}
	return nil
}

// flush encodes the buffered rows as one page and hands it on.
func (cr *colRun) flush() error {
	l := cr.l
	if l.rows == 0 {
		return nil
	}
	bufs, enc, err := l.encodePage()
	if err != nil {
		return err
	}
	var cost int64
	for _, b := range bufs {
		cost += int64(len(b))
	}
	// encodePage drops a merged dictionary it did not write (leaf.undict)
	op := &outPage{col: cr.p.col, bufs: bufs, layout: enc, rows: l.rows, priority: l.written, cost: cost, merged: l.dict != nil,
		ev: PageEvent{Column: cr.p.col, Source: cr.pendingFrom, SourcePage: cr.pendingPage, Path: PathReencode, Rows: l.rows}}
	l.written += l.rows
	// the page owns bufs now; the leaf starts new buffers
	l.rows, l.nvis, l.nvalid, l.maxLen = 0, 0, 0, 0
	l.rep, l.codes, l.visible, l.fixed, l.bits, l.data, l.itemValid, l.offs = nil, nil, nil, nil, nil, nil, nil, []int64{0}
	l.dict = nil
	l.hasCodes, l.itemNulls = false, false
	cr.pendingFrom, cr.pendingPage = -2, -2
	if cr.left > 0 && !cr.merging {
		l.reserve(cr.left, cr.opts.PageBytes)
	}
	return emit(cr.ctx, cr.out, cr.bud, op)
}

// addRows decodes physical rows [a,b) of source si and buffers the live
// ones, flushing a page whenever the buffered rows reach the page size.
func (cr *colRun) addRows(si int, s *filterSrc, a, b uint64, page int) error {
	l := cr.l
	if l.rows == 0 {
		l.written = s.outRow(a)
		cr.pendingFrom, cr.pendingPage = si, page
	} else if cr.pendingFrom != si || cr.pendingPage != page {
		cr.pendingFrom, cr.pendingPage = -1, -1
	}
	r, err := s.f.NewReader(cr.ctx, lancefile.ReadOptions{FieldIDs: []int32{cr.p.topID}, Offset: a, Limit: b - a, BatchRows: lancefile.DefaultBatchRows})
	if err != nil {
		return fmt.Errorf("lancewrite: read %s: %w", s.Name, err)
	}
	defer r.Release()
	pos := a
	for r.Next() {
		col := r.RecordBatch().Column(0)
		n := uint64(col.Len())
		if err := addLive(l, col, s, pos); err != nil {
			return fmt.Errorf("column %q: %w", l.n.f.Name, err)
		}
		cr.left -= min(cr.left, n-s.deadIn(pos, pos+n))
		pos += n
		if l.size() >= cr.opts.PageBytes {
			if err := cr.flush(); err != nil {
				return err
			}
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("lancewrite: read %s: %w", s.Name, err)
	}
	if pos != b {
		return fmt.Errorf("lancewrite: read %s rows [%d,%d): got %d", s.Name, a, b, pos-a)
	}
	return nil
}

// dictionaries re-encodes a flat string or binary column whose every
// source page is a mini-block page of indices into a dictionary, without
// levels, and none of whose rows is deleted, without decoding a value: the
// pages' dictionaries are merged and their indices mapped into the merged
// one (a page whose merged dictionary does not pass lance's rules for one
// is encoded from its values after all). false, with nothing buffered,
// when the column is not of that shape.
func (cr *colRun) dictionaries() (bool, error) {
	l, p := cr.l, cr.p
	if len(l.path) != 1 || l.maxRep != 0 || l.n.vk != valVariable {
		return false, nil
	}
	type srcPage struct {
		si, pi int
		pg     *file2pb.ColumnMetadata_Page
		mb     *enc21pb.MiniBlockLayout
	}
	var pages []srcPage
	for si, s := range p.sources {
		if s.deleted != nil {
			return false, nil
		}
		var next uint64
		for pi, pg := range s.f.Columns[p.srcCol[si]].Meta.GetPages() {
			if pg.GetPriority() != next {
				return false, nil
			}
			next += pg.GetLength()
			pl, err := pageLayout(pg)
			if err != nil {
				return false, err
			}
			mb := pl.GetMiniBlockLayout()
			if mb == nil || mb.GetDictionary().GetVariable() == nil || mb.GetDefCompression() != nil ||
				mb.GetRepCompression() != nil || mb.GetNumItems() != pg.GetLength() {
				return false, nil
			}
			pages = append(pages, srcPage{si, pi, pg, mb})
		}
		if next != s.f.NumRows() {
			return false, nil
		}
	}
	cr.merging = true
	for _, sp := range pages {
		if err := cr.ctx.Err(); err != nil {
			return true, err
		}
		s := p.sources[sp.si]
		var bufs [][]byte
		for _, b := range lancefile.PageBuffers(sp.pg) {
			data, err := readBuffer(s, b)
			if err != nil {
				return true, err
			}
			bufs = append(bufs, data)
		}
		entries, idx, ok, err := lancefile.DictionaryIndices(sp.mb, bufs)
		if err != nil {
			return true, fmt.Errorf("%s column %d page %d: %w", s.Name, p.srcCol[sp.si], sp.pi, err)
		}
		a, n := sp.pg.GetPriority(), sp.pg.GetLength()
		if !ok || uint64(len(idx)) != n {
			// not what the layout said: decode this page's values
			if l.dict != nil {
				l.undict()
			}
			if err := cr.addRows(sp.si, s, a, a+n, sp.pi); err != nil {
				return true, err
			}
			continue
		}
		if l.rows == 0 {
			l.written = s.outRow(a)
			cr.pendingFrom, cr.pendingPage = sp.si, sp.pi
			// indices for the rows still to come, as far as a page holds them
			l.dict = &mergedDict{ids: map[string]uint32{}, idx: make([]byte, 0, 4*min(cr.left, uint64(cr.opts.PageBytes/8)))}
		} else if cr.pendingFrom != sp.si || cr.pendingPage != sp.pi {
			cr.pendingFrom, cr.pendingPage = -1, -1
		}
		if l.dict == nil {
			// rows of a decoded page are buffered: go on decoding
			if err := cr.addRows(sp.si, s, a, a+n, sp.pi); err != nil {
				return true, err
			}
			continue
		}
		l.addDictPage(entries, idx)
		cr.left -= min(cr.left, n)
		// a page as big as the decoded values would make it (leaf.size)
		if l.dict.bytes+8*(l.nvis+1) >= cr.opts.PageBytes {
			if err := cr.flush(); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// addLive adds the live rows of col (physical rows from pos on) to l, run
// by run.
func addLive(l *leaf, col arrow.Array, s *filterSrc, pos uint64) error {
	n := uint64(col.Len())
	if s.deadIn(pos, pos+n) == 0 {
		return l.add(col)
	}
	it := s.deleted.Iterator()
	it.AdvanceIfNeeded(uint32(pos))
	at := uint64(0)
	for it.HasNext() {
		d := uint64(it.Next())
		if d >= pos+n {
			break
		}
		if k := d - pos; k > at {
			if err := addSlice(l, col, at, k); err != nil {
				return err
			}
		}
		at = d - pos + 1
	}
	if at < n {
		return addSlice(l, col, at, n)
	}
	return nil
}

func addSlice(l *leaf, col arrow.Array, a, b uint64) error {
	if a == 0 && b == uint64(col.Len()) {
		return l.add(col)
	}
	sl := array.NewSlice(col, int64(a), int64(b))
	defer sl.Release()
	return l.add(sl)
}

// cutPage removes the deleted rows of a page that lost some without a
// decode of the page: a full-zip page by its zipped rows (PathFilter), a
// mini-block page by its chunks (PathRechunk). It returns nil when the page
// must be re-encoded.
func cutPage(s *filterSrc, pg *file2pb.ColumnMetadata_Page, a, n uint64, direct bool) ([]*outPage, PagePath, error) {
	pl, err := pageLayout(pg)
	if err != nil {
		return nil, 0, err
	}
	if pl.GetMiniBlockLayout() != nil {
		ops, err := rechunkPage(s, pg, pl, a, n)
		return ops, PathRechunk, err
	}
	op, err := filterPage(s, pg, pl, a, n, direct)
	if op == nil || err != nil {
		return nil, 0, err
	}
	return []*outPage{op}, PathFilter, nil
}

// pageLayout decodes a 2.1 page's layout.
func pageLayout(pg *file2pb.ColumnMetadata_Page) (*enc21pb.PageLayout, error) {
	anyEnc, err := lancefile.PageEncoding(pg.GetEncoding())
	if err != nil {
		return nil, err
	}
	return layoutOf(anyEnc)
}

// layoutOf decodes a 2.1 page's encoding message as its layout.
func layoutOf(a *anypb.Any) (*enc21pb.PageLayout, error) {
	var pl enc21pb.PageLayout
	if err := proto.Unmarshal(a.GetValue(), &pl); err != nil {
		return nil, fmt.Errorf("%w: page layout: %v", lancefile.ErrCorrupt, err)
	}
	return &pl, nil
}

// filterPage cuts the deleted rows out of a full-zip page without
// repetition (rows [a, a+n) of the source, some of them deleted). It
// returns nil when the page's layout needs a decode. With direct, the
// surviving rows' bytes stay in the source as runs for the destination to
// copy itself; otherwise they are read (runs close together in one
// request).
func filterPage(s *filterSrc, pg *file2pb.ColumnMetadata_Page, pl *enc21pb.PageLayout, a, n uint64, direct bool) (*outPage, error) {
	fz := pl.GetFullZipLayout()
	if fz == nil || fz.GetBitsRep() != 0 || uint64(fz.GetNumItems()) != n || (fz.GetNumVisibleItems() != 0 && fz.GetNumVisibleItems() != fz.GetNumItems()) {
		return nil, nil
	}
	bufs := lancefile.PageBuffers(pg)
	cw := uint64(0)
	switch b := fz.GetBitsDef(); {
	case b == 0:
	case b <= 8:
		cw = 1
	case b <= 16:
		cw = 2
	default:
		return nil, nil
	}
	live := n - s.deadIn(a, a+n)
	rows := liveRuns(s, a, n)
	var runs []byteRun
	var index []byte // the rebuilt repetition index (variable width)
	switch {
	case fz.GetBitsPerValue() != 0 && len(bufs) == 1:
		row := cw + uint64(fz.GetBitsPerValue()/8)
		if bufs[0].Size != n*row {
			return nil, fmt.Errorf("%w: full-zip page of %d rows × %d bytes has %d bytes", lancefile.ErrCorrupt, n, row, bufs[0].Size)
		}
		runs = make([]byteRun, len(rows))
		for i, r := range rows {
			runs[i] = byteRun{bufs[0].Offset + r[0]*row, (r[1] - r[0]) * row}
		}
	case fz.GetBitsPerOffset() != 0 && len(bufs) == 2:
		var err error
		if runs, index, err = zippedRuns(s, bufs, rows, n, live); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	nz := proto.Clone(fz).(*enc21pb.FullZipLayout)
	nz.NumItems = uint32(live)
	if fz.GetNumVisibleItems() != 0 {
		nz.NumVisibleItems = uint32(live)
	}
	lb, err := marshalOpts.Marshal(&enc21pb.PageLayout{Layout: &enc21pb.PageLayout_FullZipLayout{FullZipLayout: nz}})
	if err != nil {
		return nil, fmt.Errorf("lancewrite: marshal page layout: %w", err)
	}
	op := &outPage{layout: mustAny(pageLayoutURL, lb), rows: live, priority: s.outRow(a)}
	out := [][]byte{nil}
	if index != nil {
		out = append(out, index)
	}
	if direct {
		op.runs, op.runsOf = runs, s
	} else {
		var size uint64
		for _, r := range runs {
			size += r[1]
		}
		data, err := readRuns(getPageBuf(int(size)), s.R, s.Name, runs)
		if err != nil {
			return nil, err
		}
		out[0], op.pooled = data, data
	}
	op.bufs = out
	for _, b := range out {
		op.cost += int64(len(b))
	}
	return op, nil
}

// zippedRuns reads the repetition index of a variable-width full-zip page
// (bufs: zipped rows, index) and returns the byte runs of the live rows
// (rows: runs of live row numbers) and the index of the filtered page.
func zippedRuns(s *filterSrc, bufs []lancefile.Buffer, rows [][2]uint64, n, live uint64) ([]byteRun, []byte, error) {
	w := bufs[1].Size / (n + 1)
	if w*(n+1) != bufs[1].Size || (w != 1 && w != 2 && w != 4 && w != 8) {
		return nil, nil, fmt.Errorf("%w: full-zip repetition index of %d bytes for %d rows", lancefile.ErrCorrupt, bufs[1].Size, n)
	}
	ix, err := readRuns(nil, s.R, s.Name, []byteRun{{bufs[1].Offset, bufs[1].Size}})
	if err != nil {
		return nil, nil, err
	}
	at := func(i uint64) uint64 {
		switch w {
		case 1:
			return uint64(ix[i])
		case 2:
			return uint64(binary.LittleEndian.Uint16(ix[2*i:]))
		case 4:
			return uint64(binary.LittleEndian.Uint32(ix[4*i:]))
		}
		return binary.LittleEndian.Uint64(ix[8*i:])
	}
	runs := make([]byteRun, 0, len(rows))
	starts := make([]uint64, 0, live+1)
	var total uint64
	for _, r := range rows {
		if at(r[0]) > at(r[1]) || at(r[1]) > bufs[0].Size {
			return nil, nil, fmt.Errorf("%w: full-zip repetition index out of order", lancefile.ErrCorrupt)
		}
		base := total - at(r[0])
		for i := r[0]; i < r[1]; i++ {
			starts = append(starts, at(i)+base)
		}
		runs = append(runs, byteRun{bufs[0].Offset + at(r[0]), at(r[1]) - at(r[0])})
		total += at(r[1]) - at(r[0])
	}
	starts = append(starts, total)
	return runs, bytepacked(starts, total), nil
}
