package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// truncatedTable is a real-Lance "appends" table whose first fragment's
// data file was cut in half (the other fragments stay adjacent, so all of
// them can be compacted into one).
type truncatedTable struct {
	path   string
	before *format.Manifest
	victim *tablepb.DataFragment
	key    string // the truncated file, relative to the table
	file   string
	full   []byte
	digest string
	rows   int
}

func newTruncatedTable(t *testing.T, dir string) *truncatedTable {
	t.Helper()
	tt := &truncatedTable{path: oracle.Build(t, "appends", dir)}
	tt.digest, tt.rows = rowsDigest(oracle.Scan(t, tt.path, 0, nil))
	tt.before = tabletest.Latest(t, tt.path)
	frags := tt.before.PB.GetFragments()
	if len(frags) < 3 {
		t.Fatalf("appends has %d fragments, want at least 3", len(frags))
	}
	tt.victim = frags[0]
	tt.key = "data/" + tt.victim.GetFiles()[0].GetPath()
	tt.file = filepath.Join(tt.path, filepath.FromSlash(tt.key))
	var err error
	if tt.full, err = os.ReadFile(tt.file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tt.file, tt.full[:len(tt.full)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	return tt
}

// checkReported asserts that `lanced plan` skips the quarantined fragment
// and `lanced stats` reports it with its file.
func (tt *truncatedTable) checkReported(t *testing.T) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain([]string{"plan", tt.path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "quarantined: "+tt.key) {
		t.Errorf("plan does not skip the quarantined fragment (exit %d):\n%s\n%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"stats", tt.path}, &out, &errb); code != 0 || !strings.Contains(out.String(), "QUARANTINED fragment "+strconv.FormatUint(tt.victim.GetId(), 10)+": "+tt.key) {
		t.Errorf("stats does not report the quarantined fragment (exit %d):\n%s%s", code, out.String(), errb.String())
	}
}

// checkCompactedAndRestore asserts that every fragment but the quarantined
// one was compacted into one and the quarantined one kept as it was; then
// it puts the file's bytes back and asserts real Lance reads exactly the
// rows it read before.
func (tt *truncatedTable) checkCompactedAndRestore(t *testing.T) {
	t.Helper()
	after := tabletest.Latest(t, tt.path)
	if after.Version() == tt.before.Version() {
		t.Fatal("nothing was committed")
	}
	frags := tt.before.PB.GetFragments()
	last := frags[len(frags)-1].GetId()
	var kept bool
	for _, f := range after.PB.GetFragments() {
		switch {
		case f.GetId() == tt.victim.GetId():
			kept = len(f.GetFiles()) == 1 && f.GetFiles()[0].GetPath() == tt.victim.GetFiles()[0].GetPath()
		case f.GetId() <= last:
			t.Errorf("fragment %d was not compacted", f.GetId())
		}
	}
	if !kept || len(after.PB.GetFragments()) != 2 {
		t.Fatalf("after compaction: %d fragments, quarantined fragment %d kept as it was: %v", len(after.PB.GetFragments()), tt.victim.GetId(), kept)
	}
	if err := os.WriteFile(tt.file, tt.full, 0o644); err != nil {
		t.Fatal(err)
	}
	gotDigest, gotRows := rowsDigest(oracle.Scan(t, tt.path, 0, nil))
	if gotDigest != tt.digest || gotRows != tt.rows {
		t.Fatalf("real Lance reads %d rows (%s), before %d (%s)", gotRows, gotDigest, tt.rows, tt.digest)
	}
	t.Logf("%d fragments → %d (fragment %d quarantined: %s)", len(frags), len(after.PB.GetFragments()), tt.victim.GetId(), tt.key)
}

// A truncated data file in one fragment: `lanced compact` quarantines that
// fragment, names the file and exits non-zero; `lanced plan` and `lanced
// stats` report it; the next run compacts every other fragment and leaves
// the quarantined one as it was; with the file's bytes put back, real Lance
// reads exactly the rows it read before.
func TestCompactQuarantinesTruncatedFragment(t *testing.T) {
	oracle.Require(t)
	tt := newTruncatedTable(t, t.TempDir())
	var out, errb bytes.Buffer
	code := runMain([]string{"compact", tt.path}, &out, &errb)
	if code == 0 {
		t.Fatalf("compact with a truncated data file exited 0:\n%s\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), tt.key) || !strings.Contains(out.String(), "quarantined: fragment "+strconv.FormatUint(tt.victim.GetId(), 10)) {
		t.Fatalf("compact does not name the quarantined fragment and file %s:\nstdout: %s\nstderr: %s", tt.key, out.String(), errb.String())
	}
	tt.checkReported(t)
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"compact", tt.path}, &out, &errb); code != 0 {
		t.Fatalf("second compact: exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	tt.checkCompactedAndRestore(t)
}

// latestOf returns the latest manifest of the table at path (tabletest.Latest).
func latestOf(t *testing.T, path string) *format.Manifest {
	t.Helper()
	return tabletest.Latest(t, path)
}
