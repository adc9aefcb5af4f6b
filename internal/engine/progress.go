package engine

import (
	"context"
	"sync/atomic"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/progress"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// TaskSize is the input a task's progress is counted in: the physical rows
// of the fragments it reads and the recorded bytes of the data files it
// reads (0 where the manifest records no size). A remap reads index files,
// not rows: 0, 0.
func TaskSize(m *tablepb.Manifest, t job.Task) (rows, bytes int64) {
	if remapOf(t) != nil || t.Join != nil {
		return 0, 0
	}
	if t.Slice != nil && t.Slice.CatchUp != nil {
		return TaskSize(m, job.Task{CatchUp: t.Slice.CatchUp.Part(t.Slice.Index)})
	}
	if t.Slice != nil {
		// The slice's share of its parent.
		rows, bytes = TaskSize(m, t.Slice.Parent())
		r := t.Slice.Range()
		if rows > 0 {
			bytes = int64(float64(bytes) * float64(r.Hi-r.Lo) / float64(rows))
		}
		return int64(r.Hi - r.Lo), bytes
	}
	byID := format.FragmentsByID(m)
	for _, id := range t.Fragments() {
		f := byID[id]
		if f == nil {
			continue
		}
		rows += int64(f.GetPhysicalRows())
		if t.CatchUp != nil {
			continue // a catch-up reads one column: rows only
		}
		if t.Repack != nil {
			bytes += int64(t.Repack.Bytes)
			continue
		}
		bytes += int64(fragmentBytes(f))
	}
	return rows, bytes
}

// fragmentBytes is the recorded size of a fragment's data files.
func fragmentBytes(f *tablepb.DataFragment) uint64 {
	var n uint64
	for _, df := range f.GetFiles() {
		n += df.GetFileSizeBytes()
	}
	return n
}

// taskProgress counts what one execution reported, so Execute can bring
// the done counts to the task's size once it succeeds (reports come per
// group, file or batch; whatever was not reported is done then).
type taskProgress struct {
	next        context.Context
	rows, bytes atomic.Int64
}

func (p *taskProgress) Expect(rows, bytes int64) { progress.Expect(p.next, rows, bytes) }

func (p *taskProgress) Add(rows, bytes int64) {
	p.rows.Add(rows)
	p.bytes.Add(bytes)
	progress.Add(p.next, rows, bytes)
}

// finish reports the rest of a task of size rows, bytes as done.
func (p *taskProgress) finish(rows, bytes int64) {
	progress.Add(p.next, max(0, rows-p.rows.Load()), max(0, bytes-p.bytes.Load()))
}

// fragmentProgress reports the rows of one fragment as they stream:
// deleted rows count as done when the fragment starts, live rows as their
// batches are read, and the fragment's bytes in proportion.
type fragmentProgress struct {
	ctx              context.Context
	rows, bytes      int64 // the fragment's physical rows and bytes
	seenRows, addedB int64
}

func startFragment(ctx context.Context, f *tablepb.DataFragment, deleted uint64) *fragmentProgress {
	fp := &fragmentProgress{ctx: ctx, rows: int64(f.GetPhysicalRows()), bytes: int64(fragmentBytes(f))}
	fp.add(int64(deleted))
	return fp
}

func (fp *fragmentProgress) add(rows int64) {
	if fp == nil || rows == 0 {
		return
	}
	fp.seenRows += rows
	b := fp.bytes
	if fp.rows > 0 {
		b = int64(float64(fp.bytes) * float64(min(fp.seenRows, fp.rows)) / float64(fp.rows))
	}
	progress.Add(fp.ctx, rows, b-fp.addedB)
	fp.addedB = b
}

// groupDone reports a group of fragments copied whole.
func groupDone(ctx context.Context, g []*tablepb.DataFragment) {
	var rows, bytes int64
	for _, f := range g {
		rows += int64(f.GetPhysicalRows())
		bytes += int64(fragmentBytes(f))
	}
	progress.Add(ctx, rows, bytes)
}
