package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// ExecuteRemap runs one remap task against m, the manifest of its read
// version: the row-address mapping is rebuilt from the read version's
// deletion files and the task's groups (memory: one deletion bitmap per
// rewritten fragment of the groups, never one entry per row), the index
// kind's registered index.Remapper reads _indices/<old uuid>/ and writes
// _indices/<new uuid>/, every file recorded in the journal before it is
// written and measured exactly as written.
func ExecuteRemap(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.RemapTask) (out *job.RemapOutput, err error) {
	in, err := remapInputs(ctx, tbl, m, t, true)
	if err != nil {
		return nil, err
	}
	rm, ok := index.RemapperFor(in.kind)
	if !ok {
		return nil, fmt.Errorf("index %q (%s): %w", in.seg.GetName(), in.kind, index.ErrNoRemapper)
	}
	b := tbl.Bucket()
	newID := uuid.New()
	w := &segmentWriter{ctx: ctx, b: b, dir: path.Join(format.IndicesDir, newID.String())}
	out = &job.RemapOutput{Remap: t, NewUUID: newID[:]}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, w.keys)
			out = nil
		}
	}()
	failpoint.Hit("remap.start")
	req := in.request(w, t.Seed)
	if in.kind == index.KindFM {
		req.Rows, req.BuildBytes = remapRows(tbl, m, in), int64(t.FMMaxBytes)
	}
	res, err := rm.Remap(ctx, req)
	if err != nil {
		return out, fmt.Errorf("remap index %q (%s) segment %s: %w", in.seg.GetName(), in.kind, in.old.dir, fmErr(err))
	}
	if err := w.check(in.seg, in.kind); err != nil {
		return out, err
	}
	failpoint.Hit("remap.written")
	out.Outputs = w.keys
	out.Files = w.files
	out.Rows, out.Dropped = res.Rows, res.Dropped
	out.BytesWritten = w.written()
	for _, f := range in.seg.GetFiles() {
		out.BytesRead += int64(f.GetSizeBytes())
	}
	return out, nil
}

// remapInputs is what a remap, a remap part or a remap join reads: the
// old segment and its kind, and (withMapping) the row-address mapping.
type remapIn struct {
	seg     *tablepb.IndexMetadata
	kind    index.Kind
	old     *segmentReader
	mapping index.Mapping
	groups  []index.RewriteGroup
}

// remapInputs checks the task against m, the manifest of its read
// version, and rebuilds the row-address mapping from the read version's
// deletion files and the task's groups (memory: one deletion bitmap per
// rewritten fragment of the groups, never one entry per row).
func remapInputs(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.RemapTask, withMapping bool) (*remapIn, error) {
	if m.GetVersion() != t.ReadVersion {
		return nil, fmt.Errorf("remap planned at version %d given manifest %d", t.ReadVersion, m.GetVersion())
	}
	seg, err := t.SegmentMeta()
	if err != nil {
		return nil, err
	}
	if seg.BaseId != nil {
		return nil, fmt.Errorf("index %q lives in base %d: %w", seg.GetName(), seg.GetBaseId(), job.ErrUnsupported)
	}
	in := &remapIn{seg: seg, kind: index.Detect(seg),
		old: &segmentReader{b: tbl.Bucket(), dir: path.Join(format.IndicesDir, (&index.Segment{Meta: seg}).UUID()), seg: seg}}
	if !withMapping {
		return in, nil
	}
	frags := format.FragmentsByID(m)
	in.groups, err = t.MappingGroups(func(id uint64) (index.OldFragment, error) {
		f := frags[id]
		if f == nil {
			return index.OldFragment{}, fmt.Errorf("remap: fragment %d is not in version %d: %w", id, m.GetVersion(), job.ErrStale)
		}
		del, err := tbl.ReadDeletions(ctx, f)
		if err != nil {
			return index.OldFragment{}, err
		}
		return index.OldFragment{ID: id, PhysicalRows: f.GetPhysicalRows(), Deleted: del}, nil
	})
	if err != nil {
		return nil, err
	}
	mapping, err := index.NewCompactionMapping(in.groups)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", job.ErrInvalidTask, err)
	}
	in.mapping = mapping
	return in, nil
}

func (in *remapIn) request(w index.SegmentWriter, seed uint64) index.RemapRequest {
	return index.RemapRequest{Segment: in.seg, Kind: in.kind, Mapping: in.mapping, Groups: in.groups, Old: in.old, New: w, Seed: seed}
}

// partRemapInputs reads the inputs of t, a remap planned in parts
// (remapInputs; withMapping for a part), and its kind's
// index.PartRemapper.
func partRemapInputs(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, t *job.RemapTask, withMapping bool) (*remapIn, index.PartRemapper, error) {
	in, err := remapInputs(ctx, tbl, m, t, withMapping)
	if err != nil {
		return nil, nil, err
	}
	pr, ok := index.PartRemapperFor(in.kind)
	if !ok {
		return nil, nil, fmt.Errorf("index %q (%s) does not remap in parts: %w", in.seg.GetName(), in.kind, index.ErrNoRemapper)
	}
	return in, pr, nil
}

// ExecuteRemapPart runs one part of a remap planned in parts (a
// job.SliceTask whose parent is a remap): the remapped units of its range
// are written as pieces into a directory of their own under _indices/,
// every file journaled before it is written. On error they are deleted.
func ExecuteRemapPart(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, s *job.SliceTask) (out *job.SliceOutput, err error) {
	t := s.Remap
	in, pr, err := partRemapInputs(ctx, tbl, m, t, true)
	if err != nil {
		return nil, err
	}
	b := tbl.Bucket()
	dir := path.Join(format.IndicesDir, uuid.NewString())
	w := &segmentWriter{ctx: ctx, b: b, dir: dir, failpoint: "slice.piece"}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, w.keys)
			out = nil
		}
	}()
	r := s.Range()
	res, err := pr.RemapPart(ctx, in.request(w, t.Seed), index.PartRange{Lo: int(r.Lo), Hi: int(r.Hi)})
	if err != nil {
		return nil, fmt.Errorf("remap index %q (%s) segment %s, part [%d,%d): %w", in.seg.GetName(), in.kind, in.old.dir, r.Lo, r.Hi, err)
	}
	if err := w.check(in.seg, in.kind); err != nil {
		return nil, err
	}
	failpoint.Hit("remap.part")
	out = &job.SliceOutput{Slice: s, Outputs: w.keys, RowsRead: res.Rows + res.Dropped, RowsWritten: res.Rows, BytesWritten: w.written()}
	out.Pieces = []job.Piece{{Slice: s.Index, Rows: res.Rows, Dropped: res.Dropped, Dir: dir, Files: w.files}}
	return out, nil
}

// ExecuteRemapJoin joins the pieces of every part of a remap into the new
// segment (index.PartRemapper.JoinParts: page copy, nothing decoded) and
// returns the remap's job, ready to commit like a remap run in one task.
// Pieces gone (an earlier run of this join committed or gave up) make it
// stale.
func ExecuteRemapJoin(ctx context.Context, tbl *table.Table, m *tablepb.Manifest, jt *job.JoinTask) (out *job.RemapOutput, err error) {
	t := jt.Remap
	in, pr, err := partRemapInputs(ctx, tbl, m, t, false)
	if err != nil {
		return nil, err
	}
	pieces := slices.Clone(jt.Pieces)
	slices.SortFunc(pieces, func(a, b job.Piece) int { return a.Slice - b.Slice })
	if len(pieces) != len(t.Slices) {
		return nil, fmt.Errorf("%w: join of %d parts has %d pieces", job.ErrInvalidTask, len(t.Slices), len(pieces))
	}
	b := tbl.Bucket()
	parts := make([]index.SegmentReader, len(pieces))
	var rows, dropped uint64
	var read int64
	for i, p := range pieces {
		if p.Slice != i || p.Dir == "" || path.Dir(p.Dir) != format.IndicesDir {
			return nil, fmt.Errorf("%w: piece %d of the join (part %d, dir %q)", job.ErrInvalidTask, i, p.Slice, p.Dir)
		}
		meta := &tablepb.IndexMetadata{}
		for _, f := range p.Files {
			if _, err := b.Attributes(ctx, p.Dir+"/"+f.Name); errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("piece %s/%s is gone: %w: %w", p.Dir, f.Name, job.ErrStale, err)
			}
			meta.Files = append(meta.Files, &tablepb.IndexFile{Path: f.Name, SizeBytes: uint64(f.Size)})
			read += f.Size
		}
		parts[i] = &segmentReader{b: b, dir: p.Dir, seg: meta}
		rows, dropped = rows+p.Rows, dropped+p.Dropped
	}
	newID := uuid.New()
	w := &segmentWriter{ctx: ctx, b: b, dir: path.Join(format.IndicesDir, newID.String()), failpoint: "join.file"}
	defer func() {
		if err != nil {
			deleteKeys(context.WithoutCancel(ctx), b, w.keys)
			out = nil
		}
	}()
	res, err := pr.JoinParts(ctx, in.request(w, t.Seed), parts)
	if err != nil {
		return nil, fmt.Errorf("join %d parts of index %q (%s) segment %s: %w", len(parts), in.seg.GetName(), in.kind, in.old.dir, err)
	}
	if err := w.check(in.seg, in.kind); err != nil {
		return nil, err
	}
	if res.Rows != rows {
		return nil, fmt.Errorf("%w: index %q: the join wrote %d rows, its parts %d", job.ErrInvariant, in.seg.GetName(), res.Rows, rows)
	}
	failpoint.Hit("remap.written")
	return &job.RemapOutput{Remap: t, Join: jt, NewUUID: newID[:], Files: w.files, Outputs: w.keys, Rows: rows, Dropped: dropped,
		BytesRead: read, BytesWritten: w.written()}, nil
}

// segmentReader reads an old segment's files from the table's bucket.
type segmentReader struct {
	b   *store.Bucket
	dir string
	seg *tablepb.IndexMetadata
}

func (r *segmentReader) Files(ctx context.Context) ([]index.SegmentFile, error) {
	var out []index.SegmentFile
	if fs := r.seg.GetFiles(); len(fs) > 0 {
		for _, f := range fs {
			out = append(out, index.SegmentFile{Name: f.GetPath(), Size: int64(f.GetSizeBytes())})
		}
	} else {
		err := r.b.List(ctx, r.dir+"/", func(o store.Object) error {
			out = append(out, index.SegmentFile{Name: path.Base(o.Key), Size: o.Size})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (r *segmentReader) Open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	if name == "" || path.Base(name) != name {
		return nil, 0, fmt.Errorf("index segment file %q: %w", name, store.ErrInvalidKey)
	}
	ra, err := r.b.OpenReaderAt(ctx, r.dir+"/"+name)
	if err != nil {
		return nil, 0, err
	}
	return ra, ra.Size(), nil
}

// segmentWriter creates the new segment's files, journaled first.
type segmentWriter struct {
	ctx   context.Context
	b     *store.Bucket
	dir   string
	keys  []string
	files []index.SegmentFile
	open  int
	// failpoint, if set, is hit after each file is uploaded.
	failpoint string
}

func (w *segmentWriter) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if name == "" || path.Base(name) != name {
		return nil, fmt.Errorf("index segment file %q: %w", name, store.ErrInvalidKey)
	}
	key := w.dir + "/" + name
	if slices.Contains(w.keys, key) {
		return nil, fmt.Errorf("index segment file %s created twice", key)
	}
	if err := journal.RecordOutput(w.ctx, key); err != nil {
		return nil, err
	}
	sw, err := w.b.NewWriter(ctx, key)
	if err != nil {
		return nil, err
	}
	w.keys = append(w.keys, key)
	w.open++
	return &segmentFile{w: w, name: name, sw: sw}, nil
}

type segmentFile struct {
	w      *segmentWriter
	name   string
	sw     io.WriteCloser
	n      int64
	err    error
	closed bool
}

// check fails if a remapper left a file open or wrote none; it sorts the
// files written by name.
func (w *segmentWriter) check(seg *tablepb.IndexMetadata, kind index.Kind) error {
	if w.open > 0 {
		return fmt.Errorf("remap index %q: %d files left open by the %s remapper", seg.GetName(), w.open, kind)
	}
	if len(w.files) == 0 {
		return fmt.Errorf("remap index %q: the %s remapper wrote no file", seg.GetName(), kind)
	}
	sort.Slice(w.files, func(i, j int) bool { return w.files[i].Name < w.files[j].Name })
	return nil
}

// written is the bytes of the files written.
func (w *segmentWriter) written() int64 {
	var n int64
	for _, f := range w.files {
		n += f.Size
	}
	return n
}

func (f *segmentFile) Write(p []byte) (int, error) {
	if f.closed {
		return 0, fmt.Errorf("write %s after close", f.name)
	}
	n, err := f.sw.Write(p)
	f.n += int64(n)
	if err != nil && f.err == nil {
		f.err = err
	}
	return n, err
}

// Abort discards the file (nothing is published); a later Close returns
// nil.
func (f *segmentFile) Abort() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.w.open--
	return abortWriter(f.sw)
}

func (f *segmentFile) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.w.open--
	if f.err != nil {
		_ = abortWriter(f.sw)
		return f.err
	}
	if err := f.sw.Close(); err != nil {
		return fmt.Errorf("upload %s/%s: %w", f.w.dir, f.name, err)
	}
	f.w.files = append(f.w.files, index.SegmentFile{Name: f.name, Size: f.n})
	if f.w.failpoint != "" {
		failpoint.Hit(f.w.failpoint)
	}
	return nil
}

// reserveAttempts bounds ReserveFragments retries; a reservation is
// compatible with every concurrent commit, so only a busy table needs more
// than one.
const reserveAttempts = 20

// ReserveFragments commits Lance's ReserveFragments transaction for n
// fragment ids and returns the first: ids first..first+n-1 are never given
// to another fragment (max_fragment_id is raised by n, as lance's
// build_manifest does for this operation).
func ReserveFragments(ctx context.Context, tbl *table.Table, n uint32) (uint64, error) {
	read, err := tbl.LatestVersion(ctx)
	if err != nil {
		return 0, err
	}
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		txn := format.NewTransaction(read)
		txn.Operation = &tablepb.Transaction_ReserveFragments_{ReserveFragments: &tablepb.Transaction_ReserveFragments{NumFragments: n}}
		var first uint64
		_, err := tbl.Commit(ctx, read, txn, func(latest *format.Manifest) (*tablepb.Manifest, error) {
			next := proto.Clone(latest.PB).(*tablepb.Manifest)
			top, _ := format.MaxFragmentID(latest.PB)
			mx := top + n
			next.MaxFragmentId = &mx
			first = uint64(top) + 1
			return next, nil
		})
		var ce *table.ConflictError
		if !errors.As(err, &ce) {
			return first, err
		}
		if attempt == reserveAttempts {
			return 0, fmt.Errorf("reserve %d fragment ids on %s: gave up after %d attempts: %w", n, tbl.URI(), attempt, err)
		}
		read = ce.LatestCommitted()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// remapSeed derives a reproducible seed for a segment's remap.
func remapSeed(seg *tablepb.IndexMetadata, readVersion uint64) uint64 {
	h := fnv.New64a()
	h.Write(seg.GetUuid().GetUuid())
	return h.Sum64() ^ readVersion
}

// remapPrep is what prepareRemaps did to a rewrite commit group.
type remapPrep struct {
	// added are the executed remap jobs to commit with the group.
	added []Pending
	// dropped reports the rewrite jobs left out (their files deleted).
	dropped *CommitReport
	// queued are the remap tasks left to workers (Runner.QueueRemaps);
	// waiting are the rewrite jobs (ids reserved) they are for, each with
	// the keys of the remap tasks it waits for. Neither is committed now.
	queued  []job.Task
	waiting map[*job.RewriteOutput][]string
}

func pendingOf(jobs []job.Job, ids map[string]string) []Pending {
	out := make([]Pending, len(jobs))
	for i, j := range jobs {
		out[i] = Pending{Job: j, JournalID: ids[j.Task().Key()]}
	}
	return out
}

// segUse is an index segment of the latest version and the rewrite jobs
// whose old fragments it covers.
type segUse struct {
	meta *tablepb.IndexMetadata
	jobs []*job.RewriteOutput
}

// prepareRemaps readies the rewrite jobs of one read version whose policy
// is index_coverage "remap" (on a table without stable row ids, where
// index files hold row addresses): their new fragment ids are reserved by
// one ReserveFragments commit, then every index segment of the latest
// version that covers one of their old fragments gets a remap task (one
// per segment, over the groups it covers). The tasks run here, through
// Execute like any task, or, with Runner.QueueRemaps, are handed back to
// run on workers while their rewrites wait (pre.queued, pre.waiting). A
// rewrite whose segment cannot be remapped (no remapper, or the remapper
// refused the files) is dropped with the reason; the commit's Build pairs
// the rest (job.RewriteTxn). Memory: one segment's remap at a time; no
// table-wide row map.
func (r *Runner) prepareRemaps(ctx context.Context, rv uint64, jobs []job.Job) (remapPrep, error) {
	pre := remapPrep{dropped: &CommitReport{Op: "remap", ReadVersion: rv}}
	need := remapCandidates(jobs)
	if len(need) == 0 {
		return pre, nil
	}
	m, err := r.Table.Load(ctx, rv)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("read version %d cleaned up: %w: %w", rv, job.ErrStale, err)
		}
		return pre, err
	}
	if m.PB.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0 {
		return pre, nil // bitmaps only (job.ApplyRewriteIndices)
	}
	segs, err := r.coveringSegments(ctx, need)
	if err != nil {
		return pre, err
	}
	live := r.remappable(ctx, &pre, need, segs)
	if len(live) == 0 {
		return pre, nil
	}
	failpoint.Hit("remap.reserve")
	if err := r.reserveNewIDs(ctx, live); err != nil {
		for _, o := range live {
			r.dropRewrite(ctx, &pre, o, "reserve fragment ids: "+err.Error())
		}
		return pre, err
	}
	if r.QueueRemaps {
		if err := r.queueRemaps(ctx, &pre, rv, segs); err != nil {
			return pre, err
		}
		// The rewrites no index covers wait too, so the read version's
		// rewrites still make one Rewrite commit, as Lance's compaction.
		var all []string
		for _, t := range pre.queued {
			all = append(all, t.Key())
		}
		for _, o := range need {
			if pre.waiting[o] == nil && len(all) > 0 && !slices.ContainsFunc(pre.dropped.Dropped, func(d Dropped) bool { return d.Key == o.Task().Key() }) {
				pre.waiting[o] = all
			}
		}
		return pre, nil
	}
	return pre, r.executeRemaps(ctx, &pre, m.PB, rv, segs)
}

// queueRemaps hands the remap of every segment of segs to workers (a
// segment remapped in parts as its part tasks): each rewrite waits for
// the tasks of the segments that cover it.
func (r *Runner) queueRemaps(ctx context.Context, pre *remapPrep, rv uint64, segs []*segUse) error {
	pre.waiting = map[*job.RewriteOutput][]string{}
	for _, u := range segs {
		task, ok, err := remapTask(r.Table.URI(), rv, u, nil)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		r.splitRemap(ctx, task.Remap, u)
		ts := task.Slices()
		if ts == nil {
			ts = []job.Task{task}
		}
		pre.queued = append(pre.queued, ts...)
		for _, o := range u.jobs {
			for _, t := range ts {
				pre.waiting[o] = append(pre.waiting[o], t.Key())
			}
		}
	}
	return nil
}

// splitRemap plans the remap of segment u in parts (t.Slices, ranges of
// its units of work) when its kind remaps in parts and its files hold
// more than the rewrites' index.remap_part_bytes (job.RemapParts). The
// ranges come from the segment's own metadata (index.PartRemapper.Parts:
// for IVF indices the stored rows per partition, read from
// auxiliary.idx; for a btree its pages, from page_lookup.lance). A segment that cannot be cut is remapped in one task,
// which reports what is wrong with it.
func (r *Runner) splitRemap(ctx context.Context, t *job.RemapTask, u *segUse) {
	var partBytes uint64
	for _, o := range u.jobs {
		if b := o.Rewrite.RemapPartBytes; b > 0 && (partBytes == 0 || b < partBytes) {
			partBytes = b
		}
	}
	pr, ok := index.PartRemapperFor(index.Detect(u.meta))
	if partBytes == 0 || !ok || u.meta.BaseId != nil {
		return
	}
	old := &segmentReader{b: r.Table.Bucket(), dir: path.Join(format.IndicesDir, (&index.Segment{Meta: u.meta}).UUID()), seg: u.meta}
	files, err := old.Files(ctx)
	if err != nil {
		r.log().Warn("index remap not split: segment files not listed", "table", r.name(), "index", u.meta.GetName(), "err", err)
		return
	}
	var size uint64
	for _, f := range files {
		size += uint64(f.Size)
	}
	n := job.RemapParts(size, partBytes)
	if n < 2 {
		return
	}
	ranges, err := pr.Parts(ctx, old, n)
	if err != nil {
		r.log().Warn("index remap not split", "table", r.name(), "index", u.meta.GetName(), "err", err)
		return
	}
	if len(ranges) < 2 {
		return
	}
	t.Slices = make([]job.RowRange, len(ranges))
	for i, pr := range ranges {
		t.Slices[i] = job.RowRange{Lo: uint64(pr.Lo), Hi: uint64(pr.Hi)}
	}
	r.log().Info("index remap split into parts", "table", r.name(), "index", u.meta.GetName(), "segment", old.dir, "bytes", size, "parts", len(ranges))
}

// executeRemapTask runs a remap here: in one task, or, planned in parts,
// each part and then the join, whose job it returns (the parts' pieces
// are deleted once the join has copied them, or on failure).
func (r *Runner) executeRemapTask(ctx context.Context, m *tablepb.Manifest, task job.Task) (Pending, error) {
	parts := task.Slices()
	if parts == nil {
		return r.Execute(ctx, m, task)
	}
	var done []Pending
	defer func() { r.Discard(ctx, done) }()
	outs := make([]*job.SliceOutput, 0, len(parts))
	for _, pt := range parts {
		p, err := r.Execute(ctx, m, pt)
		if err != nil {
			return Pending{}, err
		}
		done = append(done, p)
		outs = append(outs, p.Job.(*job.SliceOutput))
	}
	jt, err := job.NewJoin(task, outs)
	if err != nil {
		return Pending{}, err
	}
	return r.Execute(ctx, m, jt)
}

// remapCandidates are the rewrite jobs whose indices are remapped (under
// "defer", those of the kinds job.RemapsSegment says) and whose new
// fragment ids are not reserved yet.
func remapCandidates(jobs []job.Job) []*job.RewriteOutput {
	var need []*job.RewriteOutput
	for _, j := range jobs {
		if o, ok := j.(*job.RewriteOutput); ok && o.Rewrite != nil && (o.Rewrite.IndexCoverage == "remap" || o.Rewrite.IndexCoverage == job.DeferIndexRemap) && !o.Group.Reserved {
			need = append(need, o)
		}
	}
	return need
}

// coveringSegments returns the index segments of the latest version that
// cover an old fragment of a job in need, each with those jobs.
//
// The segments to remap are the latest version's: an earlier commit batch
// of the same run (or a concurrent writer) may have remapped an index
// already; its segment then holds the new addresses of that batch and,
// unchanged, the addresses of the fragments this batch rewrites. The
// mapping itself comes from the read version's fragments; if those changed
// since, the rewrite is refused at commit by Lance's rules.
func (r *Runner) coveringSegments(ctx context.Context, need []*job.RewriteOutput) ([]*segUse, error) {
	latest, err := r.Table.Latest(ctx)
	if err != nil {
		return nil, err
	}
	var segs []*segUse
	for _, ix := range latest.Indices.GetIndices() {
		u := &segUse{meta: ix}
		for _, o := range need {
			if job.RemapsSegment(o, ix) && job.CoversGroup(ix, o.Group) {
				u.jobs = append(u.jobs, o)
			}
		}
		if len(u.jobs) > 0 {
			segs = append(segs, u)
		}
	}
	return segs, nil
}

// remappable drops (before anything is reserved) every job covered by a
// segment no remapper takes (the planner keeps such fragments; a segment
// created since the plan can still get here), and returns the jobs left
// that some segment covers, in need's order. Jobs no segment covers have
// nothing to remap and commit as they are.
func (r *Runner) remappable(ctx context.Context, pre *remapPrep, need []*job.RewriteOutput, segs []*segUse) []*job.RewriteOutput {
	dead := map[*job.RewriteOutput]string{}
	covered := map[*job.RewriteOutput]bool{}
	for _, u := range segs {
		err := index.CanRemap(u.meta)
		for _, o := range u.jobs {
			covered[o] = true
			if err != nil {
				dead[o] = err.Error()
			}
		}
	}
	var live []*job.RewriteOutput
	for _, o := range need {
		if why, ok := dead[o]; ok {
			r.dropRewrite(ctx, pre, o, why)
		} else if covered[o] {
			live = append(live, o)
		}
	}
	for _, u := range segs {
		u.jobs = slices.DeleteFunc(u.jobs, func(o *job.RewriteOutput) bool { return !slices.Contains(live, o) })
	}
	return live
}

// dropRewrite leaves a rewrite job out of the commit, its files deleted.
func (r *Runner) dropRewrite(ctx context.Context, pre *remapPrep, o *job.RewriteOutput, why string) {
	key := o.Task().Key()
	r.log().Warn("rewrite dropped: index not remapped", "table", r.name(), "task_id", key, "err", why)
	pre.dropped.Dropped = append(pre.dropped.Dropped, Dropped{Key: key, Verdict: job.Incompatible, Reason: why})
	deleteKeys(context.WithoutCancel(ctx), r.Table.Bucket(), o.Written())
}

// reserveNewIDs gives the new fragments of live their ids, reserved by one
// ReserveFragments commit.
func (r *Runner) reserveNewIDs(ctx context.Context, live []*job.RewriteOutput) error {
	var n uint32
	for _, o := range live {
		n += uint32(len(o.Group.New))
	}
	id, err := ReserveFragments(ctx, r.Table, n)
	if err != nil {
		return err
	}
	for _, o := range live {
		for _, f := range o.Group.New {
			f.Id = id
			id++
		}
		o.Group.Reserved = true
	}
	return nil
}

// remapTask returns the remap task of segment u over the groups of its
// jobs, without those skip reports (false when none is left).
func remapTask(uri string, rv uint64, u *segUse, skip func(*job.RewriteOutput) bool) (job.Task, bool, error) {
	t := &job.RemapTask{Table: uri, ReadVersion: rv, Seed: remapSeed(u.meta, rv)}
	for _, o := range u.jobs {
		if skip != nil && skip(o) {
			continue
		}
		if b := o.Rewrite.GetFMMaxBytes(); b > 0 && (t.FMMaxBytes == 0 || b < t.FMMaxBytes) {
			t.FMMaxBytes = b
		}
		g := job.RemapGroup{}
		for _, f := range o.Group.Old {
			g.Old = append(g.Old, f.GetId())
		}
		for _, f := range o.Group.New {
			g.New = append(g.New, job.RemapNewRow{ID: f.GetId(), Rows: f.GetPhysicalRows()})
		}
		t.Groups = append(t.Groups, g)
	}
	if len(t.Groups) == 0 {
		return job.Task{}, false, nil
	}
	var err error
	if t.Segment, err = proto.Marshal(u.meta); err != nil {
		return job.Task{}, false, err
	}
	return job.Task{Remap: t}, true, nil
}

// executeRemaps runs the remap of every segment of segs here, one after
// the other. A segment that fails drops the rewrites it covers, and the
// remaps of later segments leave their groups out (the commit's Build
// would refuse a remap naming a group that is not committed, and with it
// every rewrite it covers); a failed invariant or a cancelled run discards
// every remap.
func (r *Runner) executeRemaps(ctx context.Context, pre *remapPrep, m *tablepb.Manifest, rv uint64, segs []*segUse) error {
	dropped := map[*job.RewriteOutput]bool{}
	for _, u := range segs {
		task, ok, err := remapTask(r.Table.URI(), rv, u, func(o *job.RewriteOutput) bool { return dropped[o] })
		if err != nil {
			r.Discard(ctx, pre.added)
			pre.added = nil
			return err
		}
		if !ok {
			continue
		}
		r.splitRemap(ctx, task.Remap, u)
		p, err := r.executeRemapTask(ctx, m, task)
		if err != nil {
			if errors.Is(err, job.ErrInvariant) || ctx.Err() != nil {
				r.Discard(ctx, pre.added)
				pre.added = nil
				return err
			}
			for _, o := range u.jobs {
				if !dropped[o] {
					dropped[o] = true
					r.dropRewrite(ctx, pre, o, fmt.Sprintf("index %q not remapped: %v", u.meta.GetName(), err))
				}
			}
			continue
		}
		pre.added = append(pre.added, p)
	}
	if len(pre.added) > 0 {
		failpoint.HitContext(ctx, "remap.commit")
	}
	return nil
}

// corruptIndexFile returns the first file of segment ix (key relative to
// the table root) that does not open as a Lance file, or the segment's
// directory when every file opens (the remapper refused what is inside).
func corruptIndexFile(ctx context.Context, tbl *table.Table, ix *tablepb.IndexMetadata) string {
	dir := path.Join(format.IndicesDir, (&index.Segment{Meta: ix}).UUID())
	files, err := (&segmentReader{b: tbl.Bucket(), dir: dir, seg: ix}).Files(ctx)
	if err != nil {
		return dir + "/"
	}
	for _, f := range files {
		if key := dir + "/" + f.Name; corruptLanceFile(ctx, tbl, key) != nil {
			return key
		}
	}
	return dir + "/"
}

// IndexQuarantinedError is a remap that failed for good: its segment was
// quarantined (Mark), so the table is planned again without the fragments
// the segment covers.
type IndexQuarantinedError struct {
	Mark quarantine.IndexMark
	Err  error
}

func (e *IndexQuarantinedError) Error() string { return e.Mark.String() }
func (e *IndexQuarantinedError) Unwrap() error { return e.Err }

// quarantineIndex records an index segment whose files could not be
// remapped for a reason that will not go away by itself (corrupt or
// unsupported files; engine.Classify neither retry nor drop), like a
// corrupt fragment: the planner then keeps the fragments that segment
// covers, with the reason, and maintains the rest of the table. Dropping
// the rewrite alone is not enough: the planner would plan the same
// fragments again, and each attempt commits a ReserveFragments version
// first, which itself triggers the next plan. A transient failure is only
// dropped and retried (err is returned as it is). If the mark cannot be
// written the table is held instead (the loop above must stop either way).
func (r *Runner) quarantineIndex(ctx context.Context, t *job.RemapTask, err error) error {
	switch Classify(err) {
	case Retry, Drop:
		return err
	}
	if ctx.Err() != nil {
		return err
	}
	ix, merr := t.SegmentMeta()
	if merr != nil {
		return err
	}
	seg := (&index.Segment{Meta: ix}).UUID()
	file := corruptIndexFile(ctx, r.Table, ix)
	mk := quarantine.IndexMark{Index: ix.GetName(), Segment: seg, File: file, Reason: err.Error(), At: time.Now().UTC()}
	werr := quarantine.RecordIndex(context.WithoutCancel(ctx), r.Table.Bucket(), mk)
	if werr == nil {
		if r.QuarantinedIndex != nil {
			r.QuarantinedIndex(mk)
		}
		r.log().Error("index segment quarantined: not remappable", "table", r.name(), "index", ix.GetName(), "segment", seg, "file", file, "err", err)
		return &IndexQuarantinedError{Mark: mk, Err: err}
	}
	reason := mk.String() + " (its quarantine record could not be written: " + werr.Error() + "); release the hold once that is done (lanced holds release)"
	if herr := hold.Place(context.WithoutCancel(ctx), r.Table.Bucket(), hold.Record{Table: r.Table.URI(), Reason: reason, By: "lanced"}); herr != nil {
		r.log().Error("could not quarantine nor hold after a failed remap", "table", r.name(), "index", ix.GetName(), "err", herr)
		return err
	}
	r.log().Error("table held: index not remappable", "table", r.name(), "index", ix.GetName(), "err", err)
	return err
}
