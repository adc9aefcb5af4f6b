package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Row slices (job.SliceTask): a rewrite or repack of one huge fragment is
// run as several slice tasks, each writing its rows as file pieces, and one
// join task that concatenates the pieces by page copy.
//
// A rewrite slice of physical rows [lo, hi) writes the live rows of that
// range, cut where the rewrite's new fragments start (every
// target_rows_per_fragment live rows of the fragment, fewer under
// max_bytes_per_file: see sliceTarget), so each new
// fragment's file is the concatenation of whole pieces. A repack slice
// writes, for every planned file, rows [lo, hi) (deleted rows included,
// as a repack keeps them) of the moved columns. In 2.1 tables a piece is
// written with lancewrite.FilterConcat, the rows outside the slice treated
// as deleted (a piece of several files merges them column-wise): pages
// inside the range are copied, the two cut at its ends filtered, re-chunked
// or re-encoded; where that cannot be done the range is decoded and
// encoded.

// ExecuteSlice runs one slice against m, the manifest of its parent's read
// version. On error every piece it wrote is deleted.
func ExecuteSlice(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.SliceTask) (out *job.SliceOutput, err error) {
	if t.Remap != nil {
		return ExecuteRemapPart(ctx, tbl, m, t)
	}
	if t.CatchUp != nil {
		return ExecuteCatchUpDelta(ctx, tbl, t)
	}
	frag, ver, err := sliceInputs(m, t.Parent())
	if err != nil {
		return nil, err
	}
	r := t.Range()
	if r.Hi > frag.GetPhysicalRows() {
		return nil, fmt.Errorf("%w: slice [%d,%d) of fragment %d, which has %d rows", job.ErrInvalidTask, r.Lo, r.Hi, frag.GetId(), frag.GetPhysicalRows())
	}
	out = &job.SliceOutput{Slice: t}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), tbl.Bucket(), out.Outputs)
			out = nil
		}
	}()
	sw := &sliceWriter{ctx: ctx, tbl: tbl, frag: frag, ver: ver, out: out}
	if t.Rewrite != nil {
		err = sw.rewrite(m.GetFields(), t.Rewrite, r)
	} else {
		err = sw.repack(m, t.Repack, r)
	}
	if err != nil {
		return out, err
	}
	// Pages outside the slice are left out of its pieces; they are not
	// dropped rows.
	out.Paths.Dropped = lancewrite.PathCount{}
	failpoint.Hit("slice.done")
	return out, nil
}

// sliceInputs checks a sliced task's read version and returns its one
// fragment and the table's storage version.
func sliceInputs(m *tablepb.Manifest, p job.Task) (*tablepb.DataFragment, lancewrite.Version, error) {
	if m.GetVersion() != p.ReadVersion() {
		return nil, 0, fmt.Errorf("%s planned at version %d given manifest %d", p.Kind(), p.ReadVersion(), m.GetVersion())
	}
	if err := format.CheckWritable(m); err != nil {
		return nil, 0, err
	}
	frags, err := taskFragments(m, p.Fragments())
	if err != nil {
		return nil, 0, err
	}
	ver, err := storageVersion(m)
	if err != nil {
		return nil, 0, err
	}
	return frags[0], ver, nil
}

// rewriteTarget is the live rows per new fragment (and file) of a rewrite.
func rewriteTarget(t *job.RewriteTask) uint64 {
	target := t.TargetRowsPerFragment
	if target == 0 {
		target = 1024 * 1024
	}
	if t.MaxRowsPerFile > 0 && t.MaxRowsPerFile < target {
		target = t.MaxRowsPerFile
	}
	return target
}

// sliceTarget is the live rows per new fragment of a sliced rewrite of
// frag: rewriteTarget, and under max_bytes_per_file no more rows than that
// many bytes hold at the fragment's bytes per physical row. Every slice
// computes the same number from the same manifest entry, so the pieces of
// one new fragment line up across slices (an unsliced rewrite closes a
// file once its written bytes reach the limit instead).
func sliceTarget(t *job.RewriteTask, frag *tablepb.DataFragment) uint64 {
	target := rewriteTarget(t)
	var bytes uint64
	for _, df := range frag.GetFiles() {
		bytes += df.GetFileSizeBytes()
	}
	phys := frag.GetPhysicalRows()
	if t.MaxBytesPerFile == 0 || bytes == 0 || phys == 0 {
		return target
	}
	rows := uint64(float64(t.MaxBytesPerFile) * float64(phys) / float64(bytes))
	return max(1, min(target, rows))
}

// liveBelow counts the rows below x that are not in deleted.
func liveBelow(deleted *roaring.Bitmap, x uint64) uint64 {
	if deleted == nil || x == 0 {
		return x
	}
	return x - deleted.Rank(uint32(x-1))
}

type sliceWriter struct {
	ctx  context.Context
	tbl  *table.Table
	frag *tablepb.DataFragment
	ver  lancewrite.Version
	out  *job.SliceOutput
}

// rewrite writes the live rows of r, one piece per new fragment it reaches.
func (sw *sliceWriter) rewrite(fields []*filepb.Field, t *job.RewriteTask, r job.RowRange) error {
	deleted, err := sw.tbl.ReadDeletions(sw.ctx, sw.frag)
	if err != nil {
		return fmt.Errorf("read fragment %d: %w", sw.frag.GetId(), err)
	}
	if deleted != nil && deleted.IsEmpty() {
		deleted = nil
	}
	target := sliceTarget(t, sw.frag)
	for pos := r.Lo; pos < r.Hi; {
		w := liveBelow(deleted, pos) / target
		bound := (w + 1) * target // the next new fragment's first live row
		n := r.Hi - pos
		end := pos + uint64(sort.Search(int(n), func(i int) bool { return liveBelow(deleted, pos+uint64(i)+1) >= bound })) + 1
		end = min(end, r.Hi)
		if rows := liveBelow(deleted, end) - liveBelow(deleted, pos); rows > 0 {
			if err := sw.piece(fields, sw.frag.GetFiles(), int(w), pos, end, rows, deleted, true); err != nil {
				return err
			}
		}
		pos = end
	}
	return nil
}

// repack writes rows r of every planned file's columns, one piece each.
func (sw *sliceWriter) repack(m *tablepb.Manifest, t *job.RepackTask, r job.RowRange) error {
	for i := range t.Files {
		srcs, outFields, err := repackInputs(m, sw.frag, t, i)
		if err != nil {
			return err
		}
		if err := sw.piece(outFields, srcs, i, r.Lo, r.Hi, r.Hi-r.Lo, nil, false); err != nil {
			return err
		}
	}
	return nil
}

// piece writes physical rows [lo, hi) of srcs (fields), without the rows
// in deleted, as piece file of the output; rows is how many it holds.
func (sw *sliceWriter) piece(fields []*filepb.Field, srcs []*tablepb.DataFile, file int, lo, hi, rows uint64, deleted *roaring.Bitmap, dropDeleted bool) error {
	b := sw.tbl.Bucket()
	phys := sw.frag.GetPhysicalRows()
	var res lancewrite.Result
	done := false
	if sw.ver == lancewrite.V2_1 && all21(srcs) {
		mask := roaring.New()
		if deleted != nil {
			mask = deleted.Clone()
		}
		mask.AddRange(0, lo)
		mask.AddRange(hi, phys)
		// One source: its rows in the range. Several (a repack merging
		// files): the same rows of each, merged column by column.
		fsrcs := make([]lancewrite.FilterSource, 0, len(srcs))
		defer func() {
			for _, s := range fsrcs {
				_ = s.R.(store.ReaderAt).Close()
			}
		}()
		for _, df := range srcs {
			key := format.DataFileKey(df.GetPath())
			ra, err := b.OpenReaderAt(sw.ctx, key)
			if err != nil {
				return fmt.Errorf("open %s: %w", key, err)
			}
			fsrcs = append(fsrcs, lancewrite.FilterSource{CopySource: lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df}, Deleted: mask})
		}
		var paths lancewrite.PathStats
		name := newDataFileName()
		var err error
		res, err = writeOutput(sw.ctx, b, format.DataFileKey(name), &sw.out.Outputs, func(w io.Writer) (lancewrite.Result, error) {
			fr, err := lancewrite.FilterConcat(sw.ctx, w, fields, fsrcs, lancewrite.FilterOptions{Workers: int(taskWorkers.Load()),
				BudgetBytes: taskBudget.Load(), PageCost: pageCost(b), Columnwise: len(fsrcs) > 1})
			paths = fr.Paths
			return fr.Result, err
		})
		switch {
		case err == nil:
			done = true
			sw.out.Paths.Add(paths)
			if err := sw.addPiece(name, file, rows, res); err != nil {
				return err
			}
		case errors.Is(err, lancewrite.ErrCopyUnsupported):
			// Nothing was written under the key; forget it.
			deleteKeys(context.WithoutCancel(sw.ctx), b, sw.out.Outputs[len(sw.out.Outputs)-1:])
			sw.out.Outputs = sw.out.Outputs[:len(sw.out.Outputs)-1]
		default:
			return fmt.Errorf("slice of fragment %d: %w", sw.frag.GetId(), err)
		}
	}
	if !done {
		name := newDataFileName()
		var err error
		opts := scan.ScanOptions{Offset: lo, Limit: hi - lo, BatchRows: rewriteBatchRows, Deletions: deleted, KeepDeleted: !dropDeleted}
		if dropDeleted && deleted == nil {
			opts.Deletions = roaring.New()
		}
		src := &tablepb.DataFragment{Id: sw.frag.GetId(), Files: srcs, PhysicalRows: phys}
		res, err = writeOutput(sw.ctx, b, format.DataFileKey(name), &sw.out.Outputs, reencodeRows(sw.ctx, b, fields, src, opts, sw.ver))
		if err != nil {
			return fmt.Errorf("slice of fragment %d: %w", sw.frag.GetId(), err)
		}
		sw.out.Paths.Reencoded.Pages++
		sw.out.Paths.Reencoded.Bytes += res.Size
		if err := sw.addPiece(name, file, rows, res); err != nil {
			return err
		}
	}
	var srcBytes uint64
	for _, df := range srcs {
		srcBytes += df.GetFileSizeBytes()
	}
	progress.Add(sw.ctx, int64(hi-lo), int64(float64(srcBytes)*float64(hi-lo)/float64(max(phys, 1))))
	return nil
}

// all21 says whether every file is a 2.1 data file.
func all21(dfs []*tablepb.DataFile) bool {
	for _, df := range dfs {
		if df.GetFileMajorVersion() != 2 || df.GetFileMinorVersion() != 1 {
			return false
		}
	}
	return len(dfs) > 0
}

func (sw *sliceWriter) addPiece(name string, file int, rows uint64, res lancewrite.Result) error {
	if res.NumRows != rows {
		return fmt.Errorf("%w: slice piece %s of fragment %d has %d rows, want %d", job.ErrInvariant, name, sw.frag.GetId(), res.NumRows, rows)
	}
	p, err := job.NewPiece(sw.out.Slice.Index, file, rows, dataFile(name, res))
	if err != nil {
		return err
	}
	sw.out.Pieces = append(sw.out.Pieces, p)
	sw.out.RowsWritten += rows
	sw.out.BytesWritten += res.Size
	failpoint.Hit("slice.piece")
	return nil
}

// logSliced logs what an executed slice or join did: its pieces and how
// their pages were made, or the pages the join copied.
func (r *Runner) logSliced(j job.Job, d time.Duration) {
	var paths lancewrite.PathStats
	args := []any{"table", r.name(), "task_id", j.Task().Key(), "kind", string(j.Task().Kind()), "duration", d}
	switch o := j.(type) {
	case *job.SliceOutput:
		paths = o.Paths
		args = append(args, "pieces", len(o.Pieces), "rows", o.RowsWritten, "bytes_written", o.BytesWritten)
	case *job.RewriteOutput:
		if o.Join == nil {
			return
		}
		paths = o.Paths
		args = append(args, "pieces", len(o.Join.Pieces), "files", len(o.Outputs), "rows", o.RowsWritten, "bytes_read", o.BytesRead, "bytes_written", o.BytesWritten)
	case *job.RepackOutput:
		if o.Join == nil {
			return
		}
		paths = o.Paths
		args = append(args, "pieces", len(o.Join.Pieces), "files", len(o.Outputs), "bytes_read", o.BytesRead, "bytes_written", o.BytesWritten)
	default:
		return
	}
	args = append(args, "pages_copied", paths.Copied.Pages, "bytes_copied", paths.Copied.Bytes, "pages_filtered", paths.Filtered.Pages,
		"pages_rechunked", paths.Rechunked.Pages, "pages_reencoded", paths.Reencoded.Pages, "range_copied_bytes", paths.RangeBytes)
	msg := "slice written"
	if j.Task().Join != nil {
		msg = "slices joined"
	}
	r.log().Info(msg, args...)
}

// ExecuteJoin concatenates the pieces of a sliced task by page copy into
// the parent's files and returns the parent's job (its Join set). Pieces
// are never decoded: a piece that cannot be copied fails the join.
func ExecuteJoin(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.JoinTask) (j job.Job, err error) {
	if t.Remap != nil {
		o, err := ExecuteRemapJoin(ctx, tbl, m, t)
		if err != nil {
			return nil, err
		}
		return o, nil
	}
	if t.CatchUp != nil {
		o, err := ExecuteCatchUpMerge(ctx, tbl, t)
		if err != nil {
			return nil, err
		}
		return o, nil
	}
	frag, _, err := sliceInputs(m, t.Parent())
	if err != nil {
		return nil, err
	}
	var outputs []string
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), tbl.Bucket(), outputs)
		}
	}()
	jf, err := joinFiles(ctx, tbl.Bucket(), frag, t.Pieces, &outputs)
	if err != nil {
		return nil, err
	}
	if t.Repack != nil {
		return joinedRepack(frag, t, jf, outputs)
	}
	return joinedRewrite(ctx, tbl, m, frag, t, jf, outputs)
}

// joinedFiles are the files a join made, one per file index of the
// parent, in file order, with their row counts and the join's I/O.
type joinedFiles struct {
	made          []*tablepb.DataFile
	rows          []uint64
	paths         lancewrite.PathStats
	read, written int64
}

// joinFiles joins the pieces of each file of frag (by file index, in
// order) and appends every key it writes or adopts to outputs.
func joinFiles(ctx context.Context, b *store.Bucket, frag *tablepb.DataFragment, pieces []job.Piece, outputs *[]string) (*joinedFiles, error) {
	files := map[int][]job.Piece{}
	var order []int
	for _, p := range pieces {
		if _, ok := files[p.File]; !ok {
			order = append(order, p.File)
		}
		files[p.File] = append(files[p.File], p)
	}
	slices.Sort(order)
	jf := &joinedFiles{made: make([]*tablepb.DataFile, 0, len(order)), rows: make([]uint64, 0, len(order))}
	var adopted []string // pieces that are a joined file as they are
	for _, f := range order {
		df, res, n, err := joinPieces(ctx, b, files[f], outputs, &adopted)
		if err != nil {
			return nil, fmt.Errorf("join fragment %d file %d: %w", frag.GetId(), f, err)
		}
		jf.made = append(jf.made, df)
		jf.rows = append(jf.rows, res.NumRows)
		jf.read += n
		if len(files[f]) == 1 {
			jf.paths.Adopted.Pages++
			jf.paths.Adopted.Bytes += res.Size
			continue
		}
		jf.written += res.Size
		jf.paths.Copied.Pages += res.PagesCopied
		jf.paths.Copied.Bytes += res.BytesCopied
		jf.paths.RangeBytes += res.RangeBytes
	}
	jf.paths.ColsCopied = len(order)
	// The adopted pieces become the join's outputs only now that every
	// file is made: a join that failed before leaves them to their slices
	// (a rerun can adopt them again).
	for _, key := range adopted {
		if err := journal.RecordOutput(ctx, key); err != nil {
			return nil, err
		}
		*outputs = append(*outputs, key)
	}
	return jf, nil
}

// joinedRepack is the repack job of a join: the joined files replace the
// repacked columns of frag.
func joinedRepack(frag *tablepb.DataFragment, t *job.JoinTask, jf *joinedFiles, outputs []string) (job.Job, error) {
	if len(jf.made) != len(t.Repack.Files) {
		return nil, fmt.Errorf("%w: join of fragment %d made %d files, the repack plans %d", job.ErrInvalidTask, frag.GetId(), len(jf.made), len(t.Repack.Files))
	}
	for i, n := range jf.rows {
		if n != frag.GetPhysicalRows() {
			return nil, fmt.Errorf("%w: joined file %s has %d rows, fragment %d has %d", job.ErrInvariant, jf.made[i].GetPath(), n, frag.GetId(), frag.GetPhysicalRows())
		}
	}
	return &job.RepackOutput{Repack: t.Repack, Join: t, Result: &job.RepackResult{Base: frag, Files: repackedFiles(frag, t.Repack, jf.made)},
		Outputs: outputs, Copied: len(jf.made), BytesRead: jf.read, BytesWritten: jf.written, Paths: jf.paths}, nil
}

// joinedRewrite is the rewrite job of a join: one new fragment per joined
// file replaces frag, with its retained row addresses (deferred index
// remap) or its stable row ids carried over.
func joinedRewrite(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, frag *tablepb.DataFragment, t *job.JoinTask, jf *joinedFiles, outputs []string) (job.Job, error) {
	out := &job.RewriteOutput{Rewrite: t.Rewrite, Join: t, Group: &job.RewriteGroup{Old: []*tablepb.DataFragment{frag}}, Outputs: outputs,
		RowsRead: format.LiveRows(frag), BytesRead: jf.read, BytesWritten: jf.written, Copied: len(jf.made), Paths: jf.paths}
	stable := format.StableRowIDs(m)
	var deleted *roaring.Bitmap
	if stable || t.Rewrite.IndexCoverage == job.DeferIndexRemap {
		var err error
		if deleted, err = tbl.ReadDeletions(ctx, frag); err != nil {
			return nil, fmt.Errorf("read fragment %d: %w", frag.GetId(), err)
		}
	}
	var lin *format.Lineage
	if !stable && t.Rewrite.IndexCoverage == job.DeferIndexRemap {
		// The join's entry in the fragment reuse index: the fragment's
		// rows but the deleted ones, in order, as the slices wrote them.
		ra := index.NewRetainedAddrs()
		ra.AddFragment(frag.GetId(), frag.GetPhysicalRows(), deleted)
		if ra.Len() != out.RowsRead {
			return nil, fmt.Errorf("%w: fragment %d keeps %d row addresses for %d live rows", job.ErrInvariant, frag.GetId(), ra.Len(), out.RowsRead)
		}
		var err error
		if out.Retained, err = ra.Bytes(); err != nil {
			return nil, err
		}
	}
	if stable {
		meta, err := format.DecodeRowMeta(frag)
		if err != nil {
			return nil, err
		}
		lin = &format.Lineage{}
		lin.Keep(meta, deleted)
	}
	for i, df := range jf.made {
		nf := &tablepb.DataFragment{PhysicalRows: jf.rows[i], Files: []*tablepb.DataFile{df}}
		if lin != nil {
			if err := lin.Assign(nf, jf.rows[i]); err != nil {
				return nil, err
			}
		}
		out.Group.New = append(out.Group.New, nf)
		out.RowsWritten += jf.rows[i]
	}
	if out.RowsWritten != out.RowsRead {
		return nil, fmt.Errorf("%w: fragment %d has %d live rows, its slices joined %d", job.ErrInvariant, frag.GetId(), out.RowsRead, out.RowsWritten)
	}
	if lin != nil && lin.Left() != 0 {
		return nil, fmt.Errorf("%w: %d row ids left after the join", job.ErrInvariant, lin.Left())
	}
	return out, nil
}

// keySet is keys as a set.
func keySet(keys []string) map[string]bool {
	s := make(map[string]bool, len(keys))
	for _, k := range keys {
		s[k] = true
	}
	return s
}

// joinPieces concatenates pieces (in order) into one new data file; n is
// the bytes of pieces read. A single piece is adopted instead: it already
// is the file (a file a slice wrote for this task, which no version
// references); ExecuteJoin makes it one of the join's outputs, recorded in
// the join's journal entry before the slices' entries are discarded
// without it (prepareSlices), and n is 0; its key is added to adopted.
func joinPieces(ctx context.Context, b *store.Bucket, pieces []job.Piece, outputs, adopted *[]string) (*tablepb.DataFile, lancewrite.Result, int64, error) {
	if len(pieces) == 1 {
		df, res, err := adoptPiece(ctx, b, pieces[0])
		if err == nil {
			*adopted = append(*adopted, format.DataFileKey(df.GetPath()))
		}
		return df, res, 0, err
	}
	var srcs []lancewrite.CopySource
	defer func() {
		for _, s := range srcs {
			_ = s.R.(store.ReaderAt).Close()
		}
	}()
	var n int64
	for _, p := range pieces {
		df, err := p.DataFile()
		if err != nil {
			return nil, lancewrite.Result{}, 0, err
		}
		key := format.DataFileKey(df.GetPath())
		ra, err := b.OpenReaderAt(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			// The pieces went with an earlier run of this join.
			return nil, lancewrite.Result{}, 0, fmt.Errorf("piece %s is gone: %w: %w", key, job.ErrStale, err)
		}
		if err != nil {
			return nil, lancewrite.Result{}, 0, fmt.Errorf("open %s: %w", key, err)
		}
		srcs = append(srcs, lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df})
		n += ra.Size()
	}
	name := newDataFileName()
	res, err := writeOutput(ctx, b, format.DataFileKey(name), outputs, func(w io.Writer) (lancewrite.Result, error) {
		return lancewrite.ConcatRows(ctx, w, srcs...)
	})
	if err != nil {
		return nil, res, 0, err
	}
	failpoint.Hit("join.file")
	return dataFile(name, res), res, n, nil
}

// adoptPiece makes the one piece of a joined file the file itself.
func adoptPiece(ctx context.Context, b *store.Bucket, p job.Piece) (*tablepb.DataFile, lancewrite.Result, error) {
	df, err := p.DataFile()
	if err != nil {
		return nil, lancewrite.Result{}, err
	}
	key := format.DataFileKey(df.GetPath())
	attrs, err := b.Attributes(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, lancewrite.Result{}, fmt.Errorf("piece %s is gone: %w: %w", key, job.ErrStale, err)
	}
	if err != nil {
		return nil, lancewrite.Result{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if uint64(attrs.Size) != df.GetFileSizeBytes() {
		return nil, lancewrite.Result{}, fmt.Errorf("%w: piece %s has %d bytes, its slice wrote %d", job.ErrInvariant, key, attrs.Size, df.GetFileSizeBytes())
	}
	failpoint.Hit("join.file")
	return df, lancewrite.Result{NumRows: p.Rows, Size: attrs.Size, Fields: df.GetFields(), ColumnIndices: df.GetColumnIndices(),
		Major: df.GetFileMajorVersion(), Minor: df.GetFileMinorVersion()}, nil
}

// prepareSlices takes the executed slices out of ps before a commit. A
// task whose slices are all there gets its join: run here, its job added
// to what is committed, or, with Runner.QueueJoins, handed back as a
// queued task the slices wait for. Slices whose join is in ps have done
// their part: their pieces are deleted (the join copied them). Slices
// whose siblings are missing wait for them once (QueueJoins; the daemon
// queues every slice of a task together); kept back a second time, or in a
// run without a queue, they are given up and their pieces deleted (the
// table is planned again).
func (r *Runner) prepareSlices(ctx context.Context, ps []Pending) ([]Pending, *CommitReport, error) {
	deleteMergedDeltas(ctx, r.Table.Bucket(), ps)
	groups, rest, joined := groupSlices(ps)
	if len(groups) == 0 {
		return ps, nil, nil
	}
	rep := &CommitReport{Op: "slice"}
	// The rewrites a remap run in parts is for, and the other remaps of
	// their read version, wait with the parts: for the missing ones, then
	// for the join (they commit in one Rewrite transaction).
	remapWait := map[uint64][]string{}
	for _, g := range groups {
		rep.ReadVersion = g.parent.ReadVersion()
		if keep, ok := joined[g.parent.Key()]; ok {
			r.discardExcept(ctx, g.slices, keep)
			continue
		}
		r.dropDuplicateSlices(ctx, g)
		after, complete := r.waitForSiblings(ctx, g, rep)
		if complete {
			jp, key, err := r.joinSlices(ctx, g, rep)
			if err != nil {
				return rest, rep, err
			}
			if jp != nil {
				rest = append(rest, *jp)
				rep.Joined = append(rep.Joined, *jp)
			}
			after = nil
			if key != "" {
				after = []string{key}
			}
		}
		if g.parent.Remap != nil && after != nil {
			remapWait[g.parent.ReadVersion()] = append(remapWait[g.parent.ReadVersion()], after...)
		}
	}
	return holdForRemapParts(rest, remapWait, rep), rep, nil
}

// slicedTask is a task run in slices and its executed slices in a batch.
type slicedTask struct {
	parent job.Task
	slices []Pending
}

// groupSlices takes the executed slices out of ps, grouped by the task
// they are slices of (in the order of each task's first slice); rest are
// the other jobs, and joined maps the keys of the tasks whose join is
// among them to the join's outputs (the pieces it adopted are among them
// and stay).
func groupSlices(ps []Pending) (groups []*slicedTask, rest []Pending, joined map[string]map[string]bool) {
	byParent := map[string]*slicedTask{}
	joined = map[string]map[string]bool{}
	for _, p := range ps {
		o, ok := p.Job.(*job.SliceOutput)
		if !ok {
			if jt := p.Job.Task().Join; jt != nil {
				joined[jt.Parent().Key()] = keySet(p.Job.Written())
			}
			rest = append(rest, p)
			continue
		}
		pk := o.Slice.Parent().Key()
		g := byParent[pk]
		if g == nil {
			g = &slicedTask{parent: o.Slice.Parent()}
			byParent[pk] = g
			groups = append(groups, g)
		}
		g.slices = append(g.slices, p)
	}
	return groups, rest, joined
}

// dropDuplicateSlices discards every result of a slice but the first (a
// slice run twice).
func (r *Runner) dropDuplicateSlices(ctx context.Context, g *slicedTask) {
	seen := map[int]bool{}
	var dups []Pending
	g.slices = slices.DeleteFunc(g.slices, func(p Pending) bool {
		i := p.Job.(*job.SliceOutput).Slice.Index
		if seen[i] {
			dups = append(dups, p)
			return true
		}
		seen[i] = true
		return false
	})
	r.Discard(ctx, dups)
}

// waitForSiblings reports whether every slice of g is there. If not, g's
// slices wait for the missing ones (returned) the first time, with
// Runner.QueueJoins; otherwise they are given up.
func (r *Runner) waitForSiblings(ctx context.Context, g *slicedTask, rep *CommitReport) (missing []string, complete bool) {
	have := map[int]bool{}
	kept := false
	for _, p := range g.slices {
		o := p.Job.(*job.SliceOutput)
		have[o.Slice.Index] = true
		kept = kept || o.Kept > 0
	}
	for i, st := range g.parent.Slices() {
		if !have[i] {
			missing = append(missing, st.Key())
		}
	}
	if len(missing) == 0 {
		return nil, true
	}
	if !r.QueueJoins || kept {
		r.giveUpSlices(ctx, g, rep, fmt.Sprintf("slices %v of %s have no result", missing, g.parent.Key()))
		return nil, false
	}
	for _, p := range g.slices {
		p.Job.(*job.SliceOutput).Kept++
		rep.Waiting = append(rep.Waiting, Waiting{Pending: p, After: missing})
	}
	return missing, false
}

// giveUpSlices drops g's slices from the commit (the table is planned
// again) and deletes their pieces.
func (r *Runner) giveUpSlices(ctx context.Context, g *slicedTask, rep *CommitReport, why string) {
	for _, p := range g.slices {
		rep.Dropped = append(rep.Dropped, Dropped{Key: p.Job.Task().Key(), Verdict: job.Retryable, Reason: why})
	}
	r.log().Warn("slices given up", "table", r.name(), "task_id", g.parent.Key(), "slices", len(g.slices), "err", why)
	r.Discard(ctx, g.slices)
}

// joinSlices makes the join of g's slices, all there. With
// Runner.QueueJoins the join is queued and the slices wait for it (its
// key returned); otherwise it runs here and its job is returned, the
// slices' pieces deleted. A join that cannot be made or fails drops the
// slices; only an invariant broken or a commit-wide failure is an error.
func (r *Runner) joinSlices(ctx context.Context, g *slicedTask, rep *CommitReport) (*Pending, string, error) {
	outs := make([]*job.SliceOutput, 0, len(g.slices))
	for _, p := range g.slices {
		outs = append(outs, p.Job.(*job.SliceOutput))
	}
	jt, err := job.NewJoin(g.parent, outs)
	if err != nil {
		r.giveUpSlices(ctx, g, rep, err.Error())
		return nil, "", nil
	}
	if r.QueueJoins {
		rep.Queued = append(rep.Queued, jt)
		for _, p := range g.slices {
			rep.Waiting = append(rep.Waiting, Waiting{Pending: p, After: []string{jt.Key()}})
		}
		return nil, jt.Key(), nil
	}
	m, err := r.LoadReadVersion(ctx, jt)
	if err != nil {
		r.giveUpSlices(ctx, g, rep, err.Error())
		if errors.Is(err, job.ErrStale) {
			return nil, "", nil
		}
		return nil, "", err
	}
	jp, err := r.Execute(ctx, m.PB, jt)
	if err != nil {
		r.Discard(ctx, g.slices)
	} else {
		r.discardExcept(ctx, g.slices, keySet(jp.Job.Written()))
	}
	if err != nil {
		if errors.Is(err, job.ErrInvariant) {
			return nil, "", err
		}
		for _, p := range g.slices {
			rep.Dropped = append(rep.Dropped, Dropped{Key: p.Job.Task().Key(), Verdict: job.Retryable, Reason: "join: " + err.Error()})
		}
		r.log().Warn("join failed", "table", r.name(), "task_id", jt.Key(), "err", err)
		return nil, "", nil
	}
	return &jp, "", nil
}

// holdForRemapParts keeps back, in rep.Waiting, the jobs of rest that
// commit with the remaps of a read version (commitsWithRemaps) while a
// remap of it run in parts waits for parts or its join (remapWait: the
// keys, by read version), and returns the others.
func holdForRemapParts(rest []Pending, remapWait map[uint64][]string, rep *CommitReport) []Pending {
	if len(remapWait) == 0 {
		return rest
	}
	keep := rest[:0:0]
	for _, p := range rest {
		if after := remapWait[p.Job.Task().ReadVersion()]; after != nil && commitsWithRemaps(p.Job) {
			rep.Waiting = append(rep.Waiting, Waiting{Pending: p, After: after})
			continue
		}
		keep = append(keep, p)
	}
	return keep
}

// commitsWithRemaps reports whether j is a rewrite whose new fragment ids
// were reserved for remaps, or a remap: such jobs of a read version
// commit together.
func commitsWithRemaps(j job.Job) bool {
	switch o := j.(type) {
	case *job.RewriteOutput:
		return o.Group != nil && o.Group.Reserved
	case *job.RemapOutput:
		return true
	}
	return false
}
