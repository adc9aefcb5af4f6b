package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestHoldsPlaceListReleaseAndOneShotCommandsRespectThem: a hold placed
// with `lanced holds place` is table state: `holds list` on the root (given
// as a relative path) shows it with its reason, `compact` and `cleanup`
// refuse the table naming the release command, `plan` warns; after
// `holds release` the list is empty and `compact --dry-run` plans again.
func TestHoldsPlaceListReleaseAndOneShotCommandsRespectThem(t *testing.T) {
	oracle.Require(t)
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	tbl := oracle.Build(t, "appends", tables)
	t.Chdir(root)
	rel := "tables/appends.lance"

	out := runCLI(t, "holds", "list", "tables")
	if !strings.Contains(out, "no holds (1 table(s) checked)") {
		t.Fatalf("holds list before: %q", out)
	}
	runCLI(t, "holds", "place", rel, "--reason", "operator: repairing a data file")
	if _, err := os.Stat(filepath.Join(tbl, "_lanced", "hold.json")); err != nil {
		t.Fatalf("hold is not table state: %v", err)
	}
	var held []heldTable
	if err := json.Unmarshal([]byte(runCLI(t, "holds", "list", "./tables", "--json")), &held); err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Table != "file://"+tbl || held[0].Reason != "operator: repairing a data file" || !strings.HasPrefix(held[0].By, "cli") {
		t.Fatalf("holds list: %+v", held)
	}
	for _, args := range [][]string{{"compact", rel}, {"cleanup", rel}} {
		var o, e bytes.Buffer
		if code := runMain(args, &o, &e); code == 0 || !strings.Contains(e.String(), "is held") || !strings.Contains(e.String(), "lanced holds release file://"+tbl) {
			t.Fatalf("%v on a held table: exit %d, stderr %q", args, code, e.String())
		}
	}
	var o, e bytes.Buffer
	if code := runMain([]string{"plan", rel}, &o, &e); code != 0 || !strings.Contains(e.String(), "warning: table file://"+tbl+" is held") {
		t.Fatalf("plan on a held table: exit %d, stderr %q", code, e.String())
	}
	out = runCLI(t, "holds", "release", rel, "--reason", "repaired")
	if !strings.Contains(out, "released file://"+tbl) || !strings.Contains(out, "operator: repairing a data file") {
		t.Fatalf("release: %q", out)
	}
	if out := runCLI(t, "holds", "list", "tables"); !strings.Contains(out, "no holds") {
		t.Fatalf("holds list after release: %q", out)
	}
	if out := runCLI(t, "compact", rel, "--dry-run"); !strings.Contains(out, "rewrite task(s)") {
		t.Fatalf("compact --dry-run: %q", out)
	}
	if _, err := os.Stat(filepath.Join(tbl, "_lanced", "hold.json")); !os.IsNotExist(err) {
		t.Fatalf("hold record left after release: %v", err)
	}
}
