package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options carries the storage options real Lance gets for a table
// (object_store keys such as aws_endpoint, allow_http). Empty for local
// paths.
type Options struct {
	StorageOptions map[string]string
}

// nodeTimeout bounds one node invocation; a hang fails the test instead of
// the whole binary.
const nodeTimeout = 4 * time.Minute

// nodeSlots limits concurrent node processes per test binary (the machine
// has two cores and many packages run tests at once).
var nodeSlots = make(chan struct{}, 2)

var (
	dirOnce sync.Once
	dirPath string
)

// Dir returns the directory holding the oracle scripts and node_modules.
func Dir() string {
	dirOnce.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if ok {
			dirPath = filepath.Dir(file)
		}
	})
	return dirPath
}

// Available reports whether node and the installed oracle are present,
// with the reason when not.
func Available() (bool, string) {
	if _, err := exec.LookPath("node"); err != nil {
		return false, "node not found in PATH"
	}
	d := Dir()
	if d == "" {
		return false, "cannot locate testenv/oracle sources"
	}
	if _, err := os.Stat(filepath.Join(d, "node_modules", "@lancedb", "lancedb", "package.json")); err != nil {
		return false, fmt.Sprintf("%s/node_modules/@lancedb/lancedb is missing", d)
	}
	return true, ""
}

// Require skips under -short and fails the test when node or the npm
// oracle is missing (run `make oracle`).
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("oracle: skipped under -short (needs node and real Lance)")
	}
	if ok, why := Available(); !ok {
		t.Fatalf("oracle: %s; run make oracle", why)
	}
}

func mergeOptions(opts []Options) map[string]string {
	m := map[string]string{}
	for _, o := range opts {
		for k, v := range o.StorageOptions {
			m[k] = v
		}
	}
	return m
}

func optionsJSON(opts []Options) string {
	b, err := json.Marshal(mergeOptions(opts))
	if err != nil {
		panic(err) // map[string]string always marshals
	}
	return string(b)
}

// nodeError is a failed script run, with its stderr.
type nodeError struct {
	script string
	args   []string
	err    error
	stderr string
}

func (e *nodeError) Error() string {
	return fmt.Sprintf("oracle: node %s %s: %v\n%s", e.script, strings.Join(e.args, " "), e.err, e.stderr)
}

// runNode runs one oracle script and returns its stdout.
func runNode(ctx context.Context, script string, args ...string) ([]byte, error) {
	if ok, why := Available(); !ok {
		return nil, fmt.Errorf("oracle: %s; run make oracle", why)
	}
	select {
	case nodeSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-nodeSlots }()
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	if serverEnabled() {
		s, err := getServer()
		if err != nil {
			return nil, err
		}
		return s.call(ctx, script, args)
	}
	return runProcess(ctx, script, args...)
}

// runProcess runs one script in a fresh node process.
func runProcess(ctx context.Context, script string, args ...string) ([]byte, error) {
	if ok, why := Available(); !ok {
		return nil, fmt.Errorf("oracle: %s; run make oracle", why)
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(Dir(), script)}, args...)...)
	cmd.Dir = Dir()
	cmd.Env = nodeEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		return stdout.Bytes(), &nodeError{script: script, args: args, err: err, stderr: trimLog(stderr.String())}
	}
	return stdout.Bytes(), nil
}

func nodeEnv() []string {
	return append(os.Environ(),
		"LANCE_INCLUDE_VECTOR_CENTROIDS=false", // silences a warning from indexStats
		"NO_COLOR=1",
	)
}

// trimLog drops Lance's WARN lines that are noise in an error message and
// keeps the tail.
func trimLog(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, " WARN ") && !strings.Contains(line, "oracle:") {
			continue
		}
		keep = append(keep, line)
	}
	out := strings.TrimSpace(strings.Join(keep, "\n"))
	if len(out) > 8000 {
		out = "…" + out[len(out)-8000:]
	}
	return out
}

// testContext returns a context that ends with the test's deadline, if any.
func testContext(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), dl)
		}
	}
	return context.WithCancel(context.Background())
}

// run is runNode for tests: it fails the test on error.
func run(t testing.TB, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := testContext(t)
	defer cancel()
	out, err := runNode(ctx, script, args...)
	if err != nil {
		var ne *nodeError
		if errors.As(err, &ne) {
			t.Fatalf("%v", ne)
		}
		t.Fatalf("oracle: %v", err)
	}
	return out
}

// isRemote reports whether uri names an object store rather than a local path.
func isRemote(uri string) bool {
	i := strings.Index(uri, "://")
	return i > 0 && !strings.HasPrefix(uri, "file://")
}

// localPath strips a file:// scheme.
func localPath(uri string) string {
	if p, ok := strings.CutPrefix(uri, "file://"); ok {
		return p
	}
	return uri
}

// nodeURI turns a table URI into what the scripts accept: local paths
// plain, object-store URIs unchanged.
func nodeURI(uri string) string {
	if isRemote(uri) {
		return uri
	}
	return localPath(uri)
}
