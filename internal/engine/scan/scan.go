package scan

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// ScanOptions selects what ScanFragment returns.
type ScanOptions struct {
	// FieldIDs projects on table field ids (a listed field brings its
	// subtree, a nested one its ancestors); nil reads every field.
	FieldIDs []int32
	// BatchRows bounds the physical rows read per step (default
	// lancefile.DefaultBatchRows); batches carry at most that many live rows.
	BatchRows int
	// Deletions, when non-nil, replaces the fragment's deletion file.
	Deletions *roaring.Bitmap
	// KeepDeleted returns every physical row (no deletion file is read).
	KeepDeleted bool
	// Offset and Limit read only physical rows [Offset, Offset+Limit)
	// (Limit 0: to the end).
	Offset, Limit uint64
}

// FragmentReader streams the live rows of one fragment. It implements
// array.RecordReader; Close releases the open data files.
type FragmentReader struct {
	refs    atomic.Int64
	ctx     context.Context
	schema  *arrow.Schema
	files   []*fragFile
	deleted *roaring.Bitmap
	// srcOf[i] says where output column i comes from: file index and column
	// in that file's batches, or file -1 for an all-null column.
	srcOf    []colSource
	physical uint64
	end      uint64 // physical row to stop at
	batch    uint64
	pos      uint64
	cur      arrow.RecordBatch
	err      error
}

type colSource struct{ file, col int }

type fragFile struct {
	key string
	ra  store.ReaderAt
	f   *lancefile.File
	r   *lancefile.Reader
}

var _ array.RecordReader = (*FragmentReader)(nil)

// ScanFragment opens every data file of frag (data/<path> in b), maps table
// fields to columns through each DataFile's fields/column_indices, stitches
// the files row-aligned and drops deleted rows.
func ScanFragment(ctx context.Context, b *store.Bucket, schema []*filepb.Field, frag *tablepb.DataFragment, opts ScanOptions) (_ *FragmentReader, err error) {
	proj, err := lancefile.ProjectFields(schema, opts.FieldIDs)
	if err != nil {
		return nil, fmt.Errorf("scan fragment %d: %w", frag.GetId(), err)
	}
	sch, err := lancefile.ArrowSchema(proj)
	if err != nil {
		return nil, fmt.Errorf("scan fragment %d: %w", frag.GetId(), err)
	}
	fr := &FragmentReader{ctx: ctx, schema: sch, physical: frag.GetPhysicalRows(), batch: lancefile.DefaultBatchRows}
	if opts.BatchRows > 0 {
		fr.batch = uint64(opts.BatchRows)
	}
	fr.refs.Store(1)
	defer func() {
		if err != nil {
			fr.closeFiles()
		}
	}()
	if !opts.KeepDeleted {
		fr.deleted = opts.Deletions
		if fr.deleted == nil {
			if fr.deleted, err = table.ReadDeletions(ctx, b, frag); err != nil {
				return nil, err
			}
		}
	}
	var top []int32
	for _, fl := range proj {
		if fl.GetParentId() < 0 {
			top = append(top, fl.GetId())
		}
	}
	fr.srcOf = make([]colSource, len(top))
	for i := range fr.srcOf {
		fr.srcOf[i] = colSource{-1, -1}
	}
	if len(frag.GetFiles()) == 0 {
		return nil, fmt.Errorf("scan fragment %d: no data files", frag.GetId())
	}
	defer func() {
		if err == nil {
			fr.pos, fr.end = min(opts.Offset, fr.physical), fr.physical
			if opts.Limit > 0 {
				fr.end = min(fr.end, fr.pos+opts.Limit)
			}
		}
	}()
	for _, df := range frag.GetFiles() {
		key := format.DataFileKey(df.GetPath())
		ff, err := fr.openFile(ctx, b, schema, frag, df)
		if err != nil {
			return nil, job.FragmentErr(frag.GetId(), key, err)
		}
		var ids []int32
		for i, id := range top {
			if ff.f.Field(id) == nil {
				continue
			}
			if fr.srcOf[i].file >= 0 {
				return nil, fmt.Errorf("fragment %d field %d stored in several data files: %w", frag.GetId(), id, job.ErrUnsupported)
			}
			fr.srcOf[i] = colSource{len(fr.files) - 1, len(ids)}
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			continue
		}
		if ff.r, err = ff.f.NewReader(ctx, lancefile.ReadOptions{FieldIDs: ids, BatchRows: opts.BatchRows, Offset: opts.Offset, Limit: opts.Limit}); err != nil {
			return nil, job.FragmentErr(frag.GetId(), key, err)
		}
	}
	return fr, nil
}

// openFile opens one data file of frag and checks it against the manifest:
// not under an external base path, the file format version the DataFile
// names, physical_rows rows; then binds it to the table schema.
func (fr *FragmentReader) openFile(ctx context.Context, b *store.Bucket, schema []*filepb.Field, frag *tablepb.DataFragment, df *tablepb.DataFile) (*fragFile, error) {
	key := format.DataFileKey(df.GetPath())
	if df.BaseId != nil {
		return nil, fmt.Errorf("data file %s of fragment %d (base %d) is under an external base path: %w", key, frag.GetId(), df.GetBaseId(), job.ErrUnsupported)
	}
	ra, err := b.OpenReaderAt(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("open data file %s of fragment %d: %w", key, frag.GetId(), err)
	}
	ff := &fragFile{key: key, ra: ra}
	fr.files = append(fr.files, ff)
	if ff.f, err = lancefile.Open(ra, ra.Size(), key); err != nil {
		return nil, err
	}
	if maj, mnr := df.GetFileMajorVersion(), df.GetFileMinorVersion(); maj != 0 || mnr != 0 {
		want, err := lancefile.FormatOf(lancefile.Version{Major: uint16(maj), Minor: uint16(mnr)})
		if err != nil {
			return nil, fmt.Errorf("data file %s of fragment %d: manifest version: %w", key, frag.GetId(), err)
		}
		if want != ff.f.Format {
			return nil, fmt.Errorf("%w: data file %s of fragment %d: manifest says format %s, file is %s", format.ErrCorrupt, key, frag.GetId(), want, ff.f.Format)
		}
	}
	if fr.physical == 0 {
		fr.physical = ff.f.NumRows()
	}
	if ff.f.NumRows() != fr.physical {
		return nil, fmt.Errorf("%w: data file %s of fragment %d has %d rows, fragment has %d", format.ErrCorrupt, key, frag.GetId(), ff.f.NumRows(), fr.physical)
	}
	if err := ff.f.BindTableSchema(schema, df.GetFields(), df.GetColumnIndices()); err != nil {
		return nil, err
	}
	return ff, nil
}

func (fr *FragmentReader) closeFiles() {
	for _, ff := range fr.files {
		if ff.r != nil {
			ff.r.Release()
			ff.r = nil
		}
		if ff.ra != nil {
			_ = ff.ra.Close()
			ff.ra = nil
		}
	}
}

// Close releases the data files (also done by the last Release).
func (fr *FragmentReader) Close() error {
	fr.closeFiles()
	return nil
}

func (fr *FragmentReader) Retain() { fr.refs.Add(1) }

func (fr *FragmentReader) Release() {
	if fr.refs.Add(-1) == 0 {
		if fr.cur != nil {
			fr.cur.Release()
			fr.cur = nil
		}
		fr.closeFiles()
	}
}

func (fr *FragmentReader) Schema() *arrow.Schema          { return fr.schema }
func (fr *FragmentReader) Err() error                     { return fr.err }
func (fr *FragmentReader) RecordBatch() arrow.RecordBatch { return fr.cur }

// Record is RecordBatch (deprecated interface method).
func (fr *FragmentReader) Record() arrow.RecordBatch { return fr.cur }

func (fr *FragmentReader) Next() bool {
	if fr.cur != nil {
		fr.cur.Release()
		fr.cur = nil
	}
	for fr.err == nil && fr.pos < fr.end {
		if err := fr.ctx.Err(); err != nil {
			fr.err = err
			return false
		}
		rec, err := fr.step()
		if err != nil {
			fr.err = err
			return false
		}
		if rec != nil {
			fr.cur = rec
			return true
		}
	}
	return false
}

// step reads the next aligned batch from every file and filters it; nil
// means every row of the batch was deleted.
func (fr *FragmentReader) step() (arrow.RecordBatch, error) {
	n := int64(-1)
	batches := make([]arrow.RecordBatch, len(fr.files))
	for i, ff := range fr.files {
		if ff.r == nil {
			continue
		}
		if !ff.r.Next() {
			if err := ff.r.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("data file %s ended at row %d of %d", ff.key, fr.pos, fr.physical)
		}
		batches[i] = ff.r.RecordBatch()
		if n >= 0 && batches[i].NumRows() != n {
			return nil, fmt.Errorf("data file %s: batch of %d rows at row %d, other files gave %d", ff.key, batches[i].NumRows(), fr.pos, n)
		}
		n = batches[i].NumRows()
	}
	if n < 0 {
		// Only all-null columns: step by the batch size.
		n = int64(min(fr.batch, fr.end-fr.pos))
	}
	start := fr.pos
	fr.pos += uint64(n)
	cols := make([]arrow.Array, len(fr.srcOf))
	for i, s := range fr.srcOf {
		if s.file < 0 {
			cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, fr.schema.Field(i).Type, int(n))
			continue
		}
		cols[i] = batches[s.file].Column(s.col)
		cols[i].Retain()
	}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	runs := liveRuns(fr.deleted, start, uint64(n))
	if len(runs) == 0 {
		return nil, nil
	}
	if len(runs) == 1 && runs[0] == [2]int64{0, n} {
		return array.NewRecordBatch(fr.schema, cols, n), nil
	}
	live := int64(0)
	for _, r := range runs {
		live += r[1] - r[0]
	}
	out := make([]arrow.Array, len(cols))
	defer func() {
		for _, c := range out {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, c := range cols {
		parts := make([]arrow.Array, len(runs))
		for k, r := range runs {
			parts[k] = array.NewSlice(c, r[0], r[1])
		}
		cat, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			return nil, fmt.Errorf("drop deleted rows: %w", err)
		}
		out[i] = cat
	}
	return array.NewRecordBatch(fr.schema, out, live), nil
}

// Deleted returns the deleted physical row offsets applied by the reader
// (nil when deletions are not applied).
func (fr *FragmentReader) Deleted() *roaring.Bitmap { return fr.deleted }

// liveRuns returns the [from,to) runs (batch-relative) of rows in
// [start,start+n) that are not deleted.
func liveRuns(deleted *roaring.Bitmap, start, n uint64) [][2]int64 {
	if deleted == nil || deleted.IsEmpty() {
		return [][2]int64{{0, int64(n)}}
	}
	var runs [][2]int64
	from := int64(0)
	it := deleted.Iterator()
	it.AdvanceIfNeeded(uint32(start))
	for it.HasNext() {
		d := uint64(it.Next())
		if d >= start+n {
			break
		}
		rel := int64(d - start)
		if rel > from {
			runs = append(runs, [2]int64{from, rel})
		}
		from = rel + 1
	}
	if from < int64(n) {
		runs = append(runs, [2]int64{from, int64(n)})
	}
	return runs
}

// ScanManifest streams the live rows of every fragment of a version, in
// manifest order, to fn. Records are released after fn returns.
func ScanManifest(ctx context.Context, b *store.Bucket, m *format.Manifest, opts ScanOptions, fn func(arrow.RecordBatch) error) error {
	fields := m.PB.GetFields()
	for _, frag := range m.PB.GetFragments() {
		fr, err := ScanFragment(ctx, b, fields, frag, opts)
		if err != nil {
			return err
		}
		for fr.Next() {
			if err := fn(fr.RecordBatch()); err != nil {
				fr.Release()
				return err
			}
		}
		err = fr.Err()
		fr.Release()
		if err != nil {
			return fmt.Errorf("scan fragment %d: %w", frag.GetId(), err)
		}
	}
	return nil
}

// FieldIDsByName resolves column names (top-level, or dotted paths into
// structs such as "st.x") to field ids.
func FieldIDsByName(fields []*filepb.Field, names []string) ([]int32, error) {
	ids := make([]int32, 0, len(names))
	for _, name := range names {
		parent := int32(-1)
		var found *filepb.Field
		for _, part := range strings.Split(name, ".") {
			found = nil
			for _, f := range fields {
				if f.GetParentId() == parent && f.GetName() == part {
					found = f
					break
				}
			}
			if found == nil {
				return nil, fmt.Errorf("no column %q in the table schema", name)
			}
			parent = found.GetId()
		}
		ids = append(ids, found.GetId())
	}
	return ids, nil
}
