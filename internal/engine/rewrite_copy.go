package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// A rewrite may concatenate its fragments' files page by page
// (lancewrite.ConcatRows) instead of decoding and re-encoding them when
// nothing has to be dropped and the inputs line up exactly:
//
//   - no fragment has a deletion file;
//   - every fragment has exactly one data file, and that file holds exactly
//     the current schema's fields (no dropped or tombstoned columns, nothing
//     missing), in the table's data storage version;
//   - grouping whole fragments greedily into outputs of at most the target
//     rows (and max_bytes_per_file) gives as many new fragments as a
//     re-encode would;
//   - the pages are big enough (the page rule below).
//
// The page rule. A copy keeps every source page, so a column ends up with
// as many pages as the sources had together, where a re-encode would write
// about one page per DefaultPageBytes of the column. Readers fetch each page
// with its own request, so extra pages cost a scan time even when the bytes
// are the same. We charge every extra page copyPageCost bytes (a request's
// latency on an object store is worth roughly a 64 KiB transfer; on a local
// disk much less) and copy only when those charges add at most
// copyMaxOverhead to the bytes a full scan reads. A table of 5000-row
// fragments of a few scalar columns (~100 KiB pages) is re-encoded; one
// with vectors or long text (MiB-sized pages) is copied.
//
// Anything ConcatRows itself finds unsafe (blob pages, differing encodings
// per column, extra global buffers, ...) returns ErrCopyUnsupported and the
// remaining fragments are re-encoded.
const (
	copyPageCost    = 64 << 10
	copyMaxOverhead = 0.25
)

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
		if f.GetDeletionFile() != nil || len(f.GetFiles()) != 1 {
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
		if f.GetPhysicalRows() == 0 || f.GetPhysicalRows() > target {
			return nil
		}
		if maxBytes > 0 && df.GetFileSizeBytes() > maxBytes {
			return nil
		}
		total += f.GetPhysicalRows()
	}
	var groups [][]*tablepb.DataFragment
	var rows, bytes uint64
	for _, f := range frags {
		n, sz := f.GetPhysicalRows(), f.GetFiles()[0].GetFileSizeBytes()
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

// pagesWorthKeeping applies the page rule to the opened source files of one
// output file.
func pagesWorthKeeping(files []*lancefile.File) bool {
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
	return extra*copyPageCost <= copyMaxOverhead*total
}

// copyRewrite writes the task's fragments by page copy, group by group, as
// far as it can: it returns how many of frags (a prefix) it consumed. A
// group that cannot be copied ends the copy without error; the caller
// re-encodes the rest. newFragment records a written file as a new fragment.
func copyRewrite(ctx context.Context, tbl *Table, groups [][]*tablepb.DataFragment, out *RewriteOutput, newFragment func(g []*tablepb.DataFragment, name string, res lancewrite.Result) error) (int, error) {
	b := tbl.Bucket()
	done := 0
	for gi, g := range groups {
		ok, err := copyGroup(ctx, b, g, out, newFragment, gi == 0)
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

// copyGroup concatenates one group's files into one new file. checkPages
// applies the page rule (all groups share the table's layout, so the first
// group decides).
func copyGroup(ctx context.Context, b *store.Bucket, g []*tablepb.DataFragment, out *RewriteOutput, newFragment func([]*tablepb.DataFragment, string, lancewrite.Result) error, checkPages bool) (bool, error) {
	var srcs []lancewrite.CopySource
	var files []*lancefile.File
	defer func() {
		for _, s := range srcs {
			_ = s.R.(store.ReaderAt).Close()
		}
	}()
	for _, f := range g {
		df := f.GetFiles()[0]
		key := "data/" + df.GetPath()
		ra, err := b.OpenReaderAt(ctx, key)
		if err != nil {
			return false, fmt.Errorf("open %s: %w", key, err)
		}
		srcs = append(srcs, lancewrite.CopySource{R: ra, Size: ra.Size(), Name: key, File: df})
		if checkPages {
			lf, err := lancefile.Open(ra, ra.Size(), key)
			if err != nil {
				return false, err
			}
			if lf.NumRows() != f.GetPhysicalRows() {
				return false, fmt.Errorf("%s has %d rows, fragment %d has %d physical rows", key, lf.NumRows(), f.GetId(), f.GetPhysicalRows())
			}
			files = append(files, lf)
		}
	}
	if checkPages && !pagesWorthKeeping(files) {
		return false, nil
	}
	name := newDataFileName()
	key := "data/" + name
	if err := recordOutput(ctx, key); err != nil {
		return false, err
	}
	sw, err := b.NewWriter(ctx, key)
	if err != nil {
		return false, err
	}
	out.Written = append(out.Written, key)
	res, err := lancewrite.ConcatRows(ctx, sw, srcs...)
	if err != nil {
		_ = abortWriter(sw)
		if errors.Is(err, lancewrite.ErrCopyUnsupported) {
			// Nothing was committed to the key; forget it.
			deleteKeys(context.WithoutCancel(ctx), b, []string{key})
			out.Written = out.Written[:len(out.Written)-1]
			return false, nil
		}
		return false, fmt.Errorf("copy into %s: %w", key, err)
	}
	if err := sw.Close(); err != nil {
		return false, fmt.Errorf("upload %s: %w", key, err)
	}
	failpoint("rewrite.file")
	var want uint64
	for _, f := range g {
		want += f.GetPhysicalRows()
	}
	if res.NumRows != want {
		return false, fmt.Errorf("%w: copied %d rows into %s, fragments hold %d", ErrInvariant, res.NumRows, key, want)
	}
	if err := newFragment(g, name, res); err != nil {
		return false, err
	}
	out.Copied++
	return true, nil
}
