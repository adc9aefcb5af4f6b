package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

func writeAtomic(t *testing.T, path, src string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func target(r *Reloader) uint64 {
	return r.Current().Resolve("s3://a/t", nil).Compaction.TargetRowsPerFragment.Value
}

func TestReloaderHotReload(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.hcl")
	writeAtomic(t, p, "defaults {\n  compaction { target_rows_per_fragment = 100 }\n}\n")
	r, diags := NewReloader(dir)
	if diags.HasErrors() || r == nil {
		t.Fatalf("initial load: %v", diags)
	}
	type result struct {
		diags   hcl.Diagnostics
		applied bool
	}
	results := make(chan result, 16)
	r.OnReload = func(d hcl.Diagnostics, applied bool) { results <- result{d, applied} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Watch(ctx, 50*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// Let the watcher register before the first change.
	time.Sleep(100 * time.Millisecond)

	wait := func() result {
		t.Helper()
		select {
		case res := <-results:
			return res
		case <-time.After(10 * time.Second):
			t.Fatal("no reload after a policy change")
		}
		return result{}
	}

	writeAtomic(t, p, "defaults {\n  compaction { target_rows_per_fragment = 200 }\n}\n")
	if res := wait(); !res.applied || target(r) != 200 {
		t.Fatalf("good edit: applied=%v target=%d diags=%v", res.applied, target(r), res.diags)
	}

	writeAtomic(t, p, "defaults {\n  compaction { target_rows_per_fragment = \"lots\" }\n}\n")
	res := wait()
	if res.applied || !res.diags.HasErrors() {
		t.Fatalf("broken edit applied=%v diags=%v", res.applied, res.diags)
	}
	if d := res.diags[0]; d.Subject == nil || d.Subject.Filename != p || d.Subject.Start.Line != 2 {
		t.Fatalf("diagnostic does not point at the file: %v", d)
	}
	if target(r) != 200 {
		t.Fatalf("broken edit replaced the good set: target=%d", target(r))
	}

	// SIGHUP path: an explicit reload after fixing the file.
	if err := os.WriteFile(p, []byte("defaults {\n  compaction { target_rows_per_fragment = 300 }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, ok := r.Reload(); !ok || target(r) != 300 {
		t.Fatalf("explicit reload: ok=%v target=%d diags=%v", ok, target(r), d)
	}
}

func TestNewReloaderRefusesBrokenDir(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "a.hcl"), `tabel "x" {}`)
	r, diags := NewReloader(dir)
	if r != nil || !diags.HasErrors() {
		t.Fatalf("broken directory loaded: %v", diags)
	}
}
