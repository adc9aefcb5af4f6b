package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestConfigAndFlagDurationsTakeDaysAndWeeks: the config file and duration
// flags read durations with the parser policies use.
func TestConfigAndFlagDurationsTakeDaysAndWeeks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lanced.hcl")
	src := `tables = ["tables"]
events {
  debounce  = "1d"
  max_delay = "2w"
}
queue {
  ack_wait = "1.5d"
}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, diags := loadConfigFile(path)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	day := 24 * time.Hour
	if cfg.Debounce != day || cfg.MaxDelay != 14*day || cfg.Queue.AckWait != 36*time.Hour {
		t.Fatalf("debounce %s, max_delay %s, ack_wait %s; want 24h, 336h, 36h", cfg.Debounce, cfg.MaxDelay, cfg.Queue.AckWait)
	}

	for in, want := range map[string]time.Duration{"1d": day, "1.5d": 36 * time.Hour, "2w": 14 * day, "90s": 90 * time.Second} {
		f, _, err := parseRunFlags([]string{"--tables", "./tables", "--debug-task-delay", in}, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("--debug-task-delay %s: %v", in, err)
		}
		if f.taskDelay != want {
			t.Errorf("--debug-task-delay %s = %s, want %s", in, f.taskDelay, want)
		}
	}
	if _, _, err := parseRunFlags([]string{"--debug-task-delay", "soon"}, &bytes.Buffer{}); err == nil {
		t.Error(`--debug-task-delay soon was accepted`)
	}
}
