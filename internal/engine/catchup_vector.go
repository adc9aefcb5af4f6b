package engine

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/scan"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// vectorIndexVersion is lance's VECTOR_INDEX_VERSION.
const vectorIndexVersion = 1

// catchUpVector catches up a vector index: the new rows are encoded with
// the model segment's IVF centroids and quantizer and laid out as lance's
// optimize() lays them out (vector.Delta.Layout): a delta segment, or, when
// lance would join a partition, one segment merging every segment and the
// new rows. Rows are read one batch at a time; memory is the encoded new
// rows (row id and code per row), which the task's size bounds, plus one
// partition of the merged segments.
func catchUpVector(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (*job.CatchUpOutput, error) {
	fieldID := in.model().GetFields()[0]
	col, err := indexColumn(t, in.m.PB, fieldID)
	if err != nil {
		return nil, err
	}
	vs, err := openVectorModel(ctx, b, t, in)
	if err != nil {
		return nil, err
	}
	defer vs.close()
	delta := vs.vm.NewDelta()
	delta.Workers = int(taskWorkers.Load())
	out := &job.CatchUpOutput{CatchUp: t}
	sampled, bound, err := driftBound(ctx, b, t.Index, in, vs.vm, fieldID, col)
	if err != nil {
		return nil, fmt.Errorf("catch-up of %q: drift reference: %w", t.Index, err)
	}
	if sampled > 0 {
		delta.SetDriftBound(bound)
	}
	for _, f := range in.frags {
		read, err := catchUpFragment(ctx, b, in.m.PB, f, fieldID, col, delta)
		out.BytesRead += read
		if err != nil {
			return nil, err
		}
		if delta.Bytes() > MaxCatchUpBytes {
			return nil, fmt.Errorf("catch-up of %q: %d encoded bytes pass the task bound %d (plan smaller tasks): %w", t.Index, delta.Bytes(), MaxCatchUpBytes, job.ErrUnsupported)
		}
		out.Base = append(out.Base, proto.Clone(f).(*tablepb.DataFragment))
	}
	out.Rows, out.Dropped = delta.Rows, delta.Dropped
	if sampled > 0 {
		out.Drift = &job.DriftSample{Model: vs.vm.Fingerprint(), Rows: delta.Rows, Far: delta.Far, Bound: float64(bound), Reference: sampled}
	}
	return out, writeVectorCatchUp(ctx, b, t, in, vs, delta, nil, out)
}

// vectorModel is the model segment of a vector index, open.
type vectorModel struct {
	vm    *vector.Model
	s     *vector.StorageFile
	close func()
}

func openVectorModel(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput) (*vectorModel, error) {
	x, s, closeModel, err := openVectorSegment(ctx, b, in.model())
	if err != nil {
		return nil, err
	}
	vm, err := vector.NewModel(x, s)
	if err != nil {
		closeModel()
		return nil, fmt.Errorf("catch-up of %q: %w", t.Index, err)
	}
	return &vectorModel{vm: vm, s: s, close: closeModel}, nil
}

// writeVectorCatchUp writes the new segment of a vector catch-up: the
// delta's rows and those of deltas (delta segments on the same model, in
// order), alone or, where lance's optimize would (vector.Delta.Layout) or
// t.Merge asks, merged with every segment of the index. in.delta (one
// delta of a catch-up run in parts) writes a delta segment whatever the
// layout: the merge task decides. out gets the segment and its files.
func writeVectorCatchUp(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, vs *vectorModel, delta *vector.Delta, deltas []*vector.StorageFile, out *job.CatchUpOutput) error {
	// The model segment is open already; the others are opened for their
	// partition lengths (and, on a merge, their rows).
	segIndexes, stores, closeSegs, err := openVectorStorages(ctx, b, in.segs[1:])
	if err != nil {
		return err
	}
	defer closeSegs()
	stores = append([]*vector.StorageFile{vs.s}, stores...)
	merge, why := false, ""
	if !in.delta {
		rows := vectorPartitionRows(vs.vm.Partitions(), append(slices.Clone(stores), deltas...))
		if merge, why, err = delta.Layout(rows); err != nil {
			return fmt.Errorf("catch-up of %q: %w", t.Index, err)
		}
		if t.Merge && !merge {
			// The policy's max_segments: every segment and the new rows
			// in one, as lance's optimize_indices does with
			// num_indices_to_merge at least the segment count.
			merge, why = true, fmt.Sprintf("max_segments: %d segment(s) merged into one", len(in.segs))
		}
	}
	if merge {
		for i, x := range segIndexes {
			if err := vs.vm.Shares(x, stores[i+1]); err != nil {
				return fmt.Errorf("catch-up of %q: segment %d of %d: %w: %w", t.Index, i+2, len(in.segs), err, job.ErrUnsupported)
			}
		}
	}
	var bases []*vector.StorageFile
	var merged []*tablepb.IndexMetadata
	if merge {
		bases, merged = stores, in.segs
		out.Merged = why
	}
	bases = append(bases, deltas...)
	id := uuid.New()
	names := []string{vector.AuxiliaryFileName, vector.IndexFileName}
	keys, sizes, err := segmentFiles(ctx, b, format.IndicesDir+"/"+id.String()+"/", names, func(w []io.Writer) error {
		if _, err := delta.Write(ctx, bases, w[0], w[1], t.ReadVersion); err != nil {
			return fmt.Errorf("catch-up of %q: %w", t.Index, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	out.Outputs = keys
	for _, n := range sizes {
		out.BytesWritten += n
	}
	if out.Segment, err = catchUpSegment(t, in, id, merged, names, sizes); err != nil {
		deleteKeys(context.WithoutCancel(ctx), b, keys)
		return err
	}
	// lance's optimize commits every vector segment it writes with
	// VECTOR_INDEX_VERSION (1), whatever the model segment's version (lance
	// 8.0.0 creates IVF_RQ with 2); see merge_indices in
	// https://github.com/lancedb/lance/blob/main/rust/lance/src/index/append.rs
	out.Segment.IndexVersion = proto.Int32(vectorIndexVersion)
	for _, sg := range merged {
		out.Removed = append(out.Removed, proto.Clone(sg).(*tablepb.IndexMetadata))
	}
	return nil
}

// openVectorStorages opens every segment's index.idx and auxiliary.idx
// (the rows each holds per partition decide delta or merge; a merge reads
// them, once it checked they share the model).
func openVectorStorages(ctx context.Context, b *store.Bucket, segs []*tablepb.IndexMetadata) ([]*vector.IndexFile, []*vector.StorageFile, func(), error) {
	var xs []*vector.IndexFile
	var stores []*vector.StorageFile
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, sg := range segs {
		x, ss, closeSeg, err := openVectorSegment(ctx, b, sg)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		closers = append(closers, closeSeg)
		xs = append(xs, x)
		stores = append(stores, ss)
	}
	return xs, stores, closeAll, nil
}

// vectorPartitionRows is the rows the segments hold per partition of the
// model (lance splits a partition that grows past its bound and joins one
// that is too small; vector.Delta.Layout decides from these).
func vectorPartitionRows(parts int, stores []*vector.StorageFile) []uint64 {
	existing := make([]uint64, parts)
	for _, ss := range stores {
		for p, n := range ss.IVF.GetLengths() {
			if p < len(existing) {
				existing[p] += uint64(n)
			}
		}
	}
	return existing
}

// openVectorSegment opens a vector segment's index.idx and auxiliary.idx.
func openVectorSegment(ctx context.Context, b *store.Bucket, seg *tablepb.IndexMetadata) (*vector.IndexFile, *vector.StorageFile, func(), error) {
	u, err := uuid.FromBytes(seg.GetUuid().GetUuid())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("index %q: uuid: %w: %w", seg.GetName(), err, job.ErrUnsupported)
	}
	return openVectorFiles(ctx, b, format.IndicesDir+"/"+u.String())
}

// openVectorStorage opens the auxiliary.idx in dir (a segment's stored
// rows).
func openVectorStorage(ctx context.Context, b *store.Bucket, dir string) (*vector.StorageFile, func(), error) {
	var closeFile func()
	sf, err := openLanceFile(ctx, b, dir+"/"+vector.AuxiliaryFileName, func(c func()) { closeFile = c })
	if err == nil {
		var s *vector.StorageFile
		if s, err = vector.OpenStorageFile(sf); err == nil {
			return s, closeFile, nil
		}
	}
	if closeFile != nil {
		closeFile()
	}
	return nil, nil, err
}

// openLanceFile opens the Lance file at key, handing onClose what closes
// it once it is open for reading.
func openLanceFile(ctx context.Context, b *store.Bucket, key string, onClose func(func())) (*lancefile.File, error) {
	ra, err := b.OpenReaderAt(ctx, key)
	if err != nil {
		return nil, err
	}
	onClose(func() { _ = ra.Close() })
	return lancefile.Open(ra, ra.Size(), key)
}

// openVectorFiles opens the index.idx and auxiliary.idx in dir.
func openVectorFiles(ctx context.Context, b *store.Bucket, dir string) (*vector.IndexFile, *vector.StorageFile, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	open := func(name string) (*lancefile.File, error) {
		return openLanceFile(ctx, b, dir+"/"+name, func(c func()) { closers = append(closers, c) })
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

// driftBound returns the drift reference bound of the model and how many
// indexed rows it was measured on (0: none, no drift measured). The
// reference depends only on the trained model: the table's drift record
// keeps it per model fingerprint, and a catch-up against the same model
// reuses it; otherwise (the first catch-up, a retrained index, a record
// that cannot be read) it is measured (driftReference).
func driftBound(ctx context.Context, b *store.Bucket, name string, in *catchUpInput, vm *vector.Model, fieldID int32, col string) (uint64, float32, error) {
	if f, err := drift.Load(ctx, b); err == nil {
		if r, ok := f.Indices[name]; ok && r.Model == vm.Fingerprint() && r.Reference > 0 {
			return r.Reference, float32(r.Bound), nil
		}
	}
	ref, err := driftReference(ctx, b, in, vm, fieldID, col)
	if err != nil {
		return 0, 0, err
	}
	return uint64(ref.Len()), ref.Bound(), nil
}

// driftReference measures the nearest-centroid distances of a sample of
// the rows the model segment indexes (vector.DriftReference): the first
// rows of up to vector.DriftSampleFragments of its fragments still in the
// table, at an even stride, up to vector.DriftSampleRows rows in all.
func driftReference(ctx context.Context, b *store.Bucket, in *catchUpInput, vm *vector.Model, fieldID int32, col string) (*vector.DriftReference, error) {
	ref := vm.NewDriftReference()
	bm, err := index.DecodeBitmap(in.model().GetFragmentBitmap())
	if err != nil || bm == nil {
		return ref, nil // no bitmap: no reference, no drift measured
	}
	var covered []*tablepb.DataFragment
	for _, f := range in.m.PB.GetFragments() {
		if bm.Contains(uint32(f.GetId())) {
			covered = append(covered, f)
		}
	}
	n := min(len(covered), vector.DriftSampleFragments)
	per := uint64(vector.DriftSampleRows / max(n, 1))
	for i := 0; i < n; i++ {
		f := covered[i*len(covered)/n]
		fr, err := scan.ScanFragment(ctx, b, in.m.PB.GetFields(), f, scan.ScanOptions{FieldIDs: []int32{fieldID}, Limit: min(per, f.GetPhysicalRows())})
		if err != nil {
			return nil, err
		}
		for fr.Next() {
			rec := fr.RecordBatch()
			ci := rec.Schema().FieldIndices(col)
			if len(ci) != 1 {
				fr.Release()
				return nil, fmt.Errorf("fragment %d: scan returned no column %s", f.GetId(), col)
			}
			if err := ref.Add(rec.Column(ci[0])); err != nil {
				fr.Release()
				return nil, err
			}
		}
		err = fr.Err()
		fr.Release()
		if err != nil {
			return nil, err
		}
	}
	return ref, nil
}

// catchUpFragment streams a fragment's vectors into the delta with their
// row addresses (fragment id << 32 | offset), skipping deleted rows.
func catchUpFragment(ctx context.Context, b *store.Bucket, m *tablepb.Manifest, f *tablepb.DataFragment, fieldID int32, col string, d *vector.Delta) (int64, error) {
	return scanColumnRows(ctx, b, m, f, fieldID, col, func(values arrow.Array, ids []uint64) error { return d.Add(ids, values) })
}
