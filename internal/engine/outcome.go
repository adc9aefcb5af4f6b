package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/engine/cleanup"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/codec"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/fm"
	"github.com/lanced-dev/lanced/internal/format/index/scalar"
	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/index/vector"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/store"
)

// Outcome is the one thing that becomes of a task that failed with an
// error: the engine's error taxonomy. Classify decides it; `lanced compact`
// and the daemon both act on it.
type Outcome int

const (
	// Retry: transient (the store is unavailable or throttling, a
	// concurrent config change); retried with backoff.
	Retry Outcome = iota
	// Drop: stale (the task's inputs were superseded or are gone); dropped,
	// the table is planned again from its newer version.
	Drop
	// Abandon: the task itself is malformed or from another release; it
	// can never succeed as sent and is dropped with the reason.
	Abandon
	// Skip: unsupported (a layout, encoding or feature this release does
	// not handle); skipped with the reason, and not planned again until
	// the table changes.
	Skip
	// Quarantine: corrupt input; the fragment (or, for an index file, the
	// index segment, whose covered fragments are then kept) is quarantined
	// with the file and reason (engine/quarantine) and the rest of the
	// table keeps being maintained; without a fragment to blame, the table
	// is held.
	Quarantine
	// Hold: an invariant failed or an operator holds the table; nothing
	// more is done to it until an operator releases it.
	Hold
)

func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case Drop:
		return "drop"
	case Abandon:
		return "abandon"
	case Skip:
		return "skip"
	case Quarantine:
		return "quarantine"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Classify maps an error from the engine (and the format and store layers
// under it) onto its outcome. Unknown errors are retried: the daemon
// bounds their redeliveries, `lanced compact` reports them.
func Classify(err error) Outcome {
	switch {
	case errors.Is(err, job.ErrInvariant), errors.Is(err, hold.ErrHeld):
		return Hold
	case errors.Is(err, format.ErrCorrupt), errors.Is(err, lancefile.ErrCorrupt), errors.Is(err, codec.ErrCorrupt),
		errors.Is(err, vector.ErrCorrupt), errors.Is(err, text.ErrCorrupt), errors.Is(err, scalar.ErrCorrupt), errors.Is(err, fm.ErrCorrupt), errors.Is(err, lancefile.ErrRowOutOfRange),
		errors.Is(err, cleanup.ErrCleanupManifestUnreadable):
		return Quarantine
	case errors.Is(err, job.ErrUnsupported), errors.Is(err, format.ErrUnsupportedFeature), errors.Is(err, format.ErrMixedNaming),
		errors.Is(err, format.ErrExternalRowMeta), errors.Is(err, format.ErrNotManifest),
		errors.Is(err, lancefile.ErrUnsupportedVersion), errors.Is(err, lancefile.ErrUnsupportedEncoding),
		errors.Is(err, lancewrite.ErrUnsupportedType), errors.Is(err, lancewrite.ErrCopyUnsupported),
		errors.Is(err, vector.ErrUnsupported), errors.Is(err, vector.ErrSplit), errors.Is(err, text.ErrUnsupported), errors.Is(err, text.ErrTooLarge), errors.Is(err, scalar.ErrUnsupported), errors.Is(err, scalar.ErrTooLarge),
		errors.Is(err, fm.ErrUnsupported), errors.Is(err, fm.ErrTooLarge),
		errors.Is(err, index.ErrNoRemapper), errors.Is(err, index.ErrReuseExternal), errors.Is(err, index.ErrReuseTooLarge),
		errors.Is(err, cleanup.ErrCleanupBranches), errors.Is(err, cleanup.ErrCleanupBasePaths), errors.Is(err, cleanup.ErrCleanupTaggedOld):
		return Skip
	case errors.Is(err, job.ErrInvalidTask), errors.Is(err, job.ErrTaskFormat), errors.Is(err, job.ErrMixedTasks),
		errors.Is(err, lancewrite.ErrTypeMismatch), errors.Is(err, lancewrite.ErrClosed), errors.Is(err, store.ErrInvalidKey):
		return Abandon
	case errors.Is(err, job.ErrStale), errors.Is(err, table.ErrNoTable), errors.Is(err, table.ErrNoTransaction),
		errors.Is(err, cleanup.ErrCleanupNoVersions), errors.Is(err, store.ErrClosed), errors.Is(err, context.Canceled):
		return Drop
	case errors.Is(err, table.ErrConfigConflict), errors.Is(err, store.ErrPreconditionFailed), errors.Is(err, context.DeadlineExceeded):
		return Retry
	}
	switch store.CodeOf(err) {
	case store.Unavailable, store.Throttled:
		return Retry
	case store.PermissionDenied:
		return Skip
	case store.NotFound:
		// An input that vanished was cleaned up under a newer version.
		return Drop
	}
	return Retry
}

// FragmentError attributes an error to one fragment and file (see
// job.FragmentError).
type FragmentError = job.FragmentError
