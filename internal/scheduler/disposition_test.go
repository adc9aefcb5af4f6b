package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

type fakeMsg struct{ verbs []string }

func (f *fakeMsg) Ack() error { f.verbs = append(f.verbs, "ack"); return nil }
func (f *fakeMsg) Nak() error { f.verbs = append(f.verbs, "nak"); return nil }
func (f *fakeMsg) NakWithDelay(d time.Duration) error {
	f.verbs = append(f.verbs, "nak_delay="+d.String())
	return nil
}

func (f *fakeMsg) TermWithReason(r string) error {
	f.verbs = append(f.verbs, "term="+r)
	return nil
}

var errStoreThrottled = errors.New("store: throttled")

func TestDisposition(t *testing.T) {
	classify := func(err error) (Outcome, bool) {
		if errors.Is(err, errStoreThrottled) {
			return OutcomeRetried, true
		}
		return 0, false
	}
	cases := map[string]struct {
		err     error
		outcome Outcome
		verb    string
	}{
		"a task that succeeded is acked":                         {nil, OutcomeDone, "ack"},
		"superseded inputs are terminated as stale":              {fmt.Errorf("commit: %w", ErrStale), OutcomeStale, "term=stale"},
		"a store throttle (via the classifier) is retried later": {fmt.Errorf("get x: %w", errStoreThrottled), OutcomeRetried, "nak_delay=400ms"},
		"an error marked transient is retried later":             {Transient(errBoom), OutcomeRetried, "nak_delay=400ms"},
		"a timeout is retried later":                             {fmt.Errorf("read: %w", context.DeadlineExceeded), OutcomeRetried, "nak_delay=400ms"},
		"an unknown error is retried until max deliver":          {errBoom, OutcomeRetried, "nak_delay=400ms"},
		"an incompatible table abandons the task":                {fmt.Errorf("x: %w", ErrIncompatible), OutcomeAbandoned, "term=abandoned"},
		"an invalid task abandons it":                            {ErrInvalidTask, OutcomeAbandoned, "term=abandoned"},
		"a broken envelope abandons it":                          {ErrInvalidTaskEnvelope, OutcomeAbandoned, "term=abandoned"},
		"corruption terminates and holds the table":              {fmt.Errorf("read manifest: %w", ErrCorrupt), OutcomeCorrupt, "term=corrupt"},
		"corruption wins over staleness":                         {errors.Join(ErrStale, ErrCorrupt), OutcomeCorrupt, "term=corrupt"},
		"a drain hands the task back":                            {fmt.Errorf("scan: %w", errShutdown), OutcomeShutdown, "nak"},
		"a cancelled context hands the task back":                {fmt.Errorf("scan: %w", context.Canceled), OutcomeShutdown, "nak"},
		"a drain wins over whatever the engine wrapped":          {fmt.Errorf("%w (%w)", ErrIncompatible, errShutdown), OutcomeShutdown, "nak"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := disposition(c.err, classify)
			if o != c.outcome {
				t.Fatalf("disposition(%v) = %s, want %s", c.err, o, c.outcome)
			}
			var m fakeMsg
			if err := respond(&m, o, backoff(3, 100*time.Millisecond, time.Second)); err != nil {
				t.Fatal(err)
			}
			if len(m.verbs) != 1 || m.verbs[0] != c.verb {
				t.Fatalf("verbs %v, want exactly [%s]", m.verbs, c.verb)
			}
		})
	}
}

func TestBackoffDoublesUpToTheLimit(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(uint64(i+1), time.Second, 10*time.Second); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestConfigValidateRejectsBackoffBelowAckWait(t *testing.T) {
	c := Config{AckWait: 10 * time.Second, BackOff: []time.Duration{time.Second}}
	c.setDefaults()
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
	}
}
