package job

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A rewrite or repack of one huge fragment may be planned in row slices
// (RewriteTask.Slices, RepackTask.Slices): each slice is a task of its own
// (SliceTask) that any worker runs, writing the slice's rows as encoded
// file pieces (data files no manifest references yet, recorded in the
// journal under the slice's execution id). When every slice has its
// result, one join task (JoinTask) concatenates the pieces by page copy
// (lancewrite.ConcatRows: pages copied byte for byte, their priorities
// shifted, never decoded) into the fragment's files, and its output is the
// parent task's job (a RewriteOutput or RepackOutput with Join set),
// committed like any other. A slice that fails is run again alone: the
// other slices' pieces stay until the join has committed or given up.

// The slice and join kinds.
const (
	KindSlice Kind = "slice"
	KindJoin  Kind = "join"
)

// RowRange is one slice of a fragment: physical rows [Lo, Hi).
type RowRange struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

// SliceTask runs one row range of a rewrite or repack planned in slices,
// one part of an index remap (a range of the segment's units of work), or
// one delta of an index catch-up (a range of its fragments): exactly one
// of Rewrite, Repack, Remap and CatchUp is set (the parent task, whose
// Slices list every range), Index picks the range.
type SliceTask struct {
	Rewrite *RewriteTask `json:"rewrite,omitempty"`
	Repack  *RepackTask  `json:"repack,omitempty"`
	Remap   *RemapTask   `json:"remap,omitempty"`
	CatchUp *CatchUpTask `json:"catchup,omitempty"`
	Index   int          `json:"index"`
}

// Parent is the task the slice is part of.
func (s *SliceTask) Parent() Task {
	return Task{Rewrite: s.Rewrite, Repack: s.Repack, Remap: s.Remap, CatchUp: s.CatchUp}
}

// Range is the slice's rows.
func (s *SliceTask) Range() RowRange { return parentSlices(s.Parent())[s.Index] }

func parentSlices(t Task) []RowRange {
	switch {
	case t.Rewrite != nil:
		return t.Rewrite.Slices
	case t.Repack != nil:
		return t.Repack.Slices
	case t.Remap != nil:
		return t.Remap.Slices
	case t.CatchUp != nil:
		return t.CatchUp.Slices
	}
	return nil
}

// Slices returns the slice tasks of a task planned in slices (nil for any
// other task).
func (t Task) Slices() []Task {
	n := len(parentSlices(t))
	if n < 2 || (t.Rewrite == nil && t.Repack == nil && t.Remap == nil && t.CatchUp == nil) {
		return nil
	}
	out := make([]Task, n)
	for i := range out {
		out[i] = Task{Slice: &SliceTask{Rewrite: t.Rewrite, Repack: t.Repack, Remap: t.Remap, CatchUp: t.CatchUp, Index: i}}
	}
	return out
}

func (s *SliceTask) keyKind() Kind {
	p := s.Parent()
	return Kind(string(KindSlice) + "/" + string(parentKeyKind(p)) + "/" + strconv.Itoa(s.Index+1) + "of" + strconv.Itoa(len(parentSlices(p))))
}

// parentKeyKind is the kind part of a parent's key: its kind, and for a
// remap the segment's uuid (one batch remaps several indices over the same
// fragments).
func parentKeyKind(p Task) Kind {
	if p.Remap != nil {
		return Kind(string(KindRemap) + "/" + p.Remap.SegmentUUID())
	}
	if p.CatchUp != nil {
		return p.CatchUp.keyKind()
	}
	return p.Kind()
}

func validateParent(kind string, p Task) error {
	n := 0
	for _, set := range []bool{p.Rewrite != nil, p.Repack != nil, p.Remap != nil, p.CatchUp != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: a %s names exactly one rewrite, repack, remap or catch-up", ErrInvalidTask, kind)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Remap == nil && p.CatchUp == nil && len(p.Fragments()) != 1 {
		return fmt.Errorf("%w: a %s of %s covers %d fragments, not one", ErrInvalidTask, kind, p.Table(), len(p.Fragments()))
	}
	rs := parentSlices(p)
	if len(rs) < 2 {
		return fmt.Errorf("%w: a %s of %s has %d slices", ErrInvalidTask, kind, p.Table(), len(rs))
	}
	for i, r := range rs {
		if r.Hi <= r.Lo || (i > 0 && r.Lo != rs[i-1].Hi) || (i == 0 && r.Lo != 0) {
			return fmt.Errorf("%w: %s of %s: slice %d [%d,%d) does not follow the one before", ErrInvalidTask, kind, p.Table(), i, r.Lo, r.Hi)
		}
	}
	if p.CatchUp != nil && rs[len(rs)-1].Hi != uint64(len(p.CatchUp.Fragments)) {
		return fmt.Errorf("%w: %s of %s: the catch-up's deltas end at fragment %d of %d", ErrInvalidTask, kind, p.Table(), rs[len(rs)-1].Hi, len(p.CatchUp.Fragments))
	}
	return nil
}

func (s *SliceTask) validate() error {
	if err := validateParent("slice", s.Parent()); err != nil {
		return err
	}
	if s.Index < 0 || s.Index >= len(parentSlices(s.Parent())) {
		return fmt.Errorf("%w: slice %d of %d", ErrInvalidTask, s.Index, len(parentSlices(s.Parent())))
	}
	return nil
}

// Piece is one file a slice wrote: its place in the output (File: the
// repack's planned file, or the rewrite's new fragment, counted from 0),
// its rows and its DataFile entry (protobuf bytes). A remap part's piece
// is instead the directory its files were written to (Dir, under the
// table root, and Files), with the index entries it kept (Rows) and
// dropped. A catch-up delta's piece is its delta segment's directory and
// files, with the rows it holds and dropped and the drift it measured.
type Piece struct {
	Slice   int                 `json:"slice"`
	File    int                 `json:"file"`
	Rows    uint64              `json:"rows"`
	Entry   []byte              `json:"data_file,omitempty"`
	Dir     string              `json:"dir,omitempty"`
	Files   []index.SegmentFile `json:"files,omitempty"`
	Dropped uint64              `json:"dropped,omitempty"`
	Drift   *DriftSample        `json:"drift,omitempty"`
}

// DataFile decodes the piece's DataFile entry.
func (p Piece) DataFile() (*tablepb.DataFile, error) {
	df := &tablepb.DataFile{}
	if err := proto.Unmarshal(p.Entry, df); err != nil {
		return nil, fmt.Errorf("%w: piece of slice %d: %v", ErrTaskFormat, p.Slice, err)
	}
	return df, nil
}

// NewPiece makes a Piece from its DataFile entry.
func NewPiece(slice, file int, rows uint64, df *tablepb.DataFile) (Piece, error) {
	b, err := proto.Marshal(df)
	if err != nil {
		return Piece{}, err
	}
	return Piece{Slice: slice, File: file, Rows: rows, Entry: b}, nil
}

// SliceOutput is an executed slice: the pieces it wrote. It is never
// committed itself: the committer waits for every slice of the parent,
// has the join run, and deletes the pieces once the join is settled.
type SliceOutput struct {
	Slice        *SliceTask           `json:"-"`
	Pieces       []Piece              `json:"pieces"`
	Outputs      []string             `json:"written"`
	RowsRead     uint64               `json:"rows_read"`
	RowsWritten  uint64               `json:"rows_written"`
	BytesRead    int64                `json:"bytes_read"`
	BytesWritten int64                `json:"bytes_written"`
	Paths        lancewrite.PathStats `json:"page_paths"`
	// Kept counts how often the committer kept this result back for its
	// sibling slices (it gives up when they never come).
	Kept int `json:"kept,omitempty"`
}

// Task implements Job.
func (o *SliceOutput) Task() Task { return Task{Slice: o.Slice} }

// Written implements Job.
func (o *SliceOutput) Written() []string { return o.Outputs }

// Classify implements Job with the parent's rules.
func (o *SliceOutput) Classify(theirs *tablepb.Transaction) (Verdict, string) {
	if o.Slice.Remap != nil {
		return (&RemapOutput{Remap: o.Slice.Remap}).Classify(theirs)
	}
	if o.Slice.CatchUp != nil {
		return (&CatchUpOutput{CatchUp: o.Slice.CatchUp.Part(o.Slice.Index)}).Classify(theirs)
	}
	if o.Slice.Repack != nil {
		return ClassifyForRepack(map[uint64]bool{o.Slice.Repack.Fragment: true}, theirs)
	}
	ids := map[uint64]bool{}
	for _, id := range o.Slice.Rewrite.Fragments {
		ids[id] = true
	}
	return ClassifyForRewrite(ids, theirs)
}

// Op implements Job: the parent's transaction (the committer takes slices
// out before building it).
func (o *SliceOutput) Op() Op { return o.Slice.Parent().Op() }

// Bytes implements Job.
func (o *SliceOutput) Bytes() (read, written int64) { return o.BytesRead, o.BytesWritten }

// JoinTask concatenates the pieces of every slice of a parent task (exactly
// one of Rewrite, Repack, Remap and CatchUp) into the parent's output
// files; a catch-up's join merges its delta segments into the segment the
// catch-up commits.
type JoinTask struct {
	Rewrite *RewriteTask `json:"rewrite,omitempty"`
	Repack  *RepackTask  `json:"repack,omitempty"`
	Remap   *RemapTask   `json:"remap,omitempty"`
	CatchUp *CatchUpTask `json:"catchup,omitempty"`
	// Pieces are every slice's pieces, in slice order.
	Pieces []Piece `json:"pieces"`
}

// Parent is the task the join finishes.
func (j *JoinTask) Parent() Task {
	return Task{Rewrite: j.Rewrite, Repack: j.Repack, Remap: j.Remap, CatchUp: j.CatchUp}
}

func (j *JoinTask) keyKind() Kind {
	return Kind(string(KindJoin) + "/" + string(parentKeyKind(j.Parent())))
}

func (j *JoinTask) validate() error {
	if err := validateParent("join", j.Parent()); err != nil {
		return err
	}
	if len(j.Pieces) == 0 {
		return fmt.Errorf("%w: join of %s has no pieces", ErrInvalidTask, j.Parent().Table())
	}
	return nil
}

// NewJoin makes the join task of a parent from its slices' outputs (in any
// order; one per slice).
func NewJoin(parent Task, outs []*SliceOutput) (Task, error) {
	n := len(parentSlices(parent))
	bySlice := make([]*SliceOutput, n)
	for _, o := range outs {
		i := o.Slice.Index
		if i < 0 || i >= n || bySlice[i] != nil {
			return Task{}, fmt.Errorf("%w: join of %s: slice %d given twice or out of range", ErrInvalidTask, parent.Key(), i)
		}
		bySlice[i] = o
	}
	jt := &JoinTask{Rewrite: parent.Rewrite, Repack: parent.Repack, Remap: parent.Remap, CatchUp: parent.CatchUp}
	for i, o := range bySlice {
		if o == nil {
			return Task{}, fmt.Errorf("%w: join of %s: slice %d missing", ErrInvalidTask, parent.Key(), i)
		}
		jt.Pieces = append(jt.Pieces, o.Pieces...)
	}
	t := Task{Join: jt}
	return t, t.Validate()
}
