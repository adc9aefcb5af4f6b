//go:build !linux

package store

import (
	"errors"
	"os"
)

// copyFileRange does not exist here: every copy goes through memory.
func copyFileRange(*os.File, *int64, *os.File, int) (int, error) { return 0, errors.ErrUnsupported }

func copyRangeUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
