package watch

import "github.com/lanced-dev/lanced/internal/watch/event"

// The decoders and the allow-list live in internal/watch/event (pure, fuzzed
// on its own); these aliases are the package's public names for them.
type (
	// ObjectEvent is a decoded object-store notification.
	ObjectEvent = event.ObjectEvent
	// Roots is the allow-list of table roots.
	Roots = event.Roots
	// Root is one allow-listed location.
	Root = event.Root
)

// URI schemes of ObjectEvent.Scheme.
const (
	SchemeS3  = event.SchemeS3
	SchemeGCS = event.SchemeGCS
)

var (
	// Decode decodes one message body plus its attributes; see event.Decode.
	Decode = event.Decode
	// ParseRoots parses allow-listed root URIs; see event.ParseRoots.
	ParseRoots = event.ParseRoots
	// ParseRoot parses one root URI.
	ParseRoot = event.ParseRoot
	// NewRoots builds an allow-list from parsed roots.
	NewRoots = event.NewRoots
	// DropReason is the metric label of a Roots.Ref error.
	DropReason = event.DropReason
)

// Errors, re-exported for errors.Is.
var (
	ErrUndecodable  = event.ErrUndecodable
	ErrNotCreated   = event.ErrNotCreated
	ErrNotManifest  = event.ErrNotManifest
	ErrUnsafeKey    = event.ErrUnsafeKey
	ErrOutsideRoots = event.ErrOutsideRoots
	ErrBranch       = event.ErrBranch
)
