package job

import (
	"errors"
	"fmt"
)

// FragmentError attributes an error to one fragment and, when known, the
// file it was read from, so a corrupt input quarantines that fragment only.
type FragmentError struct {
	Fragment uint64
	File     string
	Err      error
}

func (e *FragmentError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("fragment %d, file %s: %v", e.Fragment, e.File, e.Err)
	}
	return fmt.Sprintf("fragment %d: %v", e.Fragment, e.Err)
}

func (e *FragmentError) Unwrap() error { return e.Err }

// FragmentErr wraps err with its fragment and file; nil stays nil and an
// error already attributed keeps its attribution.
func FragmentErr(id uint64, file string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FragmentError
	if errors.As(err, &fe) {
		return err
	}
	return &FragmentError{Fragment: id, File: file, Err: err}
}
