package format

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (or a lower-level error) so callers can classify with errors.Is.
var (
	// ErrCorrupt marks bytes that do not follow the Lance format.
	ErrCorrupt = errors.New("corrupt")
	// ErrNotManifest is returned by ParseManifestName for names in
	// _versions/ that are not a committed version (detached versions,
	// staging and temporary files, anything else).
	ErrNotManifest = errors.New("not a manifest name")
	// ErrMixedNaming is returned when a listing mixes V1 and V2 manifest
	// names, which Lance refuses too.
	ErrMixedNaming = errors.New("mixed manifest naming schemes")
	// ErrUnsupportedFeature is wrapped by *FeatureError: the table uses a
	// feature flag lanced does not know.
	ErrUnsupportedFeature = errors.New("unsupported feature flags")
)

// corruptf builds "format: <what> <file>: <problem>" wrapping ErrCorrupt.
func corruptf(what, file, problem string, args ...any) error {
	p := fmt.Sprintf(problem, args...)
	if file == "" {
		return fmt.Errorf("format: %s: %s: %w", what, p, ErrCorrupt)
	}
	return fmt.Errorf("format: %s %s: %s: %w", what, file, p, ErrCorrupt)
}
