package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Retry bounds the store's own retries of transient failures: reads
// (get, ranged get, a ReaderAt's ranges, a stream that broke off mid-body),
// attributes, listings, deletes, whole-object puts and the conditional
// create. A failure is transient when CodeOf gives Unavailable or
// Throttled: a 500, 503 or 429 answer, a connection reset or refused, a
// timeout, or a short read (the body ended before its length). The SDKs
// retry a few times themselves; these attempts come on top of theirs, so a
// store throttling or failing a few percent of requests does not fail a
// task that issues hundreds of them.
type Retry struct {
	// Attempts is the total number of tries of one operation (1: no
	// retry).
	Attempts int
	// Base is the backoff before the second try; it doubles per try up to
	// Max. Each wait is drawn uniformly from [delay/2, delay] (jitter).
	Base, Max time.Duration
}

// DefaultRetry is the retry policy of every Bucket unless WithRetry
// replaces it: 6 tries, 100ms doubling to 5s (at most about 10s of waiting
// in all).
var DefaultRetry = Retry{Attempts: 6, Base: 100 * time.Millisecond, Max: 5 * time.Second}

// WithRetry returns b with policy r (Attempts <= 1 disables the store's
// own retries). The result shares b's connection; close b.
func WithRetry(b *Bucket, r Retry) *Bucket {
	c := *b
	c.owner = false
	c.retry = &r
	return &c
}

func (b *Bucket) retryPolicy() Retry {
	if b.retry != nil {
		return *b.retry
	}
	return DefaultRetry
}

// transient reports whether err is worth another try of an idempotent
// operation. An endpoint that refuses connections or a host name that does
// not resolve is not: another try within seconds meets the same answer, and
// the command should say so at once (the daemon's task retries and sweeps
// come back to it later).
func transient(err error) bool {
	if Unreachable(err) {
		return false
	}
	switch CodeOf(err) {
	case Unavailable, Throttled:
		return true
	}
	return false
}

// wait sleeps the jittered backoff before try attempt+1 (attempt counts
// from 1); false when ctx ended first.
func (r Retry) wait(ctx context.Context, attempt int) bool {
	d := r.Base
	for i := 1; i < attempt && d < r.Max; i++ {
		d *= 2
	}
	d = min(d, r.Max)
	if d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// again decides whether a failed try of op is retried: err is transient,
// tries remain and ctx is live. It then records the retry (metric and a
// debug log line) and waits out the backoff.
func (b *Bucket) again(ctx context.Context, op, key string, attempt int, err error) bool {
	r := b.retryPolicy()
	if err == nil || attempt >= r.Attempts || ctx.Err() != nil || !transient(err) {
		return false
	}
	code := CodeOf(err).String()
	b.metrics.retried(op, code)
	slog.Debug("store: retrying", "op", op, "uri", b.URI(), "key", key, "attempt", attempt, "code", code, "err", err)
	return r.wait(ctx, attempt)
}

// retrying runs fn until it succeeds, fails for good, or the tries are
// spent; fn's errors are wrapped (so they carry a code) before deciding.
func (b *Bucket) retrying(ctx context.Context, op, key string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err != nil {
			err = b.wrap(op, key, err)
		}
		if !b.again(ctx, op, key, attempt, err) {
			return err
		}
	}
}

// resumingReader is a ranged read that survives a transient failure in
// the middle of the body: it reopens the range at the first byte not yet
// delivered (a short read counts as transient).
type resumingReader struct {
	ctx     context.Context
	b       *Bucket
	key     string
	off     int64 // next byte to deliver
	end     int64 // one past the last byte wanted; -1: to the end
	r       io.ReadCloser
	attempt int
}

func (rr *resumingReader) Read(p []byte) (int, error) {
	if rr.end >= 0 && rr.off >= rr.end {
		return 0, io.EOF
	}
	for {
		if rr.r == nil {
			n := int64(-1)
			if rr.end >= 0 {
				n = rr.end - rr.off
			}
			r, err := rr.b.bkt.NewRangeReader(rr.ctx, rr.b.prefix+rr.key, rr.off, n, nil)
			if err != nil {
				err = rr.b.wrap("read", rr.key, err)
				rr.attempt++
				if rr.b.again(rr.ctx, "read", rr.key, rr.attempt, err) {
					continue
				}
				return 0, err
			}
			rr.r = r
		}
		n, err := rr.r.Read(p)
		rr.off += int64(n)
		if err == io.EOF {
			if rr.end >= 0 && rr.off < rr.end {
				err = io.ErrUnexpectedEOF // the body ended early
			} else {
				return n, io.EOF
			}
		}
		if err == nil {
			if n > 0 {
				rr.attempt = 0 // progress: the next failure starts a fresh count
			}
			return n, nil
		}
		err = rr.b.wrap("read", rr.key, err)
		_ = rr.r.Close()
		rr.r = nil
		rr.attempt++
		if !rr.b.again(rr.ctx, "read", rr.key, rr.attempt, err) {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (rr *resumingReader) Close() error {
	if rr.r == nil {
		return nil
	}
	err := rr.r.Close()
	rr.r = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		return rr.b.wrap("read", rr.key, err)
	}
	return nil
}
