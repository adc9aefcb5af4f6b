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
	Counts
	Dropped []Dropped `json:"dropped,omitempty"`
	// Quarantined are fragments found corrupt in this run.
	Quarantined []quarantine.Mark `json:"quarantined,omitempty"`
	// QuarantinedIndices are index segments whose remap failed for good
	// in this run; the fragments they cover are kept from now on.
	QuarantinedIndices []quarantine.IndexMark `json:"quarantined_indices,omitempty"`
	Errors             []string               `json:"errors,omitempty"`
	Duration           string                 `json:"duration"`
}

// Counts are the counters of a Compact run (in its JSON, inline).
type Counts struct {
	FragmentsRemoved  int `json:"fragments_removed"`
	FragmentsAdded    int `json:"fragments_added"`
	FragmentsRepacked int `json:"fragments_repacked"`
	FilesRemoved      int `json:"files_removed"`
	FilesAdded        int `json:"files_added"`
	FilesCopied       int `json:"files_page_copied"`
	FilesReencoded    int `json:"files_reencoded"`
	// Pages counts the pages of page-copied rewrite files by path.
	Pages         lancewrite.PathStats `json:"pages"`
	RowsRewritten uint64               `json:"rows_rewritten"`
	// RowsIndexed are the rows index catch-ups added to indices;
	// IndexSegments the segments they wrote.
	RowsIndexed    uint64    `json:"rows_indexed,omitempty"`
	IndexSegments  int       `json:"index_segments_written,omitempty"`
	BytesRead      int64     `json:"bytes_read"`
	BytesWritten   int64     `json:"bytes_written"`
	TasksCommitted int       `json:"tasks_committed"`
	TasksStale     int       `json:"tasks_stale"`
	TasksFailed    int       `json:"tasks_failed"`
	Conflicts      Conflicts `json:"conflicts"`
}

// Conflicts counts the commit conflicts of a run by their outcome.
type Conflicts struct {
	Rebased      int `json:"rebased"`
	Retryable    int `json:"retryable"`
	Incompatible int `json:"incompatible"`
}

// Add accumulates o into c.
func (c *Counts) Add(o Counts) {
	c.FragmentsRemoved += o.FragmentsRemoved
	c.FragmentsAdded += o.FragmentsAdded
	c.FragmentsRepacked += o.FragmentsRepacked
	c.FilesRemoved += o.FilesRemoved
	c.FilesAdded += o.FilesAdded
	c.FilesCopied += o.FilesCopied
	c.FilesReencoded += o.FilesReencoded
	c.Pages.Add(o.Pages)
	c.RowsRewritten += o.RowsRewritten
	c.RowsIndexed += o.RowsIndexed
	c.IndexSegments += o.IndexSegments
	c.BytesRead += o.BytesRead
	c.BytesWritten += o.BytesWritten
	c.TasksCommitted += o.TasksCommitted
	c.TasksStale += o.TasksStale
	c.TasksFailed += o.TasksFailed
	c.Conflicts.Rebased += o.Conflicts.Rebased
	c.Conflicts.Retryable += o.Conflicts.Retryable
	c.Conflicts.Incompatible += o.Conflicts.Incompatible
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
	s.Counts.Add(jobCounts(j))
}

// jobCounts is the work a committed job did.
func jobCounts(j job.Job) Counts {
	var c Counts
	switch o := j.(type) {
	case *job.RewriteOutput:
		c.FragmentsRemoved = len(o.Group.Old)
		c.FragmentsAdded = len(o.Group.New)
		for _, f := range o.Group.Old {
			c.FilesRemoved += len(f.GetFiles())
			if f.GetDeletionFile() != nil {
				c.FilesRemoved++
			}
		}
		c.FilesAdded = len(o.Group.New)
		c.FilesCopied, c.FilesReencoded = o.Copied, o.Reencoded
		c.Pages = o.Paths
		c.RowsRewritten = o.RowsWritten
		c.BytesRead, c.BytesWritten = o.BytesRead, o.BytesWritten
	case *job.RepackOutput:
		c.FragmentsRepacked = 1
		before := map[string]bool{}
		for _, f := range o.Result.Base.GetFiles() {
			before[f.GetPath()] = true
		}
		for _, f := range o.Result.Files {
			if before[f.GetPath()] {
				delete(before, f.GetPath())
			} else {
				c.FilesAdded++
			}
		}
		c.FilesRemoved = len(before)
		c.FilesCopied, c.FilesReencoded = o.Copied, o.Reencoded
		c.Pages = o.Paths
		c.BytesRead, c.BytesWritten = o.BytesRead, o.BytesWritten
	case *job.CatchUpOutput:
		c.RowsIndexed = o.Rows
		c.IndexSegments = 1
		c.BytesRead, c.BytesWritten = o.BytesRead, o.BytesWritten
	}
	return c
}

// Add adds a later run's counts on the same table to s (the read version
// stays s's).
func (s *Summary) Add(o *Summary) {
	s.VersionsCommitted = append(s.VersionsCommitted, o.VersionsCommitted...)
	s.Counts.Add(o.Counts)
	s.Dropped = append(s.Dropped, o.Dropped...)
	s.Quarantined = append(s.Quarantined, o.Quarantined...)
	s.QuarantinedIndices = append(s.QuarantinedIndices, o.QuarantinedIndices...)
	s.Errors = append(s.Errors, o.Errors...)
}
