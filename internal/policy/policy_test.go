package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hashicorp/hcl/v2"
)

var update = flag.Bool("update", false, "rewrite golden files")

// directives reads "# resolve: URI" and "# config: k=v" lines.
func directives(t *testing.T, src []byte) (uris []string, cfg map[string]string) {
	cfg = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if u, ok := strings.CutPrefix(line, "# resolve: "); ok {
			uris = append(uris, u)
		}
		if kv, ok := strings.CutPrefix(line, "# config: "); ok {
			k, v, _ := strings.Cut(kv, "=")
			cfg[k] = v
		}
	}
	if len(uris) == 0 {
		t.Fatal("fixture has no # resolve: line")
	}
	return uris, cfg
}

func TestValidGolden(t *testing.T) {
	paths, _ := filepath.Glob("testdata/valid/*.hcl")
	if len(paths) == 0 {
		t.Fatal("no fixtures")
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			set, diags := LoadDir(fstest.MapFS{filepath.Base(p): {Data: src}})
			if diags.HasErrors() {
				t.Fatalf("diagnostics: %s", diags.Error())
			}
			uris, cfg := directives(t, src)
			out := map[string]Effective{}
			for _, u := range uris {
				out[u] = set.Resolve(u, cfg)
			}
			got, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(p, ".hcl") + ".golden.json"
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if string(bytes.TrimSpace(want)) != string(got) {
				t.Errorf("effective policy differs from %s (go test -update to accept):\n%s", golden, got)
			}
		})
	}
}

// TestInvalidAnnotated checks that each "# ERROR: summary" line gets exactly
// that diagnostic and that no other line gets one.
func TestInvalidAnnotated(t *testing.T) {
	paths, _ := filepath.Glob("testdata/invalid/*.hcl")
	if len(paths) == 0 {
		t.Fatal("no fixtures")
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for i, line := range strings.Split(string(src), "\n") {
				if _, s, ok := strings.Cut(line, "# ERROR: "); ok {
					want[fmt.Sprintf("%d: %s", i+1, strings.TrimSpace(s))] = true
				}
			}
			_, diags := LoadDir(fstest.MapFS{filepath.Base(p): {Data: src}})
			got := map[string]bool{}
			for _, d := range diags {
				if d.Severity != hcl.DiagError {
					continue
				}
				if d.Subject == nil {
					t.Errorf("diagnostic without a source range: %s", d.Error())
					continue
				}
				if d.Subject.Filename != filepath.Base(p) || d.Subject.Start.Column < 1 {
					t.Errorf("diagnostic range %s does not name the file", d.Subject)
				}
				got[fmt.Sprintf("%d: %s", d.Subject.Start.Line, d.Summary)] = true
			}
			for k := range want {
				if !got[k] {
					t.Errorf("missing diagnostic at line %s", k)
				}
			}
			for k := range got {
				if !want[k] {
					t.Errorf("unexpected diagnostic at line %s", k)
				}
			}
			if t.Failed() {
				var keys []string
				for _, d := range diags {
					keys = append(keys, d.Error())
				}
				sort.Strings(keys)
				t.Logf("all diagnostics:\n%s", strings.Join(keys, "\n"))
			}
		})
	}
}

func TestDuplicatesAcrossFiles(t *testing.T) {
	fsys := fstest.MapFS{
		"a.hcl": {Data: []byte("defaults {\n}\ntable \"s3://x/*\" {\n}\n")},
		"b.hcl": {Data: []byte("defaults {\n}\ntable \"s3://x/*\" {\n}\n")},
	}
	_, diags := LoadDir(fsys)
	var got []string
	for _, d := range diags {
		got = append(got, fmt.Sprintf("%s:%d %s", d.Subject.Filename, d.Subject.Start.Line, d.Summary))
	}
	sort.Strings(got)
	want := []string{"b.hcl:1 Duplicate defaults block", "b.hcl:3 Duplicate table block"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestPrecedence(t *testing.T) {
	src := []byte(`
defaults {
  repack { max_data_files_per_fragment = 9 }
  compaction { target_rows_per_fragment = 10 }
}
table "s3://a/**" {
  compaction { target_rows_per_fragment = 20 }
}
table "s3://a/b/c" {
  compaction { max_source_fragments = 5 }
}
`)
	set, diags := LoadDir(fstest.MapFS{"p.hcl": {Data: src}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	cfg := map[string]string{
		"lance.compaction.max_data_files_per_fragment": "4",
		"lance.compaction.target_rows_per_fragment":    "30",
		"lance.compaction.max_source_fragments":        "7",
	}
	e := set.Resolve("s3://a/b/c", cfg)
	// The most specific block sets max_source_fragments; the less specific
	// one still sets target rows; the table config beats defaults.
	if e.Compaction.MaxSourceFragments.Value != 5 || e.Compaction.MaxSourceFragments.Source.Block != "s3://a/b/c" {
		t.Errorf("max_source_fragments = %+v", e.Compaction.MaxSourceFragments)
	}
	if e.Compaction.TargetRowsPerFragment.Value != 20 || e.Compaction.TargetRowsPerFragment.Source.Where != "p.hcl:7" {
		t.Errorf("target_rows_per_fragment = %+v", e.Compaction.TargetRowsPerFragment)
	}
	if e.Repack.MaxDataFilesPerFragment.Value != 4 || e.Repack.MaxDataFilesPerFragment.Source.Kind != FromTableConfig {
		t.Errorf("max_data_files_per_fragment = %+v", e.Repack.MaxDataFilesPerFragment)
	}
	e = set.Resolve("s3://z/t", cfg)
	if e.Compaction.TargetRowsPerFragment.Value != 30 || e.Compaction.TargetRowsPerFragment.Source.Kind != FromTableConfig {
		t.Errorf("unmatched table: target_rows_per_fragment = %+v", e.Compaction.TargetRowsPerFragment)
	}
	e = set.Resolve("s3://z/t", nil)
	if e.Compaction.TargetRowsPerFragment.Value != 10 || e.Compaction.TargetRowsPerFragment.Source.Kind != FromDefaults {
		t.Errorf("defaults: target_rows_per_fragment = %+v", e.Compaction.TargetRowsPerFragment)
	}
	if e.Compaction.MaterializeDeletionsThreshold.Value != 0.1 || e.Compaction.MaterializeDeletionsThreshold.Source.Kind != FromLanceDefault {
		t.Errorf("lance default threshold = %+v", e.Compaction.MaterializeDeletionsThreshold)
	}
}

func TestParseValues(t *testing.T) {
	sizes := map[string]uint64{"90GiB": 90 << 30, "512MB": 512e6, "1.5 KiB": 1536, "4096": 4096, "1b": 1}
	for in, want := range sizes {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "1.5B", "12 parsecs", "-3"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	g, err := ParseColumnGroups("emb;cap,tags")
	if err != nil || len(g) != 2 || g[1][1] != "tags" {
		t.Errorf("ParseColumnGroups = %v, %v", g, err)
	}
	if _, err := ParseColumnGroups("a,b;a"); err == nil {
		t.Error("ParseColumnGroups accepted a column twice")
	}
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/valid", "testdata/invalid", "../../policies"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.hcl"))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`table "s3://x/*" { compaction { max_source_bytes = "1GiB" } }`))
	f.Fuzz(func(t *testing.T, src []byte) {
		file, diags := Parse(src, "fuzz.hcl")
		if file == nil {
			t.Fatal("nil file")
		}
		for _, d := range diags {
			if d.Severity == hcl.DiagError && d.Subject == nil {
				t.Fatalf("error without range: %s", d.Error())
			}
		}
		if !diags.HasErrors() {
			set, d := NewSet([]*File{file})
			if !d.HasErrors() {
				_ = set.Resolve("s3://bucket/table", map[string]string{"lance.compaction.column_groups": string(src)})
			}
		}
	})
}

// TestExamplePolicies loads the repository's example policies, as
// `lanced policy check policies/` does in CI.
func TestExamplePolicies(t *testing.T) {
	set, diags := LoadDir(os.DirFS("../../policies"))
	if len(diags) > 0 {
		t.Fatalf("policies/ does not check cleanly: %s", diags.Error())
	}
	if len(set.Files) < 2 || set.Defaults == nil {
		t.Fatalf("policies/ holds %d files, defaults=%v", len(set.Files), set.Defaults != nil)
	}
	e := set.Resolve("s3://lake/events/clicks", nil)
	if e.Repack.MaxDataFilesPerFragment.Value != 4 || e.Compaction.MaxSourceFragments.Value != 1000 {
		t.Fatalf("unexpected resolution: %+v", e)
	}
}

func TestRemapIsAcceptedAndTheDefault(t *testing.T) {
	src := []byte("table \"s3://x/*\" {\n  compaction {\n    index_coverage = \"remap\"\n  }\n}\n")
	set, diags := LoadDir(fstest.MapFS{"r.hcl": {Data: src}})
	if len(diags) != 0 {
		t.Fatalf("diags %v", diags)
	}
	if v := set.Resolve("s3://x/t", nil).Compaction.IndexCoverage.Value; v != CoverageRemap {
		t.Fatalf("index_coverage %q", v)
	}
	if v := LanceDefaults("s3://y/t").Compaction.IndexCoverage.Value; v != CoverageRemap {
		t.Fatalf("default index_coverage %q", v)
	}
}

// TestDeferIsAccepted: "defer" is a mode like the others; an unknown value
// is refused with the list of modes.
func TestDeferIsAccepted(t *testing.T) {
	src := []byte("table \"s3://x/*\" {\n  compaction {\n    index_coverage = \"defer\"\n  }\n}\n")
	set, diags := LoadDir(fstest.MapFS{"d.hcl": {Data: src}})
	if diags.HasErrors() {
		t.Fatalf("diags %v", diags)
	}
	if got := set.Resolve("s3://x/t", nil).Compaction.IndexCoverage.Value; got != CoverageDefer {
		t.Fatalf("index_coverage %q", got)
	}
	_, diags = LoadDir(fstest.MapFS{"b.hcl": {Data: []byte("defaults {\n  compaction {\n    index_coverage = \"later\"\n  }\n}\n")}})
	if msg := diags.Error(); !strings.Contains(msg, "must be one of") || !strings.Contains(msg, "defer") {
		t.Fatalf("unknown value: %q", msg)
	}
}

func TestLoadDirNamedKeepsTheDirectoryInNames(t *testing.T) {
	for _, dir := range []string{"../../policies", "./../../policies/", "../../policies/."} {
		set, diags := LoadDirNamed(os.DirFS(dir), dir)
		if len(diags) > 0 || len(set.Files) < 2 {
			t.Fatalf("%s: %d files, %v", dir, len(set.Files), diags)
		}
		for _, f := range set.Files {
			if !strings.HasSuffix(filepath.Dir(f.Name), "policies") {
				t.Errorf("%s: file name %q does not carry the directory", dir, f.Name)
			}
		}
	}
}
