package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/lanced-dev/lanced/internal/engine/progress"
)

// progressPoll is how often a bar on a terminal is redrawn.
const progressPoll = 150 * time.Millisecond

// defaultProgressEvery is how often `compact` and `cleanup` log a progress
// line when stderr is not a terminal (or with --json).
const defaultProgressEvery = 5 * time.Second

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// showProgress displays c on stderr until the returned stop is called: a
// progress bar (done and total bytes, or units when no byte total is
// known, with the units in the description, and the ETA) when stderr is a
// terminal and plain is false; otherwise a JSON log line ("progress") every
// `every` and one when stopped. unit names what c's items count ("rows",
// "files"). every <= 0 shows nothing.
func showProgress(stderr io.Writer, c *progress.Counter, name, unit string, plain bool, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	if !plain && isTerminal(stderr) {
		go func() {
			defer close(finished)
			drawBar(stderr, c, name, unit, done)
		}()
	} else {
		log := jsonLogger(stderr, slog.LevelInfo)
		go func() {
			defer close(finished)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-done:
					logProgress(log, c.Snapshot(), name, unit)
					return
				case <-tick.C:
					logProgress(log, c.Snapshot(), name, unit)
				}
			}
		}()
	}
	return func() {
		close(done)
		<-finished
	}
}

// logProgress writes one progress line.
func logProgress(log *slog.Logger, s progress.Snapshot, name, unit string) {
	args := []any{"command", name, unit + "_done", s.ItemsDone, unit + "_total", s.ItemsTotal,
		"bytes_done", s.BytesDone, "bytes_total", s.BytesTotal, "percent", fmt.Sprintf("%.1f", 100*s.Fraction()), "elapsed", s.Elapsed}
	if eta, ok := s.ETA(); ok {
		args = append(args, "eta", eta)
	}
	log.Info("progress", args...)
}

// drawBar redraws a progress bar from c until done is closed, then ends
// its line (a failed run leaves the bar where it stopped).
func drawBar(w io.Writer, c *progress.Counter, name, unit string, done <-chan struct{}) {
	var bar *progressbar.ProgressBar
	var byBytes bool
	update := func() {
		s := c.Snapshot()
		total, cur := s.BytesTotal, s.BytesDone
		useBytes := total > 0
		if !useBytes {
			total, cur = s.ItemsTotal, s.ItemsDone
		}
		if bar == nil || useBytes != byBytes {
			byBytes = useBytes
			bar = progressbar.NewOptions64(max(total, 1),
				progressbar.OptionSetWriter(w),
				progressbar.OptionShowBytes(byBytes),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionSetElapsedTime(true),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(0),
				progressbar.OptionSetRenderBlankState(true),
				progressbar.OptionUseIECUnits(true),
				progressbar.OptionSpinnerType(14),
			)
		}
		if total > 0 && total != bar.GetMax64() {
			bar.ChangeMax64(total)
		}
		bar.Describe(fmt.Sprintf("%s %d/%d %s", name, s.ItemsDone, s.ItemsTotal, unit))
		_ = bar.Set64(min(cur, max(total, 1)))
	}
	tick := time.NewTicker(progressPoll)
	defer tick.Stop()
	for {
		select {
		case <-done:
			update()
			fmt.Fprintln(w)
			return
		case <-tick.C:
			update()
		}
	}
}
