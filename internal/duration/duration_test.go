package duration

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0":            0,
		"168h":         168 * time.Hour,
		"14d":          14 * 24 * time.Hour,
		"14days":       14 * 24 * time.Hour,
		"7days 12h":    7*24*time.Hour + 12*time.Hour,
		"2weeks 3days": 17 * 24 * time.Hour,
		"1h30m":        90 * time.Minute,
		"1h 30min":     90 * time.Minute,
		"1.5h":         90 * time.Minute,
		"1.5d":         36 * time.Hour,
		"90s":          90 * time.Second,
		"500ms":        500 * time.Millisecond,
		"1M":           2_630_016 * time.Second,
		"1y":           31_557_600 * time.Second,
		"3 seconds":    3 * time.Second,
		" 10 minutes ": 10 * time.Minute,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "7", "d", "a week", "7 fortnights", "-1d", "99999999999999999999d"} {
		if d, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, d)
		}
	}
}

// FuzzParse: durations come from outside (table config, policies, flags);
// parsing never panics and never yields a negative duration.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"14d", "7days 12h", "1h30m", "500ms", "", "7", "9999999999999999999y", "1 M 2 w", "1.5d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := Parse(s); err == nil && d < 0 {
			t.Fatalf("Parse(%q) = %v", s, d)
		}
	})
}
