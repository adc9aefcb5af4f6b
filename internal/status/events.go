package status

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// eventKinds maps the daemon's log messages to timeline kinds.
var eventKinds = map[string]string{
	"version committed":         "commit",
	"task done":                 "task",
	"task dropped at commit":    "task",
	"commit conflict, rebasing": "conflict",
	"cleanup done":              "cleanup",
	"table cleaned":             "cleanup",
	"table held":                "held",
}

// Handler returns a slog.Handler that passes every record to next and
// records the maintenance events (commits, tasks, conflicts, cleanups,
// holds) and every error in the collector.
func (c *Collector) Handler(next slog.Handler) slog.Handler {
	return &teeHandler{next: next, c: c}
}

type teeHandler struct {
	next  slog.Handler
	c     *Collector
	attrs []slog.Attr
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &teeHandler{next: h.next.WithAttrs(as), c: h.c, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{next: h.next.WithGroup(name), c: h.c, attrs: h.attrs}
}

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	kind, isEvent := eventKinds[r.Message]
	if isEvent || r.Level >= slog.LevelError {
		h.record(r, kind, isEvent)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *teeHandler) record(r slog.Record, kind string, isEvent bool) {
	e := Event{Time: r.Time.UTC(), Kind: kind, Msg: r.Message}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	var detail []string
	add := func(a slog.Attr) bool {
		switch a.Key {
		case "table":
			e.Table = a.Value.String()
		case "node":
		default:
			detail = append(detail, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	e.Detail = strings.Join(detail, " ")
	c := h.c
	c.mu.Lock()
	if isEvent {
		c.addEvent(e)
		if kind == "commit" && e.Table != "" {
			c.lastMaint[e.Table] = e.Time
			if t := c.tables[e.Table]; t != nil {
				t.LastMaintained = e.Time
			}
		}
	}
	if r.Level >= slog.LevelError {
		ee := e
		ee.Kind = "error"
		c.addError(ee)
	}
	c.mu.Unlock()
	if e.Table != "" && (kind == "commit" || kind == "held" || kind == "cleanup") {
		c.Kick(e.Table)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
