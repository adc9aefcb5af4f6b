package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}

// ParseSize parses a byte size like "90GiB", "512MB", "1.5 GiB" or "4096".
// Decimal units (KB, MB, ...) are powers of 1000, binary ones (KiB, MiB, ...)
// of 1024.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit like 90GiB", s)
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, t[i:])
	}
	v := n * mult
	if v > math.MaxInt64 || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return uint64(v), nil
}

// Window is a weekly maintenance window in UTC. Days is a bit set
// (bit 0 = Sunday); Start and End are minutes after midnight, End may be
// less than Start for a window across midnight.
type Window struct {
	Spec  string `json:"spec"`
	Days  uint8  `json:"-"`
	Start int    `json:"-"`
	End   int    `json:"-"`
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func parseDay(s string) (int, bool) {
	s = strings.ToLower(s)
	for i, d := range dayNames {
		if s == d {
			return i, true
		}
	}
	return 0, false
}

func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("time %q: want HH:MM", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || hh > 24 || mm < 0 || mm > 59 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("time %q: want HH:MM between 00:00 and 24:00", s)
	}
	return hh*60 + mm, nil
}

// ParseWindow parses "[DAYS ]HH:MM-HH:MM" with DAYS like "Mon-Fri",
// "Sat,Sun" or "Tue", in UTC.
func ParseWindow(s string) (Window, error) {
	w := Window{Spec: s, Days: 0x7f}
	fields := strings.Fields(s)
	var clock string
	switch len(fields) {
	case 1:
		clock = fields[0]
	case 2:
		w.Days = 0
		for _, part := range strings.Split(fields[0], ",") {
			a, b, isRange := strings.Cut(part, "-")
			da, ok := parseDay(a)
			if !ok {
				return Window{}, fmt.Errorf("window %q: unknown day %q (use Mon..Sun)", s, a)
			}
			db := da
			if isRange {
				if db, ok = parseDay(b); !ok {
					return Window{}, fmt.Errorf("window %q: unknown day %q (use Mon..Sun)", s, b)
				}
			}
			for d := da; ; d = (d + 1) % 7 {
				w.Days |= 1 << d
				if d == db {
					break
				}
			}
		}
		clock = fields[1]
	default:
		return Window{}, fmt.Errorf("window %q: want \"[Mon-Fri ]HH:MM-HH:MM\"", s)
	}
	a, b, ok := strings.Cut(clock, "-")
	if !ok {
		return Window{}, fmt.Errorf("window %q: want a time range like 01:00-05:00", s)
	}
	var err error
	if w.Start, err = parseClock(a); err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	if w.End, err = parseClock(b); err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	if w.Start == w.End {
		return Window{}, fmt.Errorf("window %q: empty (start equals end)", s)
	}
	return w, nil
}

// Contains reports whether t (converted to UTC) falls inside the window.
func (w Window) Contains(t time.Time) bool {
	t = t.UTC()
	m := t.Hour()*60 + t.Minute()
	day := int(t.Weekday())
	if w.Start < w.End {
		return w.Days&(1<<day) != 0 && m >= w.Start && m < w.End
	}
	// Across midnight: the part after midnight belongs to the previous day.
	if m >= w.Start {
		return w.Days&(1<<day) != 0
	}
	if m < w.End {
		return w.Days&(1<<((day+6)%7)) != 0
	}
	return false
}

// NextOpen returns the first time at or after t (to the minute) when one
// of ws is open: t itself when one contains t, and t when ws is empty (no
// window: any time).
func NextOpen(ws []Window, t time.Time) time.Time {
	if len(ws) == 0 {
		return t
	}
	for _, w := range ws {
		if w.Contains(t) {
			return t
		}
	}
	var best time.Time
	day := t.UTC().Truncate(24 * time.Hour)
	for d := 0; d <= 8; d++ {
		start := day.AddDate(0, 0, d)
		for _, w := range ws {
			at := start.Add(time.Duration(w.Start) * time.Minute)
			if at.After(t) && w.Contains(at) && (best.IsZero() || at.Before(best)) {
				best = at
			}
		}
	}
	return best
}

// ParseColumnGroups parses the lance.compaction.column_groups syntax:
// groups separated by ';', columns by ',' ("emb;cap,tags").
func ParseColumnGroups(s string) ([][]string, error) {
	var out [][]string
	seen := map[string]bool{}
	for _, g := range strings.Split(s, ";") {
		var group []string
		for _, c := range strings.Split(g, ",") {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			if seen[c] {
				return nil, fmt.Errorf("column groups %q: column %q named twice", s, c)
			}
			seen[c] = true
			group = append(group, c)
		}
		if len(group) > 0 {
			out = append(out, group)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("column groups %q: no column", s)
	}
	return out, nil
}
