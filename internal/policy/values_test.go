package policy

import (
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse("Mon 2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		spec string
		t    string
		in   bool
	}{
		{"Mon-Fri 01:00-05:00", "Tue 2026-12-01 03:00", true},
		{"Mon-Fri 01:00-05:00", "Tue 2026-12-01 05:00", false},
		{"Mon-Fri 01:00-05:00", "Sat 2026-12-05 03:00", false},
		{"Sat,Sun 00:00-24:00", "Sun 2026-12-06 23:59", true},
		{"Fri 22:00-02:00", "Sat 2026-12-05 01:30", true}, // after midnight belongs to Friday
		{"Fri 22:00-02:00", "Fri 2026-12-04 01:30", false},
		{"Fri-Mon 22:00-23:00", "Sun 2026-12-06 22:30", true}, // wrapping day range
		{"22:00-02:00", "Wed 2026-12-02 23:00", true},
	}
	for _, c := range cases {
		w, err := ParseWindow(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := w.Contains(at(c.t)); got != c.in {
			t.Errorf("%q contains %s = %v, want %v", c.spec, c.t, got, c.in)
		}
	}
	for _, bad := range []string{"", "Mon", "Funday 01:00-02:00", "01:00", "25:00-26:00", "01:00-01:00", "Mon Tue 01:00-02:00", "1:5-2:00"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("ParseWindow(%q) accepted", bad)
		}
	}
}
