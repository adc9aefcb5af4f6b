package job

import (
	"encoding/json"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"google.golang.org/protobuf/proto"
)

// ResultFormatVersion is the version of the JSON encoding of Result. Like
// tasks, a coordinator refuses results of another format version.
const ResultFormatVersion = 1

// Result is an executed task on its way from a worker to the coordinator
// that commits it: the task, the files it wrote and, for the commit, the
// fragments as protobuf bytes (so unknown fields survive the trip).
type Result struct {
	Rewrite *RewriteOutput
	Repack  *RepackOutput
	Remap   *RemapOutput
	CatchUp *CatchUpOutput
	Slice   *SliceOutput
}

// Task returns the task the result is for.
func (r Result) Task() Task {
	if j := r.Job(); j != nil {
		return j.Task()
	}
	return Task{}
}

// Written returns the store keys the task wrote.
func (r Result) Written() []string {
	if j := r.Job(); j != nil {
		return j.Written()
	}
	return nil
}

type resultJSON struct {
	FormatVersion int      `json:"format_version"`
	Task          Task     `json:"task"`
	Written       []string `json:"written"`
	// Old/New are DataFragment protobufs (rewrite: the group; repack: Old
	// is the base fragment).
	Old          [][]byte `json:"old_fragments"`
	New          [][]byte `json:"new_fragments,omitempty"`
	Files        [][]byte `json:"files,omitempty"` // repack: the fragment's DataFiles after the repack
	RowsRead     uint64   `json:"rows_read,omitempty"`
	RowsWritten  uint64   `json:"rows_written,omitempty"`
	BytesRead    int64    `json:"bytes_read"`
	BytesWritten int64    `json:"bytes_written"`
	Copied       int      `json:"files_page_copied,omitempty"`
	Reencoded    int      `json:"files_reencoded,omitempty"`
	// Paths: pages of page-copied rewrite files per path.
	Paths *lancewrite.PathStats `json:"page_paths,omitempty"`
	// Reserved: the new fragments carry reserved ids (see RewriteGroup).
	Reserved bool `json:"reserved_ids,omitempty"`
	// Remap is an executed remap (it carries no fragments).
	Remap *RemapOutput `json:"remap,omitempty"`
	// Indices are IndexMetadata protobufs (catch-up: the new segment, then
	// the segments it merged).
	Indices [][]byte `json:"new_indices,omitempty"`
	Merged  string   `json:"merged,omitempty"`
	// Drift: a vector catch-up's drift measure.
	Drift *DriftSample `json:"drift,omitempty"`
	// Slice is an executed slice (its pieces).
	Slice *SliceOutput `json:"slice,omitempty"`
	// Retained: a deferred rewrite's kept old row addresses (see
	// RewriteOutput.Retained).
	Retained []byte `json:"retained_row_addrs,omitempty"`
}

func marshalAll[M proto.Message](ms []M) ([][]byte, error) {
	out := make([][]byte, len(ms))
	for i, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func unmarshalFrags(bs [][]byte) ([]*tablepb.DataFragment, error) {
	out := make([]*tablepb.DataFragment, len(bs))
	for i, b := range bs {
		out[i] = &tablepb.DataFragment{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MarshalJSON encodes the result for the trip to the coordinator.
func (r Result) MarshalJSON() ([]byte, error) {
	j := resultJSON{FormatVersion: ResultFormatVersion, Task: r.Task(), Written: r.Written()}
	var err error
	switch {
	case r.Rewrite != nil:
		o := r.Rewrite
		if j.Old, err = marshalAll(o.Group.Old); err != nil {
			return nil, err
		}
		if j.New, err = marshalAll(o.Group.New); err != nil {
			return nil, err
		}
		j.Reserved = o.Group.Reserved
		j.RowsRead, j.RowsWritten, j.BytesRead, j.BytesWritten = o.RowsRead, o.RowsWritten, o.BytesRead, o.BytesWritten
		j.Copied, j.Reencoded = o.Copied, o.Reencoded
		j.Retained = o.Retained
		if o.Paths != (lancewrite.PathStats{}) {
			ps := o.Paths
			j.Paths = &ps
		}
	case r.Repack != nil:
		o := r.Repack
		if j.Old, err = marshalAll([]*tablepb.DataFragment{o.Result.Base}); err != nil {
			return nil, err
		}
		if j.Files, err = marshalAll(o.Result.Files); err != nil {
			return nil, err
		}
		j.BytesRead, j.BytesWritten, j.Copied, j.Reencoded = o.BytesRead, o.BytesWritten, o.Copied, o.Reencoded
	case r.Slice != nil:
		j.Slice = r.Slice
		j.RowsRead, j.RowsWritten, j.BytesRead, j.BytesWritten = r.Slice.RowsRead, r.Slice.RowsWritten, r.Slice.BytesRead, r.Slice.BytesWritten
	case r.Remap != nil:
		j.Remap = r.Remap
		j.BytesRead, j.BytesWritten = r.Remap.BytesRead, r.Remap.BytesWritten
	case r.CatchUp != nil:
		o := r.CatchUp
		if j.Old, err = marshalAll(o.Base); err != nil {
			return nil, err
		}
		if j.Indices, err = marshalAll(append([]*tablepb.IndexMetadata{o.Segment}, o.Removed...)); err != nil {
			return nil, err
		}
		j.RowsRead, j.RowsWritten, j.BytesRead, j.BytesWritten = o.Rows+o.Dropped, o.Rows, o.BytesRead, o.BytesWritten
		j.Merged, j.Drift = o.Merged, o.Drift
	default:
		return nil, fmt.Errorf("%w: empty result", ErrInvalidTask)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes a result, refusing other format versions.
func (r *Result) UnmarshalJSON(data []byte) error {
	var j resultJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("%w: %v", ErrTaskFormat, err)
	}
	if j.FormatVersion != ResultFormatVersion {
		return fmt.Errorf("%w: result format_version %d, this build reads %d", ErrTaskFormat, j.FormatVersion, ResultFormatVersion)
	}
	old, err := unmarshalFrags(j.Old)
	if err != nil {
		return fmt.Errorf("%w: fragments: %v", ErrTaskFormat, err)
	}
	// A join's output is its parent's kind of output.
	join := j.Task.Join
	if join != nil {
		j.Task.Rewrite, j.Task.Repack, j.Task.Remap, j.Task.CatchUp = join.Rewrite, join.Repack, join.Remap, join.CatchUp
	}
	switch {
	case j.Task.Slice != nil:
		if j.Slice == nil {
			return fmt.Errorf("%w: slice result without its pieces", ErrTaskFormat)
		}
		j.Slice.Slice = j.Task.Slice
		*r = Result{Slice: j.Slice}
	case j.Task.Rewrite != nil:
		nw, err := unmarshalFrags(j.New)
		if err != nil {
			return fmt.Errorf("%w: fragments: %v", ErrTaskFormat, err)
		}
		*r = Result{Rewrite: &RewriteOutput{Rewrite: j.Task.Rewrite, Group: &RewriteGroup{Old: old, New: nw, Reserved: j.Reserved}, Outputs: j.Written,
			RowsRead: j.RowsRead, RowsWritten: j.RowsWritten, BytesRead: j.BytesRead, BytesWritten: j.BytesWritten,
			Copied: j.Copied, Reencoded: j.Reencoded, Retained: j.Retained}}
		if j.Paths != nil {
			r.Rewrite.Paths = *j.Paths
		}
	case j.Task.Repack != nil:
		if len(old) != 1 {
			return fmt.Errorf("%w: repack result with %d base fragments", ErrTaskFormat, len(old))
		}
		files := make([]*tablepb.DataFile, len(j.Files))
		for i, b := range j.Files {
			files[i] = &tablepb.DataFile{}
			if err := proto.Unmarshal(b, files[i]); err != nil {
				return fmt.Errorf("%w: files: %v", ErrTaskFormat, err)
			}
		}
		*r = Result{Repack: &RepackOutput{Repack: j.Task.Repack, Result: &RepackResult{Base: old[0], Files: files}, Outputs: j.Written,
			BytesRead: j.BytesRead, BytesWritten: j.BytesWritten, Copied: j.Copied, Reencoded: j.Reencoded}}
		if j.Paths != nil {
			r.Repack.Paths = *j.Paths
		}
	case j.Task.Remap != nil:
		if j.Remap == nil || len(j.Remap.NewUUID) != 16 {
			return fmt.Errorf("%w: remap result without its new segment", ErrTaskFormat)
		}
		j.Remap.Remap = j.Task.Remap
		*r = Result{Remap: j.Remap}
	case j.Task.CatchUp != nil:
		if len(j.Indices) == 0 {
			return fmt.Errorf("%w: catch-up result without its segment", ErrTaskFormat)
		}
		segs := make([]*tablepb.IndexMetadata, len(j.Indices))
		for i, b := range j.Indices {
			segs[i] = &tablepb.IndexMetadata{}
			if err := proto.Unmarshal(b, segs[i]); err != nil {
				return fmt.Errorf("%w: segment: %v", ErrTaskFormat, err)
			}
		}
		*r = Result{CatchUp: &CatchUpOutput{CatchUp: j.Task.CatchUp, Segment: segs[0], Removed: segs[1:], Merged: j.Merged, Base: old, Outputs: j.Written,
			Rows: j.RowsWritten, Dropped: j.RowsRead - j.RowsWritten, BytesRead: j.BytesRead, BytesWritten: j.BytesWritten, Drift: j.Drift}}
	default:
		return fmt.Errorf("%w: result without a task", ErrTaskFormat)
	}
	if join != nil {
		switch {
		case r.Rewrite != nil:
			r.Rewrite.Join = join
		case r.Repack != nil:
			r.Repack.Join = join
		case r.Remap != nil:
			r.Remap.Join = join
		case r.CatchUp != nil:
			r.CatchUp.Join = join
		}
	}
	return nil
}

// RewriteOutput is what an executed rewrite task hands to the committer.
type RewriteOutput struct {
	Rewrite *RewriteTask
	Group   *RewriteGroup
	// Outputs are the store keys of every file the task wrote; the committer
	// deletes them if the task is not committed.
	Outputs      []string
	RowsRead     uint64
	RowsWritten  uint64
	BytesRead    int64
	BytesWritten int64
	// Copied counts new files made by page copy (rewrite_copy.go),
	// Reencoded those written by decoding and re-encoding rows.
	Copied, Reencoded int
	// Paths counts the pages of page-copied files by how they were made
	// (copied, filtered, re-encoded, dropped).
	Paths lancewrite.PathStats
	// Join is set when the rewrite was run in slices and this is the
	// join's output (Task is then the join).
	Join *JoinTask
	// Retained (index_coverage = defer) are the old row addresses the
	// rewrite kept, in the order it wrote them, as a serialized 64-bit
	// Roaring treemap: the group's entry in the fragment reuse index. Nil
	// when the rewrite does not defer.
	Retained []byte
}

// RepackOutput is what an executed repack task hands to the committer.
type RepackOutput struct {
	Repack  *RepackTask
	Result  *RepackResult
	Outputs []string
	// Copied counts new files made by page copy; Reencoded those that fell
	// back to decode/re-encode.
	Copied, Reencoded int
	BytesRead         int64
	BytesWritten      int64
	// Join is set when the repack was run in slices and this is the
	// join's output (Task is then the join).
	Join *JoinTask
	// Paths counts a join's copied pages.
	Paths lancewrite.PathStats
}
