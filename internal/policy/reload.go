package policy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/hcl/v2"
)

// Reloader holds the policy set of one directory and swaps it atomically on
// Reload. A reload with errors keeps the previous good set in force and
// reports the diagnostics; readers never see a half-loaded set.
type Reloader struct {
	dir string
	cur atomic.Pointer[Set]

	mu        sync.Mutex // serialises reloads
	lastDiags hcl.Diagnostics
	lastSet   *Set // the set of the last attempt, good or bad (for rendering)

	// OnReload, if set before Watch, is called after every reload attempt
	// with the diagnostics and whether the new set took effect.
	OnReload func(diags hcl.Diagnostics, applied bool)
}

// NewReloader loads dir. It fails (returning the diagnostics) when the
// directory does not yield a valid set: the daemon must not start without
// a good policy.
func NewReloader(dir string) (*Reloader, hcl.Diagnostics) {
	r := &Reloader{dir: dir}
	if diags, ok := r.Reload(); !ok {
		return nil, diags
	}
	return r, r.lastDiags
}

// Dir is the watched directory.
func (r *Reloader) Dir() string { return r.dir }

// Current returns the policy set in force. It never returns nil after a
// successful NewReloader.
func (r *Reloader) Current() *Set { return r.cur.Load() }

// Last returns the diagnostics of the last reload attempt and the set it
// parsed (which may be the rejected one), for rendering.
func (r *Reloader) Last() (*Set, hcl.Diagnostics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastSet, r.lastDiags
}

// Reload re-reads the directory. With errors the current set stays; ok
// reports whether the new set took effect. Call it on SIGHUP.
func (r *Reloader) Reload() (diags hcl.Diagnostics, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, diags := LoadDirNamed(os.DirFS(r.dir), r.dir)
	r.lastDiags, r.lastSet = diags, s
	if diags.HasErrors() {
		return diags, false
	}
	r.cur.Store(s)
	return diags, true
}

// Watch reloads whenever an *.hcl file in the directory changes, until ctx
// ends. Bursts of events (an editor's write-rename dance) are coalesced for
// settle before one reload.
func (r *Reloader) Watch(ctx context.Context, settle time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy directory %s: %w", r.dir, err)
	}
	defer w.Close()
	if err := w.Add(r.dir); err != nil {
		return fmt.Errorf("watch policy directory %s: %w", r.dir, err)
	}
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, open := <-w.Events:
			if !open {
				return nil
			}
			if !strings.HasSuffix(filepath.Base(ev.Name), ".hcl") {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(settle)
			} else {
				timer.Reset(settle)
			}
			fire = timer.C
		case err, open := <-w.Errors:
			if !open {
				return nil
			}
			if r.OnReload != nil {
				r.OnReload(hcl.Diagnostics{{Severity: hcl.DiagWarning, Summary: "Policy watch error", Detail: err.Error()}}, false)
			}
		case <-fire:
			fire = nil
			diags, ok := r.Reload()
			if r.OnReload != nil {
				r.OnReload(diags, ok)
			}
		}
	}
}
