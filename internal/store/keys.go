package store

import (
	"fmt"
	"strings"
)

// TempSuffix ends the names of the hidden temp files local writes stage in
// (".<name>.<random>.lanced.tmp" next to the target). A leftover one means a
// process died mid-write; it is never part of a table.
const TempSuffix = ".lanced.tmp"

// checkKey validates an object key: relative, '/'-separated, no empty, "." or
// ".." segments, no NUL, no trailing '/'.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w: %q ends with '/'", ErrInvalidKey, key)
	}
	return checkPath(key)
}

// checkPrefix validates a listing prefix or sub-root: like a key, but it may
// be empty and may end with '/'.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return checkPath(strings.TrimSuffix(prefix, "/"))
}

func checkPath(p string) error {
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return fmt.Errorf("%w: %q is absolute", ErrInvalidKey, p)
	}
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%w: %q contains a control character", ErrInvalidKey, p)
	}
	if strings.Contains(p, `\`) {
		return fmt.Errorf("%w: %q contains a backslash", ErrInvalidKey, p)
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: %q has an empty path segment", ErrInvalidKey, p)
		case ".", "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, p, seg)
		}
	}
	return nil
}
