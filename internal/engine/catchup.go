package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// MaxCatchUpBytes bounds the encoded rows (row id plus code) one catch-up
// task holds before it writes its segment; the planner sizes tasks well
// under it (plan.CatchUpMaxRows).
const MaxCatchUpBytes = 512 << 20

// ExecuteCatchUp adds the live rows of the task's fragments to the index,
// encoded with the trained model of the index's first segment (lance's
// optimize_indices opens the segments in manifest order and builds with the
// first one's IVF model and quantizer), as lance's optimize() lays them out
// (vector.Delta.Layout): a new delta segment under _indices/<uuid>/, or,
// when lance would join a partition, one segment merging every segment and
// the new rows, which replaces them. Rows are read one batch at a time;
// memory is the encoded new rows (row id and code per row), which the
// task's size bounds, plus one partition of the merged segments.
func ExecuteCatchUp(ctx context.Context, tbl *table.Table, t *job.CatchUpTask) (out *job.CatchUpOutput, err error) {
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
	if m.PB.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0 {
		return nil, fmt.Errorf("catch-up of %q: tables with stable row ids: %w", t.Index, job.ErrUnsupported)
	}
	var segs []*tablepb.IndexMetadata
	for _, ix := range m.Indices.GetIndices() {
		if ix.GetName() == t.Index {
			segs = append(segs, ix)
		}
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("catch-up: index %q is not in version %d: %w", t.Index, t.ReadVersion, job.ErrStale)
	}
	model := segs[0]
	if len(model.GetFields()) != 1 || model.BaseId != nil {
		return nil, fmt.Errorf("catch-up of %q: index over %d fields or under an external base: %w", t.Index, len(model.GetFields()), job.ErrUnsupported)
	}
	covered := roaring.New()
	for _, s := range segs {
		bm := roaring.New()
		if err := bm.UnmarshalBinary(s.GetFragmentBitmap()); err != nil || len(s.GetFragmentBitmap()) == 0 {
			return nil, fmt.Errorf("catch-up of %q: segment without a readable fragment bitmap: %w", t.Index, job.ErrUnsupported)
		}
		covered.Or(bm)
	}
	frags, err := taskFragments(m.PB, t.Fragments)
	if err != nil {
		return nil, err
	}
	for _, f := range frags {
		if covered.Contains(uint32(f.GetId())) {
			return nil, fmt.Errorf("catch-up of %q: fragment %d is already indexed: %w", t.Index, f.GetId(), job.ErrStale)
		}
	}
	fieldID := model.GetFields()[0]
	col := ""
	for _, f := range m.PB.GetFields() {
		if f.GetId() == fieldID {
			if f.GetParentId() != -1 {
				return nil, fmt.Errorf("catch-up of %q: nested vector column %s: %w", t.Index, f.GetName(), job.ErrUnsupported)
			}
			col = f.GetName()
		}
	}
	if col == "" {
		return nil, fmt.Errorf("catch-up of %q: field %d is not in the schema: %w", t.Index, fieldID, job.ErrStale)
	}

	b := tbl.Bucket()
	x, s, closeModel, err := openVectorSegment(ctx, b, model)
	if err != nil {
		return nil, err
	}
	defer closeModel()
	vm, err := vector.NewModel(x, s)
	if err != nil {
		return nil, fmt.Errorf("catch-up of %q: %w", t.Index, err)
	}
	delta := vm.NewDelta()
	out = &job.CatchUpOutput{CatchUp: t}
	for _, f := range frags {
		read, err := catchUpFragment(ctx, b, m.PB, f, fieldID, col, delta)
		out.BytesRead += read
		if err != nil {
			return nil, err
		}
		if delta.Bytes() > MaxCatchUpBytes {
			return nil, fmt.Errorf("catch-up of %q: %d encoded bytes pass the task bound %d (plan smaller tasks): %w", t.Index, delta.Bytes(), MaxCatchUpBytes, job.ErrUnsupported)
		}
		out.Base = append(out.Base, proto.Clone(f).(*tablepb.DataFragment))
	}
	// Lance splits a partition that grows past its bound (and merges every
	// segment): not a delta, so it is left to Lance's optimize().
	existing := make([]uint64, vm.Partitions())
	var stores []*vector.StorageFile
	for _, sg := range segs {
		_, ss, closeSeg, err := openVectorSegment(ctx, b, sg)
		if err != nil {
			return nil, err
		}
		defer closeSeg()
		for p, n := range ss.IVF.GetLengths() {
			if p < len(existing) {
				existing[p] += uint64(n)
			}
		}
		stores = append(stores, ss)
	}
	merge, why, err := delta.Layout(existing)
	if err != nil {
		return nil, fmt.Errorf("catch-up of %q: %w", t.Index, err)
	}
	var bases []*vector.StorageFile
	var merged []*tablepb.IndexMetadata
	if merge {
		bases, merged = stores, segs
		out.Merged = why
	}

	id := uuid.New()
	dir := format.IndicesDir + "/" + id.String() + "/"
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, out.Outputs)
			out = nil
		}
	}()
	sizes := map[string]int64{}
	var writers []io.WriteCloser
	counting := map[string]*countingWriter{}
	for _, name := range []string{vector.AuxiliaryFileName, vector.IndexFileName} {
		key := dir + name
		if err := journal.RecordOutput(ctx, key); err != nil {
			return nil, err
		}
		w, err := b.NewWriter(ctx, key)
		if err != nil {
			for _, o := range writers {
				_ = abortWriter(o)
			}
			return nil, err
		}
		out.Outputs = append(out.Outputs, key)
		writers = append(writers, w)
		counting[name] = &countingWriter{w: w}
	}
	_, werr := delta.Write(ctx, bases, counting[vector.AuxiliaryFileName], counting[vector.IndexFileName], uint64(t.ReadVersion))
	if werr != nil {
		for _, w := range writers {
			_ = abortWriter(w)
		}
		return nil, fmt.Errorf("catch-up of %q: %w", t.Index, werr)
	}
	for i, w := range writers {
		if err := w.Close(); err != nil {
			for _, o := range writers[i+1:] {
				_ = abortWriter(o)
			}
			return nil, fmt.Errorf("upload %s: %w", out.Outputs[i], err)
		}
	}
	for name, c := range counting {
		sizes[name] = c.n
		out.BytesWritten += c.n
	}
	out.Rows, out.Dropped = delta.Rows, delta.Dropped

	// The new segment: the first segment's entry with a new uuid, the read
	// version, and the caught-up fragments plus those of every merged
	// segment (as lance's merge_indices unions them).
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
	for _, f := range frags {
		bm.Add(uint32(f.GetId()))
	}
	bm.RunOptimize()
	if seg.FragmentBitmap, err = bm.ToBytes(); err != nil {
		return nil, err
	}
	now := uint64(time.Now().UnixMilli())
	seg.CreatedAt = &now
	seg.Files = nil
	names := []string{vector.AuxiliaryFileName, vector.IndexFileName}
	if len(model.GetFiles()) > 0 {
		names = names[:0]
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
	out.Segment = seg
	for _, sg := range merged {
		out.Removed = append(out.Removed, proto.Clone(sg).(*tablepb.IndexMetadata))
	}
	return out, nil
}

// openVectorSegment opens a vector segment's index.idx and auxiliary.idx.
func openVectorSegment(ctx context.Context, b *store.Bucket, seg *tablepb.IndexMetadata) (*vector.IndexFile, *vector.StorageFile, func(), error) {
	u, err := uuid.FromBytes(seg.GetUuid().GetUuid())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("index %q: uuid: %w: %w", seg.GetName(), err, job.ErrUnsupported)
	}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	open := func(name string) (*lancefile.File, error) {
		key := format.IndicesDir + "/" + u.String() + "/" + name
		ra, err := b.OpenReaderAt(ctx, key)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = ra.Close() })
		return lancefile.Open(ra, ra.Size(), key)
	}
	xf, err := open(vector.IndexFileName)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	sf, err := open(vector.AuxiliaryFileName)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	x, err := vector.OpenIndexFile(xf)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	s, err := vector.OpenStorageFile(sf)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return x, s, closeAll, nil
}

// catchUpFragment streams a fragment's vectors into the delta with their
// row addresses (fragment id << 32 | offset), skipping deleted rows.
func catchUpFragment(ctx context.Context, b *store.Bucket, m *tablepb.Manifest, f *tablepb.DataFragment, fieldID int32, col string, d *vector.Delta) (int64, error) {
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
			if deleted == nil || !deleted.Contains(uint32(next)) {
				ids = append(ids, f.GetId()<<32|next)
			}
			next++
			if next > f.GetPhysicalRows() {
				return read, fmt.Errorf("fragment %d: more live rows than physical rows %d: %w", f.GetId(), f.GetPhysicalRows(), format.ErrCorrupt)
			}
		}
		if err := d.Add(ids, rec.Column(ci[0])); err != nil {
			return read, err
		}
	}
	if err := fr.Err(); err != nil {
		return read, err
	}
	return read, nil
}
