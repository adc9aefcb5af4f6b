package engine

import (
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
)

// Summary reports a Compact run; it is the JSON `lanced compact` prints.
type Summary struct {
	Table             string   `json:"table"`
	ReadVersion       uint64   `json:"read_version"`
	VersionsCommitted []uint64 `json:"versions_committed"`
	FragmentsRemoved  int      `json:"fragments_removed"`
	FragmentsAdded    int      `json:"fragments_added"`
	FragmentsRepacked int      `json:"fragments_repacked"`
	FilesRemoved      int      `json:"files_removed"`
	FilesAdded        int      `json:"files_added"`
	FilesCopied       int      `json:"files_page_copied"`
	FilesReencoded    int      `json:"files_reencoded"`
	// Pages counts the pages of page-copied rewrite files by path.
	Pages         lancewrite.PathStats `json:"pages"`
	RowsRewritten uint64               `json:"rows_rewritten"`
	// RowsIndexed are the rows index catch-ups added to indices;
	// IndexSegments the segments they wrote.
	RowsIndexed    uint64 `json:"rows_indexed,omitempty"`
	IndexSegments  int    `json:"index_segments_written,omitempty"`
	BytesRead      int64  `json:"bytes_read"`
	BytesWritten   int64  `json:"bytes_written"`
	TasksCommitted int    `json:"tasks_committed"`
	TasksStale     int    `json:"tasks_stale"`
	TasksFailed    int    `json:"tasks_failed"`
	Conflicts      struct {
		Rebased      int `json:"rebased"`
		Retryable    int `json:"retryable"`
		Incompatible int `json:"incompatible"`
	} `json:"conflicts"`
	Dropped []Dropped `json:"dropped,omitempty"`
	// Quarantined are fragments found corrupt in this run.
	Quarantined []quarantine.Mark `json:"quarantined,omitempty"`
	// QuarantinedIndices are index segments whose remap failed for good
	// in this run; the fragments they cover are kept from now on.
	QuarantinedIndices []quarantine.IndexMark `json:"quarantined_indices,omitempty"`
	Errors             []string               `json:"errors,omitempty"`
	Duration           string                 `json:"duration"`
}

func (s *Summary) noteReport(r *CommitReport) {
	if r == nil {
		return
	}
	if r.Version != 0 {
		s.VersionsCommitted = append(s.VersionsCommitted, r.Version)
	}
	s.TasksCommitted += len(r.Committed)
	s.Conflicts.Rebased += r.Rebased
	for _, d := range r.Dropped {
		switch d.Verdict {
		case job.Incompatible:
			s.Conflicts.Incompatible++
		default:
			s.Conflicts.Retryable++
		}
	}
	s.Dropped = append(s.Dropped, r.Dropped...)
}

// noteJob adds a committed job's work to the summary.
func (s *Summary) noteJob(j job.Job) {
	switch o := j.(type) {
	case *job.RewriteOutput:
		s.FragmentsRemoved += len(o.Group.Old)
		s.FragmentsAdded += len(o.Group.New)
		for _, f := range o.Group.Old {
			s.FilesRemoved += len(f.GetFiles())
			if f.GetDeletionFile() != nil {
				s.FilesRemoved++
			}
		}
		s.FilesAdded += len(o.Group.New)
		s.FilesCopied += o.Copied
		s.FilesReencoded += o.Reencoded
		s.Pages.Add(o.Paths)
		s.RowsRewritten += o.RowsWritten
		s.BytesRead += o.BytesRead
		s.BytesWritten += o.BytesWritten
	case *job.RepackOutput:
		s.FragmentsRepacked++
		before := map[string]bool{}
		for _, f := range o.Result.Base.GetFiles() {
			before[f.GetPath()] = true
		}
		for _, f := range o.Result.Files {
			if before[f.GetPath()] {
				delete(before, f.GetPath())
			} else {
				s.FilesAdded++
			}
		}
		s.FilesRemoved += len(before)
		s.FilesCopied += o.Copied
		s.FilesReencoded += o.Reencoded
		s.BytesRead += o.BytesRead
		s.BytesWritten += o.BytesWritten
	case *job.CatchUpOutput:
		s.RowsIndexed += o.Rows
		s.IndexSegments++
		s.BytesRead += o.BytesRead
		s.BytesWritten += o.BytesWritten
	}
}

// Add adds a later run's counts on the same table to s (the read version
// stays s's).
func (s *Summary) Add(o *Summary) {
	s.VersionsCommitted = append(s.VersionsCommitted, o.VersionsCommitted...)
	s.FragmentsRemoved += o.FragmentsRemoved
	s.FragmentsAdded += o.FragmentsAdded
	s.FragmentsRepacked += o.FragmentsRepacked
	s.FilesRemoved += o.FilesRemoved
	s.FilesAdded += o.FilesAdded
	s.FilesCopied += o.FilesCopied
	s.FilesReencoded += o.FilesReencoded
	s.Pages.Add(o.Pages)
	s.RowsRewritten += o.RowsRewritten
	s.RowsIndexed += o.RowsIndexed
	s.IndexSegments += o.IndexSegments
	s.BytesRead += o.BytesRead
	s.BytesWritten += o.BytesWritten
	s.TasksCommitted += o.TasksCommitted
	s.TasksStale += o.TasksStale
	s.TasksFailed += o.TasksFailed
	s.Conflicts.Rebased += o.Conflicts.Rebased
	s.Conflicts.Retryable += o.Conflicts.Retryable
	s.Conflicts.Incompatible += o.Conflicts.Incompatible
	s.Dropped = append(s.Dropped, o.Dropped...)
	s.Quarantined = append(s.Quarantined, o.Quarantined...)
	s.QuarantinedIndices = append(s.QuarantinedIndices, o.QuarantinedIndices...)
	s.Errors = append(s.Errors, o.Errors...)
}
