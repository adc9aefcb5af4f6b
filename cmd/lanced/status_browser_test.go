package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lanced-dev/lanced/internal/status"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// startInProcessDaemon runs `lanced run args...` in this process and
// returns its log and an idempotent stop that waits for a clean exit.
func startInProcessDaemon(t *testing.T, args ...string) (*syncBuffer, func()) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, args, logs, logs) }()
	var once sync.Once
	return logs, func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("daemon: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("daemon did not stop")
			}
		})
	}
}

// findBrowser returns a Chromium (or Chrome) binary, "" when none is
// installed.
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where browser tests leave screenshots:
// $LANCED_TEST_ARTIFACTS when set, else the test's temp dir.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("LANCED_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestStatusPageInChromium runs `lanced run` over two tables real Lance
// wrote, loads the status page in headless Chromium and reads the rendered
// DOM: both tables with the fragment counts `lanced stats` prints (and that
// `lanced status` reports), a hold placed with `lanced holds place` shown
// with its reason, gone after `lanced holds release`; the page's release
// action is refused without an admin token. A screenshot is saved. While
// a task runs (each is held 25s by --debug-task-delay) its progress shows in
// the per-task gauges of /metrics, the page's running tasks and the "task
// in progress" log lines; the gauges and the row go once none runs.
func TestStatusPageInChromium(t *testing.T) {
	oracle.Require(t)
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install -y chromium): the status page browser test needs one")
	}
	root := t.TempDir()
	tables := filepath.Join(root, "tables")
	a := oracle.Build(t, "appends", tables)
	b := oracle.Build(t, "deletes_bitmap", tables)
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfgPath := writeTestDaemonConfig(t, root, addr)
	base := "http://" + addr
	uris := []string{"file://" + a, "file://" + b}
	// Start the browser before the daemon: Chromium's start (many seconds
	// on a loaded machine) must not take a running task's window.
	bctx := startHeadlessBrowser(t, browser)

	// load navigates to the page and evaluates expr in it.
	load := func(expr string) string {
		if _, err := chromedp.Run(bctx, chromedp.Navigate(base+"/")); err != nil {
			t.Fatalf("load page: %v", err)
		}
		return evalJS[string](t, bctx, expr)
	}
	// Each task waits 25s once its size is known, so its progress can be
	// seen; running tasks log their progress every 300ms.
	logs, stop := startInProcessDaemon(t, "--config", cfgPath, "--debug-task-delay", "25s", "--debug-progress-every", "300ms")
	defer stop()
	waitUntil(t, 60*time.Second, "daemon ready", func() bool { code, _ := httpGet(base + "/readyz"); return code == 200 })

	checkRunningTaskProgress(t, logs, base, load)

	// Let maintenance settle: both tables committed by lanced, then quiet.
	waitUntil(t, 90*time.Second, "both tables maintained", func() bool {
		for _, u := range uris {
			if logs.find("version committed", func(l map[string]any) bool { return l["table"] == u }) == nil {
				return false
			}
		}
		return true
	})

	// Once maintenance is quiet no task runs: the series are gone and the
	// page says so.
	waitUntil(t, 120*time.Second, "no running task", func() bool {
		l, _ := taskRowsMetric(base)
		return l == "" && load(`String(!!document.getElementById('no-running'))`) == "true"
	})
	checkPageAgreesWithCLI(t, addr, uris, load)
	html := evalJS[string](t, bctx, `document.body.outerHTML`)
	for _, want := range []string{`id="timeline"`, `class="card layout"`, "no table is held", `id="queue"`} {
		if !strings.Contains(html, want) {
			t.Fatalf("page lacks %s", want)
		}
	}
	checkHoldOnPage(t, bctx, base, b, load)
}

// startHeadlessBrowser starts the headless Chromium at browser (1280×1600,
// five minutes at most) on a blank page and returns its context.
func startHeadlessBrowser(t *testing.T, browser string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1600))
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, 5*time.Minute)
	t.Cleanup(cancelTimeout)
	if _, err := chromedp.Run(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start browser: %v", err)
	}
	return bctx
}

// taskRowsMetric returns the labels and value of the first
// lanced_task_rows_total series in the /metrics at base ("" when none).
func taskRowsMetric(base string) (string, float64) {
	_, body := httpGet(base + "/metrics")
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, "lanced_task_rows_total{"); ok {
			i := strings.LastIndexByte(rest, ' ')
			v, _ := strconv.ParseFloat(rest[i+1:], 64)
			return rest[:i], v
		}
	}
	return "", 0
}

// checkRunningTaskProgress: a running task shows its progress in /metrics
// at base (per-task gauges labelled with its id and table), on the page
// (load evaluates in it) and in its "task in progress" log lines.
func checkRunningTaskProgress(t *testing.T, logs *syncBuffer, base string, load func(expr string) string) {
	t.Helper()
	var labels string
	for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var v float64
		if labels, v = taskRowsMetric(base); v > 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, l := range logs.lines() {
				t.Logf("%v", l)
			}
			t.Fatal("timed out after 150s waiting for a running task's lanced_task_rows_total")
		}
	}
	if !strings.Contains(labels, `task_id="`) || !strings.Contains(labels, `table="file://`) || strings.Contains(labels, "?") {
		t.Fatalf("task progress labels: %s", labels)
	}
	var rowsCell string
	waitUntil(t, 30*time.Second, "a running task on the page", func() bool {
		rowsCell = load(`Array.from(document.querySelectorAll('#running tr.task td.rows')).map(e => e.textContent).join(";")`)
		return rowsCell != ""
	})
	var done, total int
	if _, err := fmt.Sscanf(strings.Split(rowsCell, ";")[0], "%d / %d", &done, &total); err != nil || total <= 0 || done > total {
		t.Fatalf("running task rows on the page: %q", rowsCell)
	}
	waitUntil(t, 30*time.Second, `"task in progress" with rows_total`, func() bool {
		return logs.find("task in progress", func(l map[string]any) bool {
			rt, _ := l["rows_total"].(float64)
			_, hasDone := l["rows_done"]
			_, hasBytes := l["bytes_total"]
			return rt > 0 && hasDone && hasBytes
		}) != nil
	})
}

// checkPageAgreesWithCLI: for each table of uris the page's fragment count,
// `lanced stats` and `lanced status` (of the daemon at addr) agree
// (retried while a commit may still land between the reads).
func checkPageAgreesWithCLI(t *testing.T, addr string, uris []string, load func(expr string) string) {
	t.Helper()
	fragmentsOnPage := func(uri string) (int, bool) {
		txt := load(`(document.querySelector('tr[data-table="` + uri + `"] td.fragments') || {textContent: ""}).textContent`)
		n, err := strconv.Atoi(strings.TrimSpace(txt))
		return n, err == nil
	}
	for _, u := range uris {
		path := strings.TrimPrefix(u, "file://")
		waitUntil(t, 60*time.Second, "page agrees with lanced stats on "+u, func() bool {
			n, ok := fragmentsOnPage(u)
			st := statsJSON(t, path)
			var snap status.Snapshot
			if err := json.Unmarshal([]byte(runCLI(t, "status", "--http", addr, "--json")), &snap); err != nil {
				t.Fatal(err)
			}
			agree := false
			for _, tb := range snap.Tables {
				agree = agree || tb.URI == u && tb.Fragments == st.Totals.Fragments
			}
			return ok && n == st.Totals.Fragments && agree
		})
	}
}

// checkHoldOnPage: a hold placed on the table at path with the CLI appears
// on the page (screenshot saved) with its reason, the page's release
// action (at base) is refused without an admin token, and the hold is gone
// after `lanced holds release`.
func checkHoldOnPage(t *testing.T, bctx context.Context, base, path string, load func(expr string) string) {
	t.Helper()
	uri := "file://" + path
	runCLI(t, "holds", "place", path, "--reason", "browser test hold")
	var reason string
	waitUntil(t, 20*time.Second, "hold shown", func() bool {
		reason = load(`(document.querySelector('li.hold[data-table="` + uri + `"] .reason') || {textContent: ""}).textContent`)
		return reason != ""
	})
	if reason != "browser test hold" {
		t.Fatalf("hold reason on the page: %q", reason)
	}
	shot := filepath.Join(artifactDir(t), "status-page.png")
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	resp, err := http.PostForm(base+"/api/holds/release", map[string][]string{"table": {uri}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("release without admin token: %s", resp.Status)
	}
	runCLI(t, "holds", "release", path)
	waitUntil(t, 20*time.Second, "hold gone", func() bool {
		return load(`document.querySelectorAll('li.hold').length + ":" + !!document.getElementById('no-holds')`) == "0:true"
	})
}

// evalJS evaluates expr in the page of ctx.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}
