package oracle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scenarioNames must match the keys of `scenarios` in build.mjs
// (TestScenarioListMatchesScript checks this).
var scenarioNames = []string{
	"appends",
	"deletes_arrow",
	"deletes_bitmap",
	"backfill",
	"dropped_column",
	"stable_row_ids",
	"v2_0",
	"v1_paths",
	"indexed",
	"tags",
	"branches",
	"compacted",
	"types",
	"text",
	"wide",
}

// Scenarios lists the table shapes Build knows (see README.md).
func Scenarios() []string {
	return append([]string(nil), scenarioNames...)
}

var (
	cacheMu    sync.Mutex
	cacheState = map[string]*cacheEntry{}
	hashOnce   sync.Once
	hashVal    string
	hashErr    error
)

type cacheEntry struct {
	once sync.Once
	path string // <cache>/<scenario>.lance
	err  error
}

// scriptHash identifies the scripts and the pinned npm packages, so a cache
// built by other scripts is never reused.
func scriptHash() (string, error) {
	hashOnce.Do(func() {
		h := sha256.New()
		names, err := filepath.Glob(filepath.Join(Dir(), "*.mjs"))
		if err != nil {
			hashErr = err
			return
		}
		names = append(names, filepath.Join(Dir(), "package-lock.json"))
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				hashErr = fmt.Errorf("oracle: hash scripts: %w", err)
				return
			}
			fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(n), len(b))
			h.Write(b)
		}
		hashVal = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return hashVal, hashErr
}

// CacheDir is where built scenario tables are kept for reuse by every test
// binary with the same scripts.
func CacheDir() (string, error) {
	h, err := scriptHash()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(os.TempDir(), "lanced-oracle-cache")
	pruneOnce.Do(func() { pruneStaleCaches(parent, h) })
	return filepath.Join(parent, h), nil
}

var pruneOnce sync.Once

// staleCacheAge is how long a cache of other scripts is kept.
const staleCacheAge = 24 * time.Hour

// pruneStaleCaches removes caches of other script versions untouched for a
// day, so edits to the scripts do not pile up tables in the temp dir.
func pruneStaleCaches(parent, current string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == current {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleCacheAge {
			continue
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

func knownScenario(s string) bool {
	for _, n := range scenarioNames {
		if n == s {
			return true
		}
	}
	return sizedPattern.MatchString(s)
}

var sizedPattern = regexp.MustCompile(`^sized-\d+x\d+-v\d+-t\d+-d\d+$`)

// Sized describes a table of chosen size for benchmarks; pass
// Sized{...}.Scenario() to Build (cached like the named scenarios). Columns:
// the base schema (id, category, value, note), plus "vec"
// fixed_size_list<float32, VectorDim> when VectorDim > 0 and "body" text of
// about TextWords words when TextWords > 0. One createTable/add per fragment;
// then, when DeleteEvery > 0, one delete of id % DeleteEvery = 0.
type Sized struct {
	Fragments       int
	RowsPerFragment int
	VectorDim       int
	TextWords       int
	DeleteEvery     int
}

// Scenario is the scenario name build.mjs understands for s.
func (s Sized) Scenario() string {
	return fmt.Sprintf("sized-%dx%d-v%d-t%d-d%d", s.Fragments, s.RowsPerFragment, s.VectorDim, s.TextWords, s.DeleteEvery)
}

// Build makes a table of the given scenario with real Lance and returns its
// location: dest/<scenario>.lance. dest is a local directory (plain path or
// file://; the result is then a plain absolute path) or an object-store
// prefix such as s3://lance/some/prefix (the result is then a URI). Local
// tables without options are copied from a cache built once per scenario
// and script hash; with storage options (which real Lance also reads for
// new tables: new_table_data_storage_version, new_table_enable_*) and on
// object stores they are built in place, uncached. A scenario's own
// new_table_* settings win over the caller's.
func Build(t testing.TB, scenario, dest string, opts ...Options) string {
	t.Helper()
	Require(t)
	if !knownScenario(scenario) {
		t.Fatalf("oracle: unknown scenario %q; known: %s", scenario, strings.Join(scenarioNames, ", "))
	}
	if isRemote(dest) {
		uri := strings.TrimRight(dest, "/") + "/" + scenario + ".lance"
		run(t, "build.mjs", scenario, uri, optionsJSON(opts))
		return uri
	}
	if len(mergeOptions(opts)) > 0 {
		// Options can change the shape (e.g. new_table_data_storage_version
		// "2.2"): build in place, uncached.
		dir, err := filepath.Abs(localPath(dest))
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		out := filepath.Join(dir, scenario+".lance")
		run(t, "build.mjs", scenario, out, optionsJSON(opts))
		return out
	}
	src, err := cachedScenario(t, scenario)
	if err != nil {
		t.Fatalf("%v", err)
	}
	dir, err := filepath.Abs(localPath(dest))
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	out := filepath.Join(dir, scenario+".lance")
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("oracle: build %s: %s already exists", scenario, out)
	}
	if err := copyTree(src, out); err != nil {
		t.Fatalf("oracle: copy %s to %s: %v", src, out, err)
	}
	return out
}

// cachedScenario returns the cached table for scenario, building it once.
func cachedScenario(t testing.TB, scenario string) (string, error) {
	cacheMu.Lock()
	e, ok := cacheState[scenario]
	if !ok {
		e = &cacheEntry{}
		cacheState[scenario] = e
	}
	cacheMu.Unlock()
	e.once.Do(func() {
		ctx, cancel := testContext(t)
		defer cancel()
		e.path, e.err = buildIntoCache(ctx, scenario)
	})
	return e.path, e.err
}

const doneMarker = ".lanced-oracle-complete"

func buildIntoCache(ctx context.Context, scenario string) (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("oracle: cache dir: %w", err)
	}
	// One builder per scenario across all test binaries: the others wait
	// for it instead of building the same table on the shared CPUs.
	unlock, err := lockFile(filepath.Join(root, scenario+".lock"))
	if err != nil {
		return "", fmt.Errorf("oracle: cache lock: %w", err)
	}
	defer unlock()

	final := filepath.Join(root, scenario+".lance")
	marker := filepath.Join(root, scenario+doneMarker)
	if _, err := os.Stat(marker); err == nil {
		if _, err := os.Stat(filepath.Join(final, "_versions")); err == nil {
			return final, nil
		}
		// Marked but gone (a tmp cleaner): build again.
		if err := os.Remove(marker); err != nil {
			return "", fmt.Errorf("oracle: cache marker: %w", err)
		}
	}
	// A leftover from a builder that died before marking.
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("oracle: cache %s: %w", final, err)
	}
	tmp, err := os.MkdirTemp(root, "build-"+scenario+"-")
	if err != nil {
		return "", fmt.Errorf("oracle: cache dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, scenario+".lance")
	if _, err := runNode(ctx, "build.mjs", scenario, built, "{}"); err != nil {
		return "", fmt.Errorf("oracle: build scenario %s: %w", scenario, err)
	}
	if err := os.Rename(built, final); err != nil {
		return "", fmt.Errorf("oracle: cache %s: %w", final, err)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return "", fmt.Errorf("oracle: cache marker: %w", err)
	}
	return final, nil
}

// lockFile takes an exclusive flock(2) on path, waiting for other holders.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// copyTree copies a directory of regular files.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		return copyFile(p, target)
	})
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}
