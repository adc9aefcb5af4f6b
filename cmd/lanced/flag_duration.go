package main

import (
	"time"

	"github.com/lanced-dev/lanced/internal/duration"
)

// durationFlag is a duration flag read by duration.Parse, the parser
// policies and the config file use: Go durations plus days and weeks
// ("7d", "1.5d", "2w", "12h 30m", "0").
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}
