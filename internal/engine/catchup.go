package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// MaxCatchUpBytes bounds the encoded rows (row id plus code) one catch-up
// task holds before it writes its segment; the planner sizes tasks well
// under it (plan.CatchUpMaxRows).
const MaxCatchUpBytes = 512 << 20

// catchUpInput is what every kind of catch-up starts from: the manifest of
// the read version, the index's segments in manifest order (the first one
// holds the trained model lance's optimize_indices builds with) and the
// task's fragments, none of which a segment covers.
type catchUpInput struct {
	m     *format.Manifest
	segs  []*tablepb.IndexMetadata
	frags []*tablepb.DataFragment
	// delta: one delta of a catch-up run in parts (catchup_parts.go),
	// written alone whatever the index's layout asks.
	delta bool
}

// model is the segment whose trained model the new rows are encoded with.
func (in *catchUpInput) model() *tablepb.IndexMetadata { return in.segs[0] }

// ExecuteCatchUp adds the live rows of the task's fragments to the index,
// encoded with the trained model of the index's first segment (lance's
// optimize_indices opens the segments in manifest order and builds with the
// first one's model), as a new segment under _indices/<uuid>/ or one
// segment that merges every segment and the new rows and replaces them.
func ExecuteCatchUp(ctx context.Context, tbl *table.Table, t *job.CatchUpTask) (*job.CatchUpOutput, error) {
	failpoint.Hit("catchup.start")
	in, err := loadCatchUp(ctx, tbl, t)
	if err != nil {
		return nil, err
	}
	var out *job.CatchUpOutput
	switch kind := index.Detect(in.model()); {
	case isScalarCatchUp(kind):
		out, err = catchUpScalar(ctx, tbl.Bucket(), t, in)
	case kind == index.KindFTS:
		out, err = catchUpFTS(ctx, tbl.Bucket(), t, in)
	case kind == index.KindFM:
		out, err = catchUpFM(ctx, tbl.Bucket(), t, in)
	default:
		out, err = catchUpVector(ctx, tbl.Bucket(), t, in)
	}
	if err == nil {
		failpoint.Hit("catchup.written")
	}
	return out, err
}

// loadCatchUp reads the task's version and checks the task still fits it:
// the index is there with readable fragment bitmaps and no segment covers a
// fragment the task names.
func loadCatchUp(ctx context.Context, tbl *table.Table, t *job.CatchUpTask) (*catchUpInput, error) {
	m, err := tbl.Load(ctx, t.ReadVersion)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("catch-up of %q: read version %d cleaned up: %w: %w", t.Index, t.ReadVersion, job.ErrStale, err)
		}
		return nil, err
	}
	if err := format.CheckWritable(m.PB); err != nil {
		return nil, err
	}
	in := &catchUpInput{m: m}
	for _, ix := range m.Indices.GetIndices() {
		if ix.GetName() == t.Index {
			in.segs = append(in.segs, ix)
		}
	}
	if len(in.segs) == 0 {
		return nil, fmt.Errorf("catch-up: index %q is not in version %d: %w", t.Index, t.ReadVersion, job.ErrStale)
	}
	if model := in.model(); len(model.GetFields()) != 1 || model.BaseId != nil {
		return nil, fmt.Errorf("catch-up of %q: index over %d fields or under an external base: %w", t.Index, len(model.GetFields()), job.ErrUnsupported)
	}
	covered, err := segmentFragments(t, in.segs)
	if err != nil {
		return nil, err
	}
	if in.frags, err = taskFragments(m.PB, t.Fragments); err != nil {
		return nil, err
	}
	for _, f := range in.frags {
		if covered.Contains(uint32(f.GetId())) {
			return nil, fmt.Errorf("catch-up of %q: fragment %d is already indexed: %w", t.Index, f.GetId(), job.ErrStale)
		}
	}
	return in, nil
}

// segmentFragments is the union of the segments' fragment bitmaps.
func segmentFragments(t *job.CatchUpTask, segs []*tablepb.IndexMetadata) (*roaring.Bitmap, error) {
	covered := roaring.New()
	for _, s := range segs {
		bm := roaring.New()
		if err := bm.UnmarshalBinary(s.GetFragmentBitmap()); err != nil || len(s.GetFragmentBitmap()) == 0 {
			return nil, fmt.Errorf("catch-up of %q: segment without a readable fragment bitmap: %w", t.Index, job.ErrUnsupported)
		}
		covered.Or(bm)
	}
	return covered, nil
}

// indexColumn is the top-level column the index's one field names.
func indexColumn(t *job.CatchUpTask, m *tablepb.Manifest, fieldID int32) (string, error) {
	for _, f := range m.GetFields() {
		if f.GetId() == fieldID {
			if f.GetParentId() != -1 {
				return "", fmt.Errorf("catch-up of %q: nested column %s: %w", t.Index, f.GetName(), job.ErrUnsupported)
			}
			return f.GetName(), nil
		}
	}
	return "", fmt.Errorf("catch-up of %q: field %d is not in the schema: %w", t.Index, fieldID, job.ErrStale)
}

// segmentFiles writes the files of a new segment under dir, each recorded in
// the journal before it is created, through write (handed one writer per
// name, in names order). It returns the keys written and each file's size;
// on an error every file is aborted or deleted.
func segmentFiles(ctx context.Context, b *store.Bucket, dir string, names []string, write func([]io.Writer) error) (keys []string, sizes map[string]int64, err error) {
	var writers []io.WriteCloser
	defer func() {
		if err != nil {
			for _, w := range writers {
				_ = abortWriter(w)
			}
			deleteKeys(context.WithoutCancel(ctx), b, keys)
			keys = nil
		}
	}()
	counting := make([]io.Writer, len(names))
	counts := make([]*countingWriter, len(names))
	for i, name := range names {
		key := dir + name
		if err := journal.RecordOutput(ctx, key); err != nil {
			return nil, nil, err
		}
		w, err := b.NewWriter(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, key)
		writers = append(writers, w)
		counts[i] = &countingWriter{w: w}
		counting[i] = counts[i]
	}
	if err := write(counting); err != nil {
		return nil, nil, err
	}
	all := writers
	writers = nil // closed or aborted below, not again by the deferred abort
	for i, w := range all {
		if err := w.Close(); err != nil {
			writers = all[i+1:]
			return nil, nil, fmt.Errorf("upload %s: %w", keys[i], err)
		}
		failpoint.Hit("catchup.file")
	}
	sizes = map[string]int64{}
	for i, name := range names {
		sizes[name] = counts[i].n
	}
	return keys, sizes, nil
}

// catchUpSegment is the new segment's index entry: the model segment's entry
// with a new uuid, the read version, the caught-up fragments plus those of
// every merged segment (as lance's merge_indices unions them), the creation
// time and its files in the order the model segment lists them (names
// otherwise).
func catchUpSegment(t *job.CatchUpTask, in *catchUpInput, id uuid.UUID, merged []*tablepb.IndexMetadata, names []string, sizes map[string]int64) (*tablepb.IndexMetadata, error) {
	model := in.model()
	seg := proto.Clone(model).(*tablepb.IndexMetadata)
	seg.Uuid = &tablepb.UUID{Uuid: id[:]}
	seg.DatasetVersion = t.ReadVersion
	bm := roaring.New()
	for _, sg := range merged {
		mb := roaring.New()
		if err := mb.UnmarshalBinary(sg.GetFragmentBitmap()); err != nil {
			return nil, fmt.Errorf("catch-up of %q: %w: %w", t.Index, err, job.ErrUnsupported)
		}
		bm.Or(mb)
	}
	for _, f := range in.frags {
		bm.Add(uint32(f.GetId()))
	}
	bm.RunOptimize()
	var err error
	if seg.FragmentBitmap, err = bm.ToBytes(); err != nil {
		return nil, err
	}
	now := uint64(time.Now().UnixMilli())
	seg.CreatedAt = &now
	seg.Files = nil
	if len(model.GetFiles()) > 0 {
		names = names[:0:0]
		for _, f := range model.GetFiles() {
			if _, ok := sizes[f.GetPath()]; !ok {
				return nil, fmt.Errorf("catch-up of %q: model segment lists file %s: %w", t.Index, f.GetPath(), job.ErrUnsupported)
			}
			names = append(names, f.GetPath())
		}
	}
	for _, n := range names {
		seg.Files = append(seg.Files, &tablepb.IndexFile{Path: n, SizeBytes: uint64(sizes[n])})
	}
	return seg, nil
}

// scanColumnRows streams one column of a fragment's live rows to fn with
// the ids an index stores for them, in offset order: their row addresses
// (fragment id << 32 | offset), or on a table with stable row ids their
// row ids (the fragment's row-id sequence, as lance indexes such tables);
// it returns the bytes of the fragment's data files.
func scanColumnRows(ctx context.Context, b *store.Bucket, m *tablepb.Manifest, f *tablepb.DataFragment, fieldID int32, col string, fn func(values arrow.Array, ids []uint64) error) (int64, error) {
	var rowIDs []uint64 // stable row ids by offset; nil: row addresses
	if m.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0 {
		var err error
		if rowIDs, err = format.DecodeRowIDs(f); err != nil {
			return 0, fmt.Errorf("%w: %w", job.ErrUnsupported, err)
		}
	}
	fr, err := scan.ScanFragment(ctx, b, m.GetFields(), f, scan.ScanOptions{FieldIDs: []int32{fieldID}})
	if err != nil {
		return 0, err
	}
	defer fr.Release()
	var read int64
	for _, df := range f.GetFiles() {
		read += int64(df.GetFileSizeBytes())
	}
	deleted := fr.Deleted()
	next := uint64(0) // next physical offset to consider
	for fr.Next() {
		rec := fr.RecordBatch()
		ci := rec.Schema().FieldIndices(col)
		if len(ci) != 1 {
			return read, fmt.Errorf("fragment %d: scan returned no column %s", f.GetId(), col)
		}
		n := int(rec.NumRows())
		ids := make([]uint64, 0, n)
		for len(ids) < n {
			if next >= f.GetPhysicalRows() {
				return read, fmt.Errorf("fragment %d: more live rows than physical rows %d: %w", f.GetId(), f.GetPhysicalRows(), format.ErrCorrupt)
			}
			if deleted == nil || !deleted.Contains(uint32(next)) {
				if rowIDs != nil {
					ids = append(ids, rowIDs[next])
				} else {
					ids = append(ids, f.GetId()<<32|next)
				}
			}
			next++
		}
		if err := fn(rec.Column(ci[0]), ids); err != nil {
			return read, err
		}
	}
	return read, fr.Err()
}
