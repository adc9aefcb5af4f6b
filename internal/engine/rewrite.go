package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// newDataFileName returns a fresh data file name in Lance's style: a v4
// UUID whose first 3 bytes are written as 24 binary digits and the rest as
// 26 hex digits, as lance 8.0.0 names the data files it writes. Any unique name is valid.
func newDataFileName() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var sb strings.Builder
	for _, b := range u[:3] {
		fmt.Fprintf(&sb, "%08b", b)
	}
	sb.WriteString(hex.EncodeToString(u[3:]))
	sb.WriteString(".lance")
	return sb.String()
}

// storageVersion returns the writer version for the table's data files.
func storageVersion(m *tablepb.Manifest) (lancewrite.Version, error) {
	v := m.GetDataFormat().GetVersion()
	switch v {
	case "2.1", "":
		if v == "" {
			// Infer from the files, as Lance does when data_format is absent.
			for _, f := range m.GetFragments() {
				for _, df := range f.GetFiles() {
					if df.GetFileMajorVersion() == 2 && df.GetFileMinorVersion() == 0 {
						return lancewrite.V2_0, nil
					}
					if df.GetFileMajorVersion() == 2 && df.GetFileMinorVersion() == 1 {
						return lancewrite.V2_1, nil
					}
				}
			}
		}
		return lancewrite.V2_1, nil
	case "2.0":
		return lancewrite.V2_0, nil
	}
	return 0, fmt.Errorf("data storage version %q: %w", v, job.ErrUnsupported)
}

// taskFragments returns the task's fragments from the manifest, in task order,
// or job.ErrStale if any is gone.
func taskFragments(m *tablepb.Manifest, ids []uint64) ([]*tablepb.DataFragment, error) {
	byID := format.FragmentsByID(m)
	out := make([]*tablepb.DataFragment, 0, len(ids))
	for _, id := range ids {
		f := byID[id]
		if f == nil {
			return nil, fmt.Errorf("fragment %d is not in version %d: %w", id, m.GetVersion(), job.ErrStale)
		}
		if err := job.CheckRewritable(f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// fileSink streams one new data file into the store.
type fileSink struct {
	key  string
	name string
	sw   io.WriteCloser
	n    *countingWriter // bytes handed to the store so far
	w    *lancewrite.Writer
	rows uint64
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ExecuteRewrite runs one rewrite task against m, the manifest of the task's
// read version: it streams the task's fragments in order without deleted rows
// and writes new fragments of at most the target rows (and max_rows_per_file,
// and about max_bytes_per_file), with every current schema field, in the
// table's data storage version. Memory is bounded by one batch plus the
// writer's open pages, whatever the size or number of fragments. On error
// every file it wrote is deleted.
func ExecuteRewrite(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.RewriteTask) (out *job.RewriteOutput, err error) {
	if m.GetVersion() != t.ReadVersion {
		return nil, fmt.Errorf("rewrite planned at version %d given manifest %d", t.ReadVersion, m.GetVersion())
	}
	if err := format.CheckWritable(m); err != nil {
		return nil, err
	}
	frags, err := taskFragments(m, t.Fragments)
	if err != nil {
		return nil, err
	}
	ver, err := storageVersion(m)
	if err != nil {
		return nil, err
	}
	target := rewriteTarget(t)
	rw := &rewriteRun{ctx: ctx, tbl: tbl, fields: m.GetFields(), ver: ver, target: target, maxBytes: t.MaxBytesPerFile,
		out: &job.RewriteOutput{Rewrite: t, Group: &job.RewriteGroup{}}}
	if format.StableRowIDs(m) {
		rw.lin = &format.Lineage{}
	} else if t.IndexCoverage == job.DeferIndexRemap {
		// Lance's reuse mapping pairs the kept old addresses in
		// ascending order with the new rows in write order, so the
		// fragments must be read in ascending id order.
		if !slices.IsSorted(t.Fragments) {
			return nil, fmt.Errorf("%w: deferred index remap of fragments %v: not in ascending id order", job.ErrUnsupported, t.Fragments)
		}
		rw.retained = index.NewRetainedAddrs()
	}
	defer func() {
		if err != nil {
			if rw.cur != nil { // a file being written when it failed: discarded, not published
				_ = abortWriter(rw.cur.sw)
				rw.cur = nil
			}
			deleteKeys(context.WithoutCancel(ctx), tbl.Bucket(), rw.out.Outputs)
			out = nil
		}
	}()
	done := 0
	if groups := copyGroups(m, frags, ver, target, t.MaxBytesPerFile); groups != nil {
		if done, err = copyRewrite(ctx, tbl, rw.fields, ver, groups, rw.out, rw.copied); err != nil {
			return rw.out, err
		}
	}
	if done < len(frags) {
		if err := rw.reencode(frags[done:]); err != nil {
			return rw.out, err
		}
	}
	if err := rw.closeCur(); err != nil {
		return rw.out, err
	}
	if err := rw.check(frags); err != nil {
		return rw.out, err
	}
	if rw.retained != nil {
		if rw.retained.Len() != rw.out.RowsWritten {
			return rw.out, fmt.Errorf("%w: kept %d row addresses for %d rows written", job.ErrInvariant, rw.retained.Len(), rw.out.RowsWritten)
		}
		if rw.out.Retained, err = rw.retained.Bytes(); err != nil {
			return rw.out, err
		}
	}
	return rw.out, nil
}

// rewriteRun is the state of one ExecuteRewrite: the output so far, the
// file being written and the row lineage of a table with stable row ids.
type rewriteRun struct {
	ctx      context.Context
	tbl      *table.Table
	fields   []*filepb.Field
	ver      lancewrite.Version
	target   uint64 // rows per new fragment
	maxBytes uint64 // about this many bytes per new file (0: no limit)
	out      *job.RewriteOutput
	lin      *format.Lineage // nil unless the table has stable row ids
	// retained collects the kept old row addresses of a deferred index
	// remap (nil otherwise).
	retained *index.RetainedAddrs
	cur      *fileSink
}

// dataFile describes a data file written as name.
func dataFile(name string, res lancewrite.Result) *tablepb.DataFile {
	return &tablepb.DataFile{
		Path:             name,
		Fields:           res.Fields,
		ColumnIndices:    res.ColumnIndices,
		FileMajorVersion: res.Major,
		FileMinorVersion: res.Minor,
		FileSizeBytes:    uint64(res.Size),
	}
}

// addFragment records one written file as a new fragment.
func (rw *rewriteRun) addFragment(name string, res lancewrite.Result) error {
	nf := &tablepb.DataFragment{PhysicalRows: res.NumRows, Files: []*tablepb.DataFile{dataFile(name, res)}}
	if rw.lin != nil {
		if err := rw.lin.Assign(nf, res.NumRows); err != nil {
			return err
		}
	}
	rw.out.Group.New = append(rw.out.Group.New, nf)
	rw.out.RowsWritten += res.NumRows
	rw.out.BytesWritten += res.Size
	return nil
}

// takeFragment accounts one old fragment the task consumes; deleted are
// its deleted rows (nil if none).
func (rw *rewriteRun) takeFragment(f *tablepb.DataFragment, deleted *roaring.Bitmap) error {
	rw.out.Group.Old = append(rw.out.Group.Old, f)
	if rw.retained != nil {
		rw.retained.AddFragment(f.GetId(), f.GetPhysicalRows(), deleted)
	}
	for _, df := range f.GetFiles() {
		rw.out.BytesRead += int64(df.GetFileSizeBytes())
	}
	if rw.lin != nil {
		meta, err := format.DecodeRowMeta(f)
		if err != nil {
			return err
		}
		rw.lin.Keep(meta, deleted)
	}
	return nil
}

// copied accounts one group the copy path handled: its old fragments (with
// their deleted rows) and the file written for them (none if name is "").
func (rw *rewriteRun) copied(g []*tablepb.DataFragment, dels []*roaring.Bitmap, name string, res lancewrite.Result) error {
	for i, f := range g {
		if err := rw.takeFragment(f, dels[i]); err != nil {
			return err
		}
		rw.out.RowsRead += f.GetPhysicalRows()
		if dels[i] != nil {
			rw.out.RowsRead -= dels[i].GetCardinality()
		}
	}
	if name == "" {
		return nil
	}
	return rw.addFragment(name, res)
}

// openCur starts a new data file.
func (rw *rewriteRun) openCur() error {
	name := newDataFileName()
	key := format.DataFileKey(name)
	if err := journal.RecordOutput(rw.ctx, key); err != nil {
		return err
	}
	sw, err := rw.tbl.Bucket().NewWriter(rw.ctx, key)
	if err != nil {
		return err
	}
	rw.out.Outputs = append(rw.out.Outputs, key)
	cw := &countingWriter{w: sw}
	w, err := lancewrite.NewWriter(cw, rw.fields, lancewrite.Options{Version: rw.ver})
	if err != nil {
		_ = abortWriter(sw)
		return err
	}
	rw.cur = &fileSink{key: key, name: name, sw: sw, n: cw, w: w}
	return nil
}

// closeCur finishes the current data file (if any) as a new fragment.
func (rw *rewriteRun) closeCur() error {
	if rw.cur == nil {
		return nil
	}
	s := rw.cur
	rw.cur = nil
	res, err := s.w.Close()
	if err != nil {
		_ = abortWriter(s.sw)
		return fmt.Errorf("write %s: %w", s.key, err)
	}
	if err := s.sw.Close(); err != nil {
		return fmt.Errorf("upload %s: %w", s.key, err)
	}
	failpoint.Hit("rewrite.file")
	rw.out.Reencoded++
	return rw.addFragment(s.name, res)
}

// reencode decodes the live rows of frags (on a reader goroutine) and
// writes them into new files.
func (rw *rewriteRun) reencode(frags []*tablepb.DataFragment) error {
	items, stop := scanFragments(rw.ctx, rw.tbl, rw.fields, frags)
	defer stop()
	var fp *fragmentProgress
	for it := range items {
		switch {
		case it.err != nil:
			return it.err
		case it.frag != nil:
			if err := rw.takeFragment(it.frag, it.deleted); err != nil {
				return err
			}
			var dead uint64
			if it.deleted != nil {
				dead = it.deleted.GetCardinality()
			}
			fp = startFragment(rw.ctx, it.frag, dead)
		default:
			fp.add(it.rec.NumRows())
			rw.out.RowsRead += uint64(it.rec.NumRows())
			err := writeSplit(it.rec, rw.target, rw.maxBytes, &rw.cur, rw.openCur, rw.closeCur)
			it.rec.Release()
			if err != nil {
				return err
			}
		}
	}
	return rw.ctx.Err()
}

// check verifies the rewrite's row accounting before it may be committed.
func (rw *rewriteRun) check(frags []*tablepb.DataFragment) error {
	out := rw.out
	if out.RowsWritten != out.RowsRead {
		return fmt.Errorf("%w: read %d live rows, wrote %d", job.ErrInvariant, out.RowsRead, out.RowsWritten)
	}
	var wantLive uint64
	for _, f := range frags {
		wantLive += format.LiveRows(f)
	}
	if out.RowsRead != wantLive {
		return fmt.Errorf("%w: fragments record %d live rows, scan returned %d", job.ErrInvariant, wantLive, out.RowsRead)
	}
	if rw.lin != nil && rw.lin.Left() != 0 {
		return fmt.Errorf("%w: %d row ids left after the rewrite", job.ErrInvariant, rw.lin.Left())
	}
	if len(out.Group.New) == 0 {
		// Every row was deleted: Lance keeps a group with no new fragments
		// out of its plans; we do the same by refusing to commit nothing.
		return fmt.Errorf("rewrite of fragments %v: no live rows: %w", out.Rewrite.Fragments, job.ErrStale)
	}
	return nil
}

// writeSplit writes rec to the current file, starting a new fragment file
// whenever the current one reaches target rows or maxBytes bytes.
func writeSplit(rec arrow.RecordBatch, target, maxBytes uint64, cur **fileSink, open, closeCur func() error) error {
	off := int64(0)
	n := rec.NumRows()
	for off < n {
		if *cur == nil {
			if err := open(); err != nil {
				return err
			}
		}
		room := int64(target - (*cur).rows)
		take := min(room, n-off)
		part := rec
		if off != 0 || take != n {
			part = rec.NewSlice(off, off+take)
		}
		err := (*cur).w.Write(part)
		if part != rec {
			part.Release()
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", (*cur).key, err)
		}
		(*cur).rows += uint64(take)
		off += take
		if (*cur).rows >= target || (maxBytes > 0 && uint64((*cur).n.n) >= maxBytes) {
			if err := closeCur(); err != nil {
				return err
			}
		}
	}
	return nil
}

func abortWriter(w io.WriteCloser) error {
	if a, ok := w.(interface{ Abort() error }); ok {
		return a.Abort()
	}
	return w.Close()
}
