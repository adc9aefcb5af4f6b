package main

import (
	"io"
	"log/slog"
)

// logOptions are the handler options of every logger the process makes:
// the level, and one format for durations: a time.Duration attribute KEY is
// written as KEY_ms, an integer number of milliseconds ("duration_ms":136).
func logOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: durationMS}
}

func durationMS(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Int64(a.Key+"_ms", a.Value.Duration().Milliseconds())
	}
	return a
}

// jsonLogger is a JSON logger at level with logOptions.
func jsonLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, logOptions(level)))
}
