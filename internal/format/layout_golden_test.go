package format

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestLayoutStatsGolden: the stats of every testdata manifest (written by
// real Lance) against testdata/golden/<table>-v<N>.stats.json. Regenerate
// with -update after an intended change and review the diff.
func TestLayoutStatsGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*/*.manifest")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeManifestFile(f, data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(ComputeLayoutStats(m.PB), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		table := filepath.Base(filepath.Dir(f))
		golden := filepath.Join("testdata", "golden", table+"-v"+strconv.FormatUint(m.Version(), 10)+".stats.json")
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: stats differ from %s:\n%s", f, golden, got)
		}
	}
}
