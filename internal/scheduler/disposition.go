package scheduler

import (
	"context"
	"errors"
	"time"
)

// Sentinels an Executor (or Committer) returns, directly or wrapped, to tell
// the scheduler what became of a task. Errors the scheduler does not
// recognise are treated as transient until MaxDeliver runs out.
var (
	// ErrStale: the task's inputs were superseded (its read version's
	// fragments are gone); the newer version is planned afresh.
	ErrStale = errors.New("task inputs superseded")
	// ErrIncompatible: the task can never succeed on this table (unknown
	// format features, a conflicting concurrent operation).
	ErrIncompatible = errors.New("task incompatible with table")
	// ErrInvalidTask: the task itself is malformed or from an unknown release.
	ErrInvalidTask = errors.New("invalid task")
	// ErrCorrupt: the table's data or metadata is corrupt or an invariant
	// failed; the table is held until an operator releases it.
	ErrCorrupt = errors.New("table corrupt")
)

// transientError marks an error as worth retrying with a delay.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// Transient marks err as transient: the task is redelivered after a backoff.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

// Outcome is what became of one task execution.
type Outcome int

// The outcomes: done, stale (dropped), retried with backoff, abandoned,
// corrupt (the table is held), and handed back at shutdown.
const (
	OutcomeDone Outcome = iota
	OutcomeStale
	OutcomeRetried
	OutcomeAbandoned
	OutcomeCorrupt
	OutcomeShutdown
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeStale:
		return "stale"
	case OutcomeRetried:
		return "retried"
	case OutcomeAbandoned:
		return "abandoned"
	case OutcomeCorrupt:
		return "corrupt"
	case OutcomeShutdown:
		return "shutdown"
	}
	return "unknown"
}

// Classifier maps errors from other packages (store codes, engine and
// format sentinels) onto outcomes. It returns ok=false for errors it does
// not know, which then fall through to the scheduler's own rules.
type Classifier func(err error) (o Outcome, ok bool)

// errShutdown is the cancel cause the worker uses when the node drains.
var errShutdown = errors.New("node shutting down")

// disposition maps the error an Executor returned to an outcome. It is the
// one place where outcomes are decided.
func disposition(err error, classify Classifier) Outcome {
	if err == nil {
		return OutcomeDone
	}
	// Shutdown first: a task cut short by a drain is handed back whatever
	// error the engine wrapped the cancellation in.
	if errors.Is(err, errShutdown) || errors.Is(err, context.Canceled) {
		return OutcomeShutdown
	}
	switch {
	case errors.Is(err, ErrCorrupt):
		return OutcomeCorrupt
	case errors.Is(err, ErrStale):
		return OutcomeStale
	case errors.Is(err, ErrIncompatible), errors.Is(err, ErrInvalidTask), errors.Is(err, ErrInvalidTaskEnvelope):
		return OutcomeAbandoned
	}
	if classify != nil {
		if o, ok := classify(err); ok {
			return o
		}
	}
	var te transientError
	if errors.As(err, &te) || errors.Is(err, context.DeadlineExceeded) {
		return OutcomeRetried
	}
	// Unknown errors are retried with backoff; MaxDeliver bounds them and the
	// dead-letter stream keeps what never succeeded.
	return OutcomeRetried
}

// acker is the part of a JetStream message the worker answers through.
type acker interface {
	Ack() error
	Nak() error
	NakWithDelay(time.Duration) error
	TermWithReason(string) error
}

// respond applies an outcome to a message: exactly one ack verb.
func respond(m acker, o Outcome, retryDelay time.Duration) error {
	switch o {
	case OutcomeDone:
		return m.Ack()
	case OutcomeStale:
		return m.TermWithReason("stale")
	case OutcomeRetried:
		return m.NakWithDelay(retryDelay)
	case OutcomeAbandoned:
		return m.TermWithReason("abandoned")
	case OutcomeCorrupt:
		return m.TermWithReason("corrupt")
	default: // OutcomeShutdown
		return m.Nak()
	}
}

// backoff is the delay before the n-th redelivery of a transient failure
// (n counts deliveries so far, from 1): base·2^(n-1), capped.
func backoff(n uint64, base, limit time.Duration) time.Duration {
	d := base
	for i := uint64(1); i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
