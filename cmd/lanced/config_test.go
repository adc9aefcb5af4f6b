package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// expectedErrors reads "# ERROR: <summary>" annotations: line → summaries.
func expectedErrors(t *testing.T, path string) map[int][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int][]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if _, after, ok := strings.Cut(sc.Text(), "# ERROR: "); ok {
			want[line] = append(want[line], strings.TrimSpace(after))
		}
	}
	return want
}

func TestInvalidConfigsReportEachErrorAtItsLine(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/invalid/*.hcl")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want := expectedErrors(t, path)
			_, _, diags := loadConfigFile(path)
			got := map[int][]string{}
			for _, d := range diags {
				if d.Severity != hcl.DiagError {
					continue
				}
				if d.Subject == nil {
					t.Errorf("diagnostic without a source range: %s", d.Summary)
					continue
				}
				if d.Subject.Filename != path {
					t.Errorf("diagnostic names file %q, want %q", d.Subject.Filename, path)
				}
				got[d.Subject.Start.Line] = append(got[d.Subject.Start.Line], d.Summary)
			}
			for line := range want {
				slices.Sort(want[line])
				slices.Sort(got[line])
			}
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("errors by line:\n got  %v\n want %v", got, want)
			}
		})
	}
}

func TestDiagnosticsRenderFileLineColumn(t *testing.T) {
	path := "testdata/config/invalid/max_delay.hcl"
	_, _, diags := loadConfigFile(path)
	var buf bytes.Buffer
	writeDiags(&buf, path, diags)
	first, _, _ := strings.Cut(buf.String(), "\n")
	want := path + ":4:15: error: max_delay below debounce"
	if !strings.HasPrefix(first, want) {
		t.Fatalf("first line %q, want prefix %q", first, want)
	}
}

func TestExampleConfigIsAccepted(t *testing.T) {
	cfg, _, diags := loadConfigFile("../../systemd/lanced.hcl")
	if diags.HasErrors() {
		t.Fatalf("systemd/lanced.hcl: %s", diags.Error())
	}
	if err := cfg.finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != "/var/lib/lanced" || !slices.Equal(cfg.Tables, []string{"file:///srv/lance"}) ||
		!cfg.NATS.Embedded || cfg.HTTP != "127.0.0.1:9464" || cfg.Queue.AckWait != time.Minute ||
		len(cfg.Sources) != 1 || cfg.Sources[0].Interval != 10*time.Minute {
		t.Fatalf("decoded %+v", cfg)
	}
}

func TestRelativePathsFollowTheConfigFile(t *testing.T) {
	cfg, _, diags := loadConfigFile("testdata/config/minimal.hcl")
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	abs, _ := filepath.Abs("testdata/config/tables")
	if !slices.Equal(cfg.Tables, []string{"file://" + abs}) {
		t.Fatalf("tables %v, want [file://%s]", cfg.Tables, abs)
	}
}

func TestCheckConfigFlagAcceptsTheExampleAndRejectsBadFiles(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runMain([]string{"run", "--config", "../../systemd/lanced.hcl", "--check-config"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "config ok:") {
		t.Fatalf("stdout %q", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"run", "--config", "testdata/config/invalid/nats.hcl", "--check-config"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d for a bad config", code)
	}
	if !strings.Contains(errb.String(), "testdata/config/invalid/nats.hcl:4:14: error: Conflicting NATS settings") {
		t.Fatalf("stderr:\n%s", errb.String())
	}
}

func TestNoConfigFileDefaults(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "/var/lib/lanced:/var/lib/other")
	f, _, err := parseRunFlags([]string{"--tables", "./tables"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, diags := resolveRunConfig(f)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	wd, _ := os.Getwd()
	if cfg.StateDir != "/var/lib/lanced" || !cfg.NATS.Embedded || len(cfg.Sources) != 1 || cfg.Sources[0].Kind != "poll" ||
		!slices.Equal(cfg.Tables, []string{"file://" + wd + "/tables"}) || cfg.Policies != "" {
		t.Fatalf("defaults %+v", cfg)
	}
	f, _, _ = parseRunFlags(nil, &bytes.Buffer{})
	if _, _, diags := resolveRunConfig(f); !diags.HasErrors() {
		t.Fatal("no tables and no config were accepted")
	}
}

// TestConfigErrorsComeTogetherOnce: a config file with a misspelled
// attribute and a bad duration, and a policy directory with a misspelled
// setting and a bad size, report every error in one run, each once
// (file:line:col line, then what to do), and exit 1.
func TestConfigErrorsComeTogetherOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lanced.hcl")
	pol := filepath.Join(dir, "policies")
	if err := os.Mkdir(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("tables = [\""+dir+"\"]\npolcy = \"x\"\nevents { debounce = \"5q\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "a.hcl"), []byte("defaults {\n  compaction {\n    target_rows_per_fragmnt = 10\n    max_source_bytes = \"12 parsecs\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--config", cfg, "--check-config"}, []string{cfg + ":2:1: error: Unsupported argument", `Did you mean "policy"?`, cfg + ":3:21: error: Invalid duration"}},
		{[]string{"policy", "check", pol}, []string{"a.hcl:3:5: error: Unsupported argument", `Did you mean "target_rows_per_fragment"?`, "a.hcl:4:24: error: Invalid size"}},
		{[]string{"run", "--tables", dir, "--policy", pol, "--check-config"}, []string{"a.hcl:3:5: error: Unsupported argument", "a.hcl:4:24: error: Invalid size"}},
	} {
		var out, errb bytes.Buffer
		if code := runMain(c.args, &out, &errb); code != 1 {
			t.Errorf("%v: exit %d, want 1\n%s", c.args, code, errb.String())
		}
		for _, w := range c.want {
			if n := strings.Count(errb.String(), w); n != 1 {
				t.Errorf("%v: %q appears %d times, want once:\n%s", c.args, w, n, errb.String())
			}
		}
		if n := strings.Count(errb.String(), ": error: "); n != 2 {
			t.Errorf("%v: %d errors reported, want 2:\n%s", c.args, n, errb.String())
		}
	}
}
