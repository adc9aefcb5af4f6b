// Package duration is the one parser of human-written durations, shared
// by policies, table config (lance.auto_cleanup.older_than), the daemon's
// configuration and the CLI.
package duration

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var units = map[string]time.Duration{
	"ns": time.Nanosecond, "nsec": time.Nanosecond,
	"us": time.Microsecond, "µs": time.Microsecond, "usec": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond, "millis": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
	"month": 2630016 * time.Second, "months": 2630016 * time.Second, "M": 2630016 * time.Second,
	"y": 31557600 * time.Second, "year": 31557600 * time.Second, "years": 31557600 * time.Second,
}

// Parse parses a duration: Go's syntax ("168h", "1h30m", "1.5h") plus
// days, weeks, months (30.44 days) and years (365.25 days), and the
// humantime spelling Lance writes in lance.auto_cleanup.older_than
// ("14days", "2weeks 3days", "90s"); "0" is zero.
func Parse(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty duration")
	}
	if t == "0" {
		return 0, nil
	}
	var total float64
	for len(t) > 0 {
		i := 0
		for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("duration %q: want a number at %q", s, t)
		}
		n, err := strconv.ParseFloat(t[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		t = strings.TrimLeft(t[i:], " ")
		j := 0
		for j < len(t) && !(t[j] >= '0' && t[j] <= '9' || t[j] == '.' || t[j] == ' ') {
			j++
		}
		unit := t[:j]
		mult, ok := units[unit]
		if !ok {
			mult, ok = units[strings.ToLower(unit)]
		}
		if !ok {
			if unit == "" {
				return 0, fmt.Errorf("duration %q: missing unit (like 168h or 7d)", s)
			}
			return 0, fmt.Errorf("duration %q: unknown unit %q", s, unit)
		}
		total += n * float64(mult)
		if total > math.MaxInt64 {
			return 0, fmt.Errorf("duration %q: too long", s)
		}
		t = strings.TrimLeft(t[j:], " ")
	}
	return time.Duration(total), nil
}
