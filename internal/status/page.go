package status

import (
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/store"
)

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"bytes": HumanBytes,
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"layout":   layoutSVG,
	"timeline": timelineSVG,
}).Parse(pageHTML))

// Register adds the page (GET /), the JSON API (GET /api/status) and the
// hold release action (POST /api/holds/release) to mux.
func (c *Collector) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", c.servePage)
	mux.HandleFunc("GET /api/status", c.serveJSON)
	mux.HandleFunc("POST /api/holds/release", c.serveRelease)
}

func (c *Collector) servePage(w http.ResponseWriter, r *http.Request) {
	s := c.Snapshot(r.Context())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	if err := pageTmpl.Execute(w, s); err != nil {
		c.cfg.Logger.Error("status page", "err", err)
	}
}

func (c *Collector) serveJSON(w http.ResponseWriter, r *http.Request) {
	s := c.Snapshot(r.Context())
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
}

// serveRelease releases a table's hold: refused (403) unless an admin token
// is configured, and then only with it (Authorization: Bearer TOKEN or the
// form field token).
func (c *Collector) serveRelease(w http.ResponseWriter, r *http.Request) {
	if c.cfg.AdminToken == "" {
		http.Error(w, "mutating actions are disabled: start the daemon with LANCED_ADMIN_TOKEN set to enable them, or run: lanced holds release TABLE", http.StatusForbidden)
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		tok = r.FormValue("token")
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(c.cfg.AdminToken)) != 1 {
		http.Error(w, "admin token required", http.StatusUnauthorized)
		return
	}
	table := r.FormValue("table")
	c.mu.Lock()
	_, known := c.tables[table]
	c.mu.Unlock()
	if !known {
		http.Error(w, "unknown table", http.StatusNotFound)
		return
	}
	b, err := store.Open(r.Context(), c.openURI(table))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer b.Close()
	rec, err := hold.Release(r.Context(), b)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c.cfg.Logger.Info("hold released", "table", table, "via", "status page", "was", rec)
	c.Refresh(r.Context(), table)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// rect is one SVG rectangle.
type rect struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type chart struct {
	W, H  float64
	Rects []rect
	Marks []mark
	Label string
}

type mark struct {
	X, Y  float64
	Class string
	Title string
}

// layoutSVG draws a table's fragments left to right: the upper strip is
// each fragment's physical rows (deleted rows shaded), the lower strip its
// data files.
func layoutSVG(t Table) chart {
	const w, rowsH, filesH, gap = 720.0, 60.0, 24.0, 6.0
	ch := chart{W: w, H: rowsH + gap + filesH}
	n := len(t.Layout)
	if n == 0 {
		ch.Label = "no fragments"
		return ch
	}
	var maxRows uint64
	maxFiles := 1
	for _, f := range t.Layout {
		maxRows = max(maxRows, f.Rows)
		maxFiles = max(maxFiles, f.Files)
	}
	maxRows = max(maxRows, 1)
	bw := w / float64(n)
	pad := min(1.0, bw/4)
	for i, f := range t.Layout {
		x := float64(i) * bw
		h := rowsH * float64(f.Rows) / float64(maxRows)
		title := fmt.Sprintf("fragment %d: %d rows (%d deleted), %d files, %s", f.ID, f.Rows, f.Deleted, f.Files, HumanBytes(f.Bytes))
		cls := "frag"
		if f.Rows < t.SmallRows {
			cls = "frag small"
		}
		ch.Rects = append(ch.Rects, rect{X: x, Y: rowsH - h, W: bw - pad, H: h, Class: cls, Title: title})
		if f.Deleted > 0 && f.Rows > 0 {
			dh := h * float64(f.Deleted) / float64(f.Rows)
			ch.Rects = append(ch.Rects, rect{X: x, Y: rowsH - h, W: bw - pad, H: dh, Class: "deleted", Title: title})
		}
		fh := filesH * float64(f.Files) / float64(maxFiles)
		ch.Rects = append(ch.Rects, rect{X: x, Y: rowsH + gap + filesH - fh, W: bw - pad, H: fh, Class: "files", Title: title})
	}
	return ch
}

var lanes = []string{"writer", "commit", "task", "conflict", "cleanup", "held"}

// timelineSVG places the events of the last hours on one lane per kind.
func timelineSVG(s Snapshot) chart {
	const w, laneH = 720.0, 14.0
	ch := chart{W: w, H: laneH * float64(len(lanes))}
	end := s.Generated
	start := end.Add(-time.Hour)
	for _, e := range s.Timeline {
		if e.Time.Before(start) {
			start = e.Time
		}
	}
	if max := end.Add(-24 * time.Hour); start.Before(max) {
		start = max
	}
	span := end.Sub(start).Seconds()
	ch.Label = fmt.Sprintf("%s – %s", start.Format("15:04"), end.Format("15:04 UTC"))
	for _, e := range s.Timeline {
		lane := -1
		for i, l := range lanes {
			if l == e.Kind {
				lane = i
			}
		}
		if lane < 0 || e.Time.Before(start) {
			continue
		}
		x := w * e.Time.Sub(start).Seconds() / span
		ch.Marks = append(ch.Marks, mark{X: min(x, w-3), Y: laneH*float64(lane) + laneH/2, Class: e.Kind,
			Title: fmt.Sprintf("%s %s %s %s", e.Time.Format("15:04:05"), e.Msg, e.Table, e.Detail)})
	}
	return ch
}
