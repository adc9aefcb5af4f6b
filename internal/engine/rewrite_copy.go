package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// A rewrite may write its fragments' files by copying encoded pages
// instead of decoding and re-encoding every row when the inputs line up:
//
//   - every fragment has exactly one data file, and that file holds exactly
//     the current schema's fields (no dropped or tombstoned columns, nothing
//     missing), in the table's data storage version;
//   - grouping whole fragments greedily by live rows into outputs of at most
//     the target rows (and max_bytes_per_file) gives as many new fragments
//     as a re-encode would;
//   - 2.0 files: no fragment has a deletion file, and the pages are big
//     enough (the page rule below); the group is concatenated whole
//     (lancewrite.ConcatRows).
//
// 2.1 files go through lancewrite.FilterConcat: column by column, pages
// without deleted rows are copied, full-zip pages (vectors, long strings)
// that lost rows are filtered without decoding, mini-block pages that lost
// rows keep their untouched chunks and their dictionary (only the chunks
// that lost rows are cut apart), and other pages that lost rows are
// re-encoded; columns of small pages are re-encoded whole by the
// same page rule, applied per column. Columns run on the task's workers
// (SetTaskParallelism).
//
// The page rule (job.PageCost): a copy keeps every source page, so a
// column ends up with as many pages as the sources had together. So on an
// object store a table of 5000-row fragments of a few scalar columns
// (pages of 2-100 KiB) is re-encoded and one with vectors or long text
// (MiB-sized pages) is copied; on a local disk every column whose pages
// average more than about 16 KiB is copied too. The planner estimates
// bytes written by the same rule.
//
// Anything the copy itself finds unsafe (blob pages, differing encodings
// per column, extra global buffers, ...) returns ErrCopyUnsupported and the
// remaining fragments are re-encoded.

// pageCost is what one page more is worth in bytes read on b's store (the
// planner charges the same through job.PageCost of the table's URI).
func pageCost(b *store.Bucket) int64 { return job.PageCost(b.URI()) }

// taskWorkers and taskBudget are the worker-level parallelism of one
// rewrite task: columns encoded at once and the bytes they may hold.
var (
	taskWorkers atomic.Int64
	taskBudget  atomic.Int64
)

// SetTaskParallelism sets how many columns one rewrite task encodes at
// once (0: GOMAXPROCS) and the memory budget of a task in bytes (0:
// lancewrite.DefaultTaskBudget). It applies to tasks started afterwards.
func SetTaskParallelism(workers int, budgetBytes int64) {
	taskWorkers.Store(int64(max(workers, 0)))
	taskBudget.Store(max(budgetBytes, 0))
}

// copyGroups returns the task's fragments split into runs to concatenate
// into one new file each, or nil if the task does not qualify by its
// manifest entries alone.
func copyGroups(m *tablepb.Manifest, frags []*tablepb.DataFragment, ver lancewrite.Version, target, maxBytes uint64) [][]*tablepb.DataFragment {
	want := map[int32]bool{}
	for _, f := range m.GetFields() {
		want[f.GetId()] = true
	}
	minor := uint32(1)
	if ver == lancewrite.V2_0 {
		minor = 0
	}
	var total uint64
	for _, f := range frags {
		if (f.GetDeletionFile() != nil && ver != lancewrite.V2_1) || len(f.GetFiles()) != 1 {
			return nil
		}
		df := f.GetFiles()[0]
		if df.GetFileMajorVersion() != 2 || df.GetFileMinorVersion() != minor {
			return nil
		}
		if len(df.GetFields()) != len(want) {
			return nil
		}
		seen := map[int32]bool{}
		for _, id := range df.GetFields() {
			if !want[id] || seen[id] {
				return nil
			}
			seen[id] = true
		}
		if f.GetPhysicalRows() == 0 || format.LiveRows(f) > target {
			return nil
		}
		if maxBytes > 0 && liveBytes(f) > maxBytes {
			return nil
		}
		total += format.LiveRows(f)
	}
	var groups [][]*tablepb.DataFragment
	var rows, bytes uint64
	for _, f := range frags {
		n, sz := format.LiveRows(f), liveBytes(f)
		if len(groups) == 0 || rows+n > target || (maxBytes > 0 && bytes+sz > maxBytes) {
			groups = append(groups, nil)
			rows, bytes = 0, 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], f)
		rows += n
		bytes += sz
	}
	if uint64(len(groups)) > (total+target-1)/target {
		return nil // a copy would leave more fragments than the plan expects
	}
	return groups
}

// liveBytes estimates the bytes of a fragment's file that hold live rows.
func liveBytes(f *tablepb.DataFragment) uint64 {
	sz := f.GetFiles()[0].GetFileSizeBytes()
	if p := f.GetPhysicalRows(); p > 0 {
		return uint64(float64(sz) * float64(format.LiveRows(f)) / float64(p))
	}
	return sz
}

// pagesWorthKeeping applies the page rule, charging cost bytes per extra
// page, to the opened source files of one output file.
func pagesWorthKeeping(files []*lancefile.File, cost int64) bool {
	if len(files) == 0 {
		return false
	}
	ncols := len(files[0].Columns)
	var total, extra float64
	for c := 0; c < ncols; c++ {
		var pages, bytes uint64
		for _, f := range files {
			if len(f.Columns) != ncols {
				return false
			}
			for _, p := range f.Columns[c].Meta.GetPages() {
				pages++
				for _, s := range p.GetBufferSizes() {
					bytes += s
				}
			}
		}
		re := max(1, (bytes+lancewrite.DefaultPageBytes-1)/lancewrite.DefaultPageBytes)
		if pages > re {
			extra += float64(pages - re)
		}
		total += float64(bytes)
	}
	return extra*float64(cost) <= job.CopyMaxOverhead*total
}

// copyRewrite writes the task's fragments by page copy, group by group, as
// far as it can: it returns how many of frags (a prefix) it consumed. A
// group that cannot be copied ends the copy without error; the caller
// re-encodes the rest. newFragment records a group (with each fragment's
// deleted rows, nil for none) and the file written for it (name "" when no
// row of the group is live).
func copyRewrite(ctx context.Context, tbl *table.Table, fields []*filepb.Field, ver lancewrite.Version, groups [][]*tablepb.DataFragment, out *job.RewriteOutput, newFragment func(g []*tablepb.DataFragment, dels []*roaring.Bitmap, name string, res lancewrite.Result) error) (int, error) {
	b := tbl.Bucket()
	done := 0
	for gi, g := range groups {
		var ok bool
		var err error
		if ver == lancewrite.V2_1 {
			ok, err = filterGroup(ctx, tbl, fields, g, out, newFragment)
		} else {
			ok, err = copyGroup(ctx, b, g, out, func(g []*tablepb.DataFragment, name string, res lancewrite.Result) error {
				return newFragment(g, make([]*roaring.Bitmap, len(g)), name, res)
			}, gi == 0)
		}
		if err != nil {
			return done, err
		}
		if !ok {
			return done, nil
		}
		done += len(g)
	}
	return done, nil
}

// filterGroup writes the live rows of one group of 2.1 fragments into one
// new file with lancewrite.FilterConcat. It returns false (nothing written)
// when the files cannot be copied.
func filterGroup(ctx context.Context, tbl *table.Table, fields []*filepb.Field, g []*tablepb.DataFragment, out *job.RewriteOutput, newFragment func([]*tablepb.DataFragment, []*roaring.Bitmap, string, lancewrite.Result) error) (bool, error) {
	b := tbl.Bucket()
	srcs := make([]lancewrite.FilterSource, 0, len(g))
	dels := make([]*roaring.Bitmap, 0, len(g))
	defer func() {
		for _, s := range srcs {
			_ = s.R.(store.ReaderAt).Close()
		}
	}()
	var live uint64
	for _, f := range g {
		d, err := tbl.ReadDeletions(ctx, f)
		if err != nil {
			return false, fmt.Errorf("read fragment %d: %w", f.GetId(), err)
		}
		if d != nil && d.IsEmpty() {
			d = nil
		}
		var dead uint64
		if d != nil {
			dead = d.GetCardinality()
		}
		if dead > f.GetPhysicalRows() {
			return false, fmt.Errorf("%w: fragment %d has %d deleted of %d rows", job.ErrInvariant, f.GetId(), dead, f.GetPhysicalRows())
		}
		live += f.GetPhysicalRows() - dead
		dels = append(dels, d)
		df := f.GetFiles()[0]
		key := format.DataFileKey(df.GetPath())
		ra, err := b.OpenReaderAt(ctx, key)
		if err != nil {
			return false, fmt.Errorf("open %s: %w", key, err)
		}
		srcs = append(srcs, lancewrite.FilterSource{CopySource: lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df}, Deleted: d})
	}
	if live == 0 {
		groupDone(ctx, g)
		return true, newFragment(g, dels, "", lancewrite.Result{})
	}
	// The sources' metadata is read and the columns planned while the
	// output is recorded in the journal and created (fsyncs): both are
	// on the way to the first byte written.
	type prepared struct {
		fp  *lancewrite.FilterPlan
		err error
	}
	prep := make(chan prepared, 1)
	go func() {
		fp, err := lancewrite.PrepareFilter(fields, srcs, lancewrite.FilterOptions{
			Workers: int(taskWorkers.Load()), BudgetBytes: taskBudget.Load(), PageCost: pageCost(b)})
		prep <- prepared{fp, err}
	}()
	planned := false
	defer func() {
		if !planned {
			<-prep // the sources are closed after this returns
		}
	}()
	var paths lancewrite.PathStats
	name, res, ok, err := writeCopied(ctx, b, out, func(w io.Writer) (lancewrite.Result, error) {
		p := <-prep
		planned = true
		if p.err != nil {
			return lancewrite.Result{}, p.err
		}
		fr, err := p.fp.Write(ctx, w)
		paths = fr.Paths
		return fr.Result, err
	})
	if !ok || err != nil {
		return false, err
	}
	if res.NumRows != live {
		return false, fmt.Errorf("%w: copied %d rows into %s, fragments hold %d live rows", job.ErrInvariant, res.NumRows, name, live)
	}
	if err := newFragment(g, dels, name, res); err != nil {
		return false, err
	}
	groupDone(ctx, g)
	out.Paths.Add(paths)
	if paths.ColsCopied > 0 {
		out.Copied++
	} else {
		out.Reencoded++
	}
	return true, nil
}

// copyGroup concatenates one group's files into one new file. checkPages
// applies the page rule (all groups share the table's layout, so the first
// group decides).
func copyGroup(ctx context.Context, b *store.Bucket, g []*tablepb.DataFragment, out *job.RewriteOutput, newFragment func([]*tablepb.DataFragment, string, lancewrite.Result) error, checkPages bool) (bool, error) {
	var srcs []lancewrite.CopySource
	var files []*lancefile.File
	defer func() {
		for _, s := range srcs {
			_ = s.R.(store.ReaderAt).Close()
		}
	}()
	for _, f := range g {
		df := f.GetFiles()[0]
		key := format.DataFileKey(df.GetPath())
		ra, err := b.OpenReaderAt(ctx, key)
		if err != nil {
			return false, fmt.Errorf("open %s: %w", key, err)
		}
		srcs = append(srcs, lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df})
		if checkPages {
			lf, err := lancefile.Open(ra, ra.Size(), key)
			if err != nil {
				return false, job.FragmentErr(f.GetId(), key, err)
			}
			if lf.NumRows() != f.GetPhysicalRows() {
				return false, job.FragmentErr(f.GetId(), key, fmt.Errorf("%w: %s has %d rows, fragment %d has %d physical rows", format.ErrCorrupt, key, lf.NumRows(), f.GetId(), f.GetPhysicalRows()))
			}
			files = append(files, lf)
		}
	}
	if checkPages && !pagesWorthKeeping(files, pageCost(b)) {
		return false, nil
	}
	name, res, ok, err := writeCopied(ctx, b, out, func(w io.Writer) (lancewrite.Result, error) {
		return lancewrite.ConcatRows(ctx, w, srcs...)
	})
	if !ok || err != nil {
		return false, err
	}
	var want uint64
	for _, f := range g {
		want += f.GetPhysicalRows()
	}
	if res.NumRows != want {
		return false, fmt.Errorf("%w: copied %d rows into %s, fragments hold %d", job.ErrInvariant, res.NumRows, name, want)
	}
	if err := newFragment(g, name, res); err != nil {
		return false, err
	}
	out.Paths.RangeBytes += res.RangeBytes
	groupDone(ctx, g)
	out.Copied++
	return true, nil
}

// writeCopied writes one new data file with write (a page copy). ok is
// false, and nothing is left behind, when write finds the inputs cannot be
// copied (ErrCopyUnsupported).
func writeCopied(ctx context.Context, b *store.Bucket, out *job.RewriteOutput, write func(io.Writer) (lancewrite.Result, error)) (name string, res lancewrite.Result, ok bool, err error) {
	name = newDataFileName()
	key := format.DataFileKey(name)
	if err := journal.RecordOutput(ctx, key); err != nil {
		return "", res, false, err
	}
	sw, err := b.NewWriter(ctx, key)
	if err != nil {
		return "", res, false, err
	}
	out.Outputs = append(out.Outputs, key)
	res, err = write(sw)
	if err != nil {
		_ = abortWriter(sw)
		if errors.Is(err, lancewrite.ErrCopyUnsupported) {
			// Nothing was committed to the key; forget it.
			deleteKeys(context.WithoutCancel(ctx), b, []string{key})
			out.Outputs = out.Outputs[:len(out.Outputs)-1]
			return "", res, false, nil
		}
		return "", res, false, fmt.Errorf("copy into %s: %w", key, err)
	}
	if err := sw.Close(); err != nil {
		return "", res, false, fmt.Errorf("upload %s: %w", key, err)
	}
	failpoint.Hit("rewrite.file")
	return name, res, true, nil
}
