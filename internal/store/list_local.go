package store

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// attrsSuffix ends fileblob's attribute sidecar files, which a listing
// skips like fileblob's own does.
const attrsSuffix = ".attrs"

// listLocal lists a file:// bucket from its directories: keys come in key
// order, each entry is stat'ed once, and nothing else is opened (fileblob's
// listing also tries to open a "<file>.attrs" sidecar for every object). An
// entry that vanishes between reading its directory and the stat is
// skipped. With oneLevel, a sub-directory is reported (IsDir, key ending in
// '/') when it holds a file somewhere below, as fileblob reports it.
func (b *Bucket) listLocal(prefix string, oneLevel bool, fn func(Object) error) error {
	full := b.prefix + prefix
	dirKey, namePrefix := "", full
	if i := strings.LastIndex(full, "/"); i >= 0 {
		dirKey, namePrefix = full[:i+1], full[i+1:]
	}
	return b.walkLocal(dirKey, namePrefix, oneLevel, fn)
}

// localListError is a file system error of a local listing, as opposed to
// an error of the listing's callback, which is returned as is.
type localListError struct{ err error }

func (e localListError) Error() string { return e.err.Error() }

// walkLocal lists the entries of the directory of key prefix dirKey whose
// names start with namePrefix.
func (b *Bucket) walkLocal(dirKey, namePrefix string, oneLevel bool, fn func(Object) error) error {
	dir := filepath.Join(b.localDir, filepath.FromSlash(dirKey))
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return localListError{err}
	}
	// Key order: a directory's entries sort as "<name>/".
	keyName := func(e fs.DirEntry) string {
		if e.IsDir() {
			return e.Name() + "/"
		}
		return e.Name()
	}
	slices.SortFunc(ents, func(x, y fs.DirEntry) int { return strings.Compare(keyName(x), keyName(y)) })
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, namePrefix) || strings.HasSuffix(name, attrsSuffix) {
			continue
		}
		key := dirKey + name
		if e.IsDir() {
			if !oneLevel {
				if err := b.walkLocal(key+"/", "", false, fn); err != nil {
					return err
				}
				continue
			}
			if ok, err := holdsFile(filepath.Join(dir, name)); err != nil {
				return localListError{err}
			} else if ok {
				if err := fn(Object{Key: strings.TrimPrefix(key+"/", b.prefix), IsDir: true}); err != nil {
					return err
				}
			}
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return localListError{err}
		}
		if err := fn(Object{Key: strings.TrimPrefix(key, b.prefix), Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// holdsFile says whether the directory holds a file (not an attribute
// sidecar) somewhere below; it reads the directories in batches and stops
// at the first file.
func holdsFile(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(64)
		for _, e := range ents {
			if !e.IsDir() {
				if !strings.HasSuffix(e.Name(), attrsSuffix) {
					return true, nil
				}
				continue
			}
			if ok, err := holdsFile(filepath.Join(dir, e.Name())); err != nil || ok {
				return ok, err
			}
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}
