package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

func latestOf(t *testing.T, path string) *format.Manifest {
	t.Helper()
	ctx := context.Background()
	b, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A truncated data file in one fragment: `lanced compact` quarantines that
// fragment, names the file and exits non-zero; `lanced plan` and `lanced
// stats` report it; the next run compacts every other fragment and leaves
// the quarantined one as it was; with the file's bytes put back, real Lance
// reads exactly the rows it read before.
func TestCompactQuarantinesTruncatedFragment(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "appends", t.TempDir())
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, path, 0, nil))
	m := latestOf(t, path)
	frags := m.PB.GetFragments()
	if len(frags) < 3 {
		t.Fatalf("appends has %d fragments, want at least 3", len(frags))
	}
	victim := frags[0]
	key := "data/" + victim.GetFiles()[0].GetPath()
	file := filepath.Join(path, filepath.FromSlash(key))
	full, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, full[:len(full)/2], 0o644); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	code := runMain([]string{"compact", path}, &out, &errb)
	if code == 0 {
		t.Fatalf("compact with a truncated data file exited 0:\n%s\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), key) || !strings.Contains(out.String(), "quarantined: fragment "+strconv.FormatUint(victim.GetId(), 10)) {
		t.Fatalf("compact does not name the quarantined fragment and file %s:\nstdout: %s\nstderr: %s", key, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"plan", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "quarantined: "+key) {
		t.Fatalf("plan does not skip the quarantined fragment (exit %d):\n%s\n%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runMain([]string{"stats", path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "QUARANTINED fragment "+strconv.FormatUint(victim.GetId(), 10)+": "+key) {
		t.Fatalf("stats does not report the quarantined fragment (exit %d):\n%s", code, out.String())
	}

	out.Reset()
	errb.Reset()
	if code := runMain([]string{"compact", path}, &out, &errb); code != 0 {
		t.Fatalf("second compact: exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	after := latestOf(t, path)
	if after.Version() == m.Version() {
		t.Fatalf("second compact committed nothing:\n%s", out.String())
	}
	var kept bool
	for _, f := range after.PB.GetFragments() {
		switch {
		case f.GetId() == victim.GetId():
			kept = len(f.GetFiles()) == 1 && f.GetFiles()[0].GetPath() == victim.GetFiles()[0].GetPath()
		case f.GetId() <= m.PB.GetFragments()[len(frags)-1].GetId():
			t.Errorf("fragment %d was not compacted", f.GetId())
		}
	}
	if !kept || len(after.PB.GetFragments()) != 2 {
		t.Fatalf("after compaction: %d fragments, quarantined one kept as it was: %v", len(after.PB.GetFragments()), kept)
	}

	if err := os.WriteFile(file, full, 0o644); err != nil {
		t.Fatal(err)
	}
	gotDigest, gotRows := rowsDigest(oracle.Scan(t, path, 0, nil))
	if gotDigest != wantDigest || gotRows != wantRows {
		t.Fatalf("real Lance reads %d rows (%s), before %d (%s)", gotRows, gotDigest, wantRows, wantDigest)
	}
}
