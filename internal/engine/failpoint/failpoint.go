package failpoint

import (
	"context"
	"os"
	"sync"
	"syscall"
)

// Failpoints for crash tests: when the environment variable LANCED_FAILPOINT
// names a point (optionally "name:N" for its N-th hit), the process kills
// itself with SIGKILL there, as a power cut or an OOM kill would. Unset (the
// normal case) they cost one comparison.
//
// Points: rewrite.file (a rewrite data file was uploaded), repack.file (a
// repack file was uploaded), commit.txn (the .txn file is written, the
// manifest not yet), commit.manifest (the manifest is written, the hint and
// verification not yet), remap.reserve (before the ReserveFragments commit of
// an index remap), remap.start (a remap task begins, nothing written),
// remap.written (a remapped segment is fully written, in one task or by
// the join of its parts), remap.part (a part of a remap in parts wrote its
// pieces, its result not yet handed on), remap.commit (every
// remap of a commit group is written, the Rewrite commit not begun; in the
// daemon, on the coordinator once the workers' remap results are in),
// catchup.start (a catch-up task begins, nothing written), catchup.file (a
// file of a catch-up segment was uploaded), catchup.written (a catch-up
// segment is fully written and its entry built, not committed), slice.piece
// (a piece file of a row slice or of a remap part was uploaded), slice.done
// (every piece of a slice is written, its result not yet handed on),
// join.file (a joined file of a sliced task or of a remap in parts was
// uploaded), catchup.delta (a delta task of a catch-up in parts wrote its
// delta segment, its result not yet handed on).
var failpointSpec = sync.OnceValues(func() (string, int) {
	v := os.Getenv("LANCED_FAILPOINT")
	if v == "" {
		return "", 0
	}
	name, n := v, 1
	for i := len(v) - 1; i > 0; i-- {
		if v[i] == ':' {
			name = v[:i]
			n = 0
			for _, c := range v[i+1:] {
				if c < '0' || c > '9' {
					return v, 1
				}
				n = n*10 + int(c-'0')
			}
			break
		}
	}
	return name, n
})

var failpointHits sync.Map // name -> *int

var failpointMu sync.Mutex

func Hit(name string) {
	want, n := failpointSpec()
	if want == "" || want != name {
		return
	}
	failpointMu.Lock()
	v, _ := failpointHits.LoadOrStore(name, new(int))
	c := v.(*int)
	*c++
	hit := *c == n
	failpointMu.Unlock()
	if hit {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}

type hookKey struct{ name string }

// WithHook returns a context under which HitContext(ctx, name) calls fn:
// tests use it to land a concurrent commit at an exact point of a run (a
// context, not a global, so parallel tests do not see each other's hooks).
func WithHook(ctx context.Context, name string, fn func()) context.Context {
	return context.WithValue(ctx, hookKey{name}, fn)
}

// HitContext is Hit, then the hook WithHook set on ctx for the point.
func HitContext(ctx context.Context, name string) {
	Hit(name)
	if fn, ok := ctx.Value(hookKey{name}).(func()); ok {
		fn()
	}
}
