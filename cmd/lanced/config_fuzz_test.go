package main

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadConfig: any config file gives a config or diagnostics, never a
// panic, and every error diagnostic points into the file.
func FuzzLoadConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/config/*.hcl")
	more, _ := filepath.Glob("testdata/config/invalid/*.hcl")
	for _, p := range append(append(seeds, more...), "../../systemd/lanced.hcl") {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, src []byte) {
		path := filepath.Join(dir, "lanced.hcl")
		if err := os.WriteFile(path, src, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, diags := loadConfigFile(path)
		for _, d := range diags {
			if d.Subject != nil && d.Subject.Filename != path {
				t.Fatalf("diagnostic %q names %q", d.Summary, d.Subject.Filename)
			}
		}
	})
}
