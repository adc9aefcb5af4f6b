package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// progressTable builds a real-Lance table of 12 fragments of 500 rows
// (every 7th row deleted) and a policy that rewrites it into fragments of
// 1,000 rows, so compaction runs several tasks.
func progressTable(t *testing.T) (uri, polDir string, rows int64) {
	t.Helper()
	dir := t.TempDir()
	path := oracle.Build(t, oracle.Sized{Fragments: 12, RowsPerFragment: 500, DeleteEvery: 7}.Scenario(), dir)
	polDir = filepath.Join(dir, "policies")
	if err := os.MkdirAll(polDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := "defaults {\n  compaction {\n    target_rows_per_fragment = 1000\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(polDir, "p.hcl"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range tabletest.Latest(t, path).PB.GetFragments() {
		rows += int64(f.GetPhysicalRows())
	}
	return path, polDir, rows
}

type progressLine struct {
	Msg        string `json:"msg"`
	Command    string `json:"command"`
	RowsDone   int64  `json:"rows_done"`
	RowsTotal  int64  `json:"rows_total"`
	FilesDone  int64  `json:"files_done"`
	FilesTotal int64  `json:"files_total"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
}

func progressLines(t *testing.T, stderr string) []progressLine {
	t.Helper()
	var out []progressLine
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		var l progressLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "progress" {
			out = append(out, l)
		}
	}
	return out
}

// TestProgressLinesWithoutTerminal: `lanced compact` and `lanced cleanup`
// with stderr not a terminal log periodic JSON progress lines whose done
// counts grow to their totals (compact: the rows and bytes of the
// fragments it rewrites; cleanup: the files and bytes it deletes).
func TestProgressLinesWithoutTerminal(t *testing.T) {
	uri, polDir, rows := progressTable(t)
	var out, errb bytes.Buffer
	if code := runMain([]string{"compact", "--policy", polDir, "--progress-every", "1ms", uri}, &out, &errb); code != 0 {
		t.Fatalf("compact: exit %d\n%s", code, errb.String())
	}
	lines := progressLines(t, errb.String())
	if len(lines) < 3 {
		t.Fatalf("compact: %d progress lines, want periodic ones:\n%s", len(lines), errb.String())
	}
	var mid bool
	for i, l := range lines {
		if l.Command != "compact" || l.RowsTotal != rows || l.BytesTotal <= 0 {
			t.Fatalf("compact line %d: %+v, want rows_total %d and a byte total", i, l, rows)
		}
		if i > 0 && (l.RowsDone < lines[i-1].RowsDone || l.BytesDone < lines[i-1].BytesDone) {
			t.Fatalf("compact: progress went back: %+v then %+v", lines[i-1], l)
		}
		mid = mid || (l.RowsDone > 0 && l.RowsDone < l.RowsTotal)
	}
	last := lines[len(lines)-1]
	if last.RowsDone != rows || last.BytesDone != last.BytesTotal {
		t.Fatalf("compact: last line %+v, want all %d rows and all bytes done", last, rows)
	}
	if !mid {
		t.Errorf("compact: no line between 0 and %d rows", rows)
	}

	out.Reset()
	errb.Reset()
	if code := runMain([]string{"cleanup", "--older-than", "0s", "--progress-every", "1ms", uri}, &out, &errb); code != 0 {
		t.Fatalf("cleanup: exit %d\n%s", code, errb.String())
	}
	// Cleanup of 50 small local files can finish within one period, so
	// only the final line is certain; periodicity is checked on compact.
	lines = progressLines(t, errb.String())
	if len(lines) < 1 {
		t.Fatalf("cleanup: no progress lines:\n%s", errb.String())
	}
	last = lines[len(lines)-1]
	if last.Command != "cleanup" || last.FilesTotal == 0 || last.FilesDone != last.FilesTotal || last.BytesDone != last.BytesTotal {
		t.Fatalf("cleanup: last line %+v, want every planned file deleted", last)
	}
	if !strings.Contains(out.String(), "deleted") {
		t.Logf("cleanup output: %s", out.String())
	}

	// --json keeps stdout the summary and the progress on stderr as lines.
	uri2, polDir2, _ := progressTable(t)
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"compact", "--json", "--policy", polDir2, "--progress-every", "1ms", uri2}, &out, &errb); code != 0 {
		t.Fatalf("compact --json: exit %d\n%s", code, errb.String())
	}
	if !json.Valid(out.Bytes()) {
		t.Fatalf("compact --json: stdout is not one JSON document:\n%s", out.String())
	}
	if len(progressLines(t, errb.String())) < 1 {
		t.Fatalf("compact --json: no progress lines on stderr:\n%s", errb.String())
	}
}

// TestProgressBarOnTerminal: with stderr a terminal (a pty), `lanced
// compact` draws a progress bar (schollz/progressbar) with the rows done
// of the total, bytes, a percentage and the elapsed:ETA figures, and no
// JSON progress lines.
func TestProgressBarOnTerminal(t *testing.T) {
	uri, polDir, rows := progressTable(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	var screen bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(&screen, ptmx)
	}()
	var out bytes.Buffer
	code := runMain([]string{"compact", "--policy", polDir, uri}, &out, tty)
	_ = tty.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = ptmx.Close()
		<-done
	}
	if code != 0 {
		t.Fatalf("compact: exit %d\n%s", code, screen.String())
	}
	s := screen.String()
	for _, want := range []string{"compact ", "/" + itoa64(rows) + " rows", "100%", "|", "KiB", "["} {
		if !strings.Contains(s, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, s)
		}
	}
	if strings.Contains(s, `"msg":"progress"`) {
		t.Errorf("JSON progress lines on a terminal:\n%s", s)
	}
	if !strings.Contains(s, itoa64(rows)+"/"+itoa64(rows)+" rows") {
		t.Errorf("bar never showed all %d rows done:\n%q", rows, s)
	}
}

func itoa64(n int64) string { b, _ := json.Marshal(n); return string(b) }
