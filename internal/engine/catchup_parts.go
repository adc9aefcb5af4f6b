package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Catch-up in parts (job.CatchUpTask.Slices): a large backlog is caught up
// by delta tasks, each over a range of the task's fragments, and one merge
// task (the join). A delta writes its rows, encoded with the index's
// trained model, as a delta segment in a directory of its own under
// _indices/ (journaled; no manifest references it): a btree segment of its
// rows alone, an FTS partition, a vector delta segment. The merge task
// writes the segment one catch-up over every fragment would have written
// (btree: the old pages and a k-way merge of the deltas' pages; FTS: the
// old partitions and each delta's as one more; vector: the deltas' rows,
// merged with every segment where lance's optimize would merge), which
// commits as one CreateIndex like an unsplit catch-up. Memory per task:
// a delta holds its range's rows (bounded by the planner's part size); a
// btree or vector merge reads at most catchUpMergeFanIn deltas at once
// (more are first folded into intermediate deltas, deltaFold) with a
// read-ahead budget shared among them (index.MergeReadWindow), and writes
// through page buffers of index.FilePageBytes per column: a page per
// input (btree) or one IVF partition of the new rows (vector) besides,
// whatever the number of deltas; an FTS merge copies each delta's
// partition through one buffer.

// ExecuteCatchUpDelta runs delta s.Index of a catch-up run in parts. On
// error every file it wrote is deleted.
func ExecuteCatchUpDelta(ctx context.Context, tbl *table.Table, s *job.SliceTask) (*job.SliceOutput, error) {
	part := s.CatchUp.Part(s.Index)
	in, err := loadCatchUp(ctx, tbl, part)
	if err != nil {
		return nil, err
	}
	in.delta = true
	var o *job.CatchUpOutput
	switch kind := index.Detect(in.model()); {
	case !job.CatchUpSplits(kind):
		return nil, fmt.Errorf("catch-up of %q: %s indices are not caught up in parts: %w", part.Index, kind, job.ErrUnsupported)
	case kind.IsVector():
		o, err = catchUpVector(ctx, tbl.Bucket(), part, in)
	default:
		o, err = catchUpDeltaFile(ctx, tbl.Bucket(), part, in, kind)
	}
	if err != nil {
		return nil, err
	}
	failpoint.Hit("catchup.delta")
	dir := path.Join(format.IndicesDir, (&index.Segment{Meta: o.Segment}).UUID())
	p := job.Piece{Slice: s.Index, Rows: o.Rows, Dropped: o.Dropped, Dir: dir, Drift: o.Drift}
	for _, f := range o.Segment.GetFiles() {
		p.Files = append(p.Files, index.SegmentFile{Name: f.GetPath(), Size: int64(f.GetSizeBytes())})
	}
	return &job.SliceOutput{Slice: s, Pieces: []job.Piece{p}, Outputs: o.Outputs, RowsRead: o.Rows + o.Dropped, RowsWritten: o.Rows,
		BytesRead: o.BytesRead, BytesWritten: o.BytesWritten}, nil
}

// catchUpDeltaFile writes a btree or FTS delta: the rows of the part's
// fragments alone. Its Segment lists the files written (none for an FTS
// delta whose rows hold no token).
func catchUpDeltaFile(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, kind index.Kind) (*job.CatchUpOutput, error) {
	return runOneSegmentCatchUp(ctx, b, t, in, false, "splits the catch-up of an index of one segment", "catchup.file", func(ctx context.Context, c *oneSegmentCatchUp, t *job.CatchUpTask, _ *catchUpInput) error {
		var err error
		if kind == index.KindFTS {
			rows := c.rows(func(values arrow.Array, _ []uint64) uint64 { return uint64(values.Len() - values.NullN()) })
			_, err = text.CatchUpDelta(ctx, c.old, c.oldReader(), c.w, rows, MaxFTSCatchUpBytes)
		} else {
			rows := c.rows(func(_ arrow.Array, ids []uint64) uint64 { return uint64(len(ids)) })
			_, err = scalar.BTreeDelta(ctx, c.old, c.oldReader(), c.w, rows, MaxScalarCatchUpBytes)
		}
		if err != nil {
			if errors.Is(err, scalar.ErrTooLarge) || errors.Is(err, text.ErrTooLarge) || errors.Is(err, scalar.ErrUnsupported) || errors.Is(err, text.ErrUnsupported) {
				err = fmt.Errorf("%w: %w", job.ErrUnsupported, err)
			}
			return fmt.Errorf("catch-up delta of %q (%s): %w", t.Index, kind, err)
		}
		sizes, names := c.written()
		c.out.Removed = nil
		c.out.Segment = &tablepb.IndexMetadata{Uuid: &tablepb.UUID{Uuid: c.id[:]}}
		for _, n := range names {
			c.out.Segment.Files = append(c.out.Segment.Files, &tablepb.IndexFile{Path: n, SizeBytes: uint64(sizes[n])})
		}
		return nil
	})
}

// ExecuteCatchUpMerge runs the join of a catch-up run in parts: it merges
// the deltas (the join's pieces, one per delta) into the segment the
// catch-up commits and returns the catch-up's job, as one catch-up over
// every fragment returns it. Deltas gone (an earlier run of this join
// committed or gave up) make it stale.
func ExecuteCatchUpMerge(ctx context.Context, tbl *table.Table, jt *job.JoinTask) (*job.CatchUpOutput, error) {
	t := jt.CatchUp
	in, err := loadCatchUp(ctx, tbl, t)
	if err != nil {
		return nil, err
	}
	pieces := slices.Clone(jt.Pieces)
	slices.SortFunc(pieces, func(a, b job.Piece) int { return a.Slice - b.Slice })
	if len(pieces) != len(t.Slices) {
		return nil, fmt.Errorf("%w: merge of %d catch-up deltas has %d pieces", job.ErrInvalidTask, len(t.Slices), len(pieces))
	}
	b := tbl.Bucket()
	deltas := make([]*segmentReader, len(pieces))
	var rows, dropped uint64
	for i, p := range pieces {
		if p.Slice != i || p.Dir == "" || path.Dir(p.Dir) != format.IndicesDir {
			return nil, fmt.Errorf("%w: piece %d of the merge (delta %d, dir %q)", job.ErrInvalidTask, i, p.Slice, p.Dir)
		}
		rows, dropped = rows+p.Rows, dropped+p.Dropped
		if len(p.Files) == 0 {
			continue // an FTS delta without a token
		}
		meta := &tablepb.IndexMetadata{}
		for _, f := range p.Files {
			if _, err := b.Attributes(ctx, p.Dir+"/"+f.Name); errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("catch-up delta %s/%s is gone: %w: %w", p.Dir, f.Name, job.ErrStale, err)
			}
			meta.Files = append(meta.Files, &tablepb.IndexFile{Path: f.Name, SizeBytes: uint64(f.Size)})
		}
		deltas[i] = &segmentReader{b: b, dir: p.Dir, seg: meta}
	}
	kind := index.Detect(in.model())
	if !job.CatchUpSplits(kind) {
		return nil, fmt.Errorf("catch-up of %q: %s indices are not caught up in parts: %w", t.Index, kind, job.ErrUnsupported)
	}
	f := &deltaFold{b: b, t: t, in: in, kind: kind}
	defer f.discard(ctx)
	if deltas, err = f.fold(ctx, deltas); err != nil {
		return nil, err
	}
	var out *job.CatchUpOutput
	if kind.IsVector() {
		out, err = mergeVectorDeltas(ctx, b, t, in, deltas)
	} else {
		out, err = mergeDeltaFiles(ctx, b, t, in, kind, deltas, rows)
	}
	if err != nil {
		return nil, err
	}
	out.BytesRead, out.BytesWritten = out.BytesRead+f.read, out.BytesWritten+f.written
	out.Join, out.Rows, out.Dropped = jt, rows, dropped
	out.Base = out.Base[:0]
	for _, f := range in.frags {
		out.Base = append(out.Base, proto.Clone(f).(*tablepb.DataFragment))
	}
	for _, p := range pieces {
		out.Drift = addDrift(out.Drift, p.Drift)
	}
	failpoint.Hit("catchup.written")
	return out, nil
}

// addDrift adds sample to sum (nil: none measured).
func addDrift(sum, sample *job.DriftSample) *job.DriftSample {
	if sample == nil {
		return sum
	}
	if sum == nil {
		c := *sample
		return &c
	}
	sum.Rows += sample.Rows
	sum.Far += sample.Far
	return sum
}

// catchUpMergeFanIn is the most deltas one btree or vector merge reads
// at once. A merge holds a read page (btree) or a partition stream
// (vector) per delta it reads, so with more deltas than this it first
// combines runs of them into intermediate deltas (deltaFold), level by
// level: its memory is that of catchUpMergeFanIn inputs whatever the
// backlog, for one more read and write of the new rows per level. A
// variable for tests (SetCatchUpMergeFanIn), which set it before any
// parallel test runs.
var catchUpMergeFanIn = 8

// deltaFold combines the deltas of a catch-up merge into at most
// catchUpMergeFanIn. Each intermediate delta is the delta one task over
// the fragments of the deltas it combines writes (btree: CombineBTreeDeltas;
// vector: its stored rows alone, no index.idx), in its own directory under
// _indices/, journaled like every file a task writes and deleted once the
// next level (or the merge) has read it. The FTS merge copies each delta's
// partition with one buffer whatever their number: not folded.
type deltaFold struct {
	b       *store.Bucket
	t       *job.CatchUpTask
	in      *catchUpInput
	kind    index.Kind
	vs      *vectorModel // the vector model, open while folding
	level   []string     // keys of the current level's intermediates
	read    int64
	written int64
}

// fold returns at most catchUpMergeFanIn deltas holding the rows of
// deltas, in order.
func (f *deltaFold) fold(ctx context.Context, deltas []*segmentReader) ([]*segmentReader, error) {
	if f.kind == index.KindFTS {
		return deltas, nil
	}
	if f.kind.IsVector() && len(deltas) > catchUpMergeFanIn {
		vs, err := openVectorModel(ctx, f.b, f.t, f.in)
		if err != nil {
			return nil, err
		}
		defer vs.close()
		f.vs = vs
	}
	for n := len(deltas); n > catchUpMergeFanIn; n = len(deltas) {
		var next []*segmentReader
		var keys []string
		// Groups of even size, each of more than catchUpMergeFanIn/2.
		g := (n + catchUpMergeFanIn - 1) / catchUpMergeFanIn
		for i := range g {
			d, err := f.combine(ctx, deltas[i*n/g:(i+1)*n/g])
			if d != nil {
				for _, fl := range d.seg.GetFiles() {
					keys = append(keys, d.dir+"/"+fl.GetPath())
				}
				next = append(next, d)
			}
			if err != nil {
				deleteKeys(context.WithoutCancel(ctx), f.b, keys)
				return nil, err
			}
		}
		f.discard(ctx)
		f.level, deltas = keys, next
	}
	return deltas, nil
}

// discard deletes the current level's intermediates.
func (f *deltaFold) discard(ctx context.Context) {
	deleteKeys(context.WithoutCancel(ctx), f.b, f.level)
	f.level = nil
}

// combine writes one intermediate delta of group's rows.
func (f *deltaFold) combine(ctx context.Context, group []*segmentReader) (*segmentReader, error) {
	for _, d := range group {
		if d == nil {
			return nil, fmt.Errorf("%w: a %s catch-up delta without files", job.ErrInvalidTask, f.kind)
		}
		for _, fl := range d.seg.GetFiles() {
			f.read += int64(fl.GetSizeBytes())
		}
	}
	id := uuid.New()
	dir := path.Join(format.IndicesDir, id.String())
	meta := &tablepb.IndexMetadata{Uuid: &tablepb.UUID{Uuid: id[:]}}
	if f.kind.IsVector() {
		stores, closeStores, err := openDeltaStorages(ctx, f.b, group)
		if err != nil {
			return nil, err
		}
		defer closeStores()
		names := []string{vector.AuxiliaryFileName}
		_, sizes, err := segmentFiles(ctx, f.b, dir+"/", names, func(w []io.Writer) error {
			_, err := f.vs.vm.NewDelta().Write(ctx, stores, w[0], nil, f.t.ReadVersion)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("catch-up merge of %q: combining %d deltas: %w", f.t.Index, len(group), err)
		}
		meta.Files = []*tablepb.IndexFile{{Path: names[0], SizeBytes: uint64(sizes[names[0]])}}
	} else {
		model := f.in.model()
		w := &segmentWriter{ctx: ctx, b: f.b, dir: dir}
		readers := make([]index.SegmentReader, len(group))
		for i, d := range group {
			readers[i] = d
		}
		old := &segmentReader{b: f.b, dir: path.Join(format.IndicesDir, (&index.Segment{Meta: model}).UUID()), seg: model}
		if _, err := scalar.CombineBTreeDeltas(ctx, model, old, readers, w); err != nil {
			deleteKeys(context.WithoutCancel(ctx), f.b, w.keys)
			return nil, fmt.Errorf("catch-up merge of %q (btree): combining %d deltas: %w", f.t.Index, len(group), err)
		}
		for _, fl := range w.files {
			meta.Files = append(meta.Files, &tablepb.IndexFile{Path: fl.Name, SizeBytes: uint64(fl.Size)})
		}
	}
	for _, fl := range meta.Files {
		f.written += int64(fl.GetSizeBytes())
	}
	return &segmentReader{b: f.b, dir: dir, seg: meta}, nil
}

// openDeltaStorages opens the auxiliary.idx (the stored rows) of every
// vector delta.
func openDeltaStorages(ctx context.Context, b *store.Bucket, deltas []*segmentReader) ([]*vector.StorageFile, func(), error) {
	var stores []*vector.StorageFile
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, d := range deltas {
		if d == nil {
			closeAll()
			return nil, nil, fmt.Errorf("%w: a vector catch-up delta without files", job.ErrInvalidTask)
		}
		s, closeDelta, err := openVectorStorage(ctx, b, d.dir)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, closeDelta)
		stores = append(stores, s)
	}
	return stores, closeAll, nil
}

// mergeVectorDeltas writes a vector catch-up's segment from its deltas'
// rows, partition by partition.
func mergeVectorDeltas(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, deltas []*segmentReader) (*job.CatchUpOutput, error) {
	vs, err := openVectorModel(ctx, b, t, in)
	if err != nil {
		return nil, err
	}
	defer vs.close()
	stores, closeStores, err := openDeltaStorages(ctx, b, deltas)
	if err != nil {
		return nil, err
	}
	defer closeStores()
	out := &job.CatchUpOutput{CatchUp: t}
	return out, writeVectorCatchUp(ctx, b, t, in, vs, vs.vm.NewDelta(), stores, out)
}

// mergeDeltaFiles writes a btree or FTS catch-up's segment from its
// deltas: the old segment and every delta's rows.
func mergeDeltaFiles(ctx context.Context, b *store.Bucket, t *job.CatchUpTask, in *catchUpInput, kind index.Kind, deltas []*segmentReader, rows uint64) (*job.CatchUpOutput, error) {
	readers := make([]index.SegmentReader, len(deltas))
	for i, d := range deltas {
		switch {
		case d != nil:
			readers[i] = d
		case kind != index.KindFTS:
			return nil, fmt.Errorf("%w: a %s catch-up delta without files", job.ErrInvalidTask, kind)
		}
	}
	return runOneSegmentCatchUp(ctx, b, t, in, false, "splits the catch-up of an index of one segment", "catchup.file", func(ctx context.Context, c *oneSegmentCatchUp, t *job.CatchUpTask, in *catchUpInput) error {
		var order []string
		if kind == index.KindFTS {
			res, err := text.CatchUpMerge(ctx, c.old, c.oldReader(), readers, c.w)
			if err != nil {
				return fmt.Errorf("catch-up merge of %q (fts): %w", t.Index, err)
			}
			for _, p := range res.Partitions {
				order = append(order, text.InvertFileName(p), text.TokensFileName(p), text.DocsFileName(p))
			}
			order = append(order, text.MetadataFileName)
		} else {
			res, err := scalar.MergeBTreeDeltas(ctx, c.old, c.oldReader(), readers, c.w)
			if err != nil {
				return fmt.Errorf("catch-up merge of %q (btree): %w", t.Index, err)
			}
			if res.Rows < rows {
				return fmt.Errorf("%w: catch-up of %q: the merged segment holds %d rows, fewer than the deltas' %d", job.ErrInvariant, t.Index, res.Rows, rows)
			}
		}
		c.added = rows
		sizes, names := c.written()
		if order == nil {
			order = names
		}
		model := in
		if kind == index.KindFTS {
			model = &catchUpInput{m: in.m, segs: []*tablepb.IndexMetadata{withoutFiles(c.old)}, frags: in.frags}
		}
		var err error
		if c.out.Segment, err = catchUpSegment(t, model, c.id, in.segs, order, sizes); err != nil {
			return err
		}
		if kind == index.KindFTS && len(c.old.GetFiles()) == 0 {
			c.out.Segment.Files = nil
		}
		c.out.Merged = "the catch-up's deltas merged into the index's one segment"
		return nil
	})
}

// deleteMergedDeltas deletes the delta segments of every catch-up merge in
// ps: the merged segment holds their rows, and the deltas' own results may
// come after the merge's (the daemon keeps them back for it), or never.
// Their journal entries are settled when those results are discarded, or
// by cleanup.
func deleteMergedDeltas(ctx context.Context, b *store.Bucket, ps []Pending) {
	for _, p := range ps {
		jt := p.Job.Task().Join
		if jt == nil || jt.CatchUp == nil {
			continue
		}
		var keys []string
		for _, pc := range jt.Pieces {
			if path.Dir(pc.Dir) != format.IndicesDir {
				continue
			}
			for _, f := range pc.Files {
				keys = append(keys, pc.Dir+"/"+f.Name)
			}
		}
		deleteKeys(context.WithoutCancel(ctx), b, keys)
	}
}
