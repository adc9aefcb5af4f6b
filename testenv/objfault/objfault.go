// Package objfault is the object-store fault layer of the test environment:
// an http.Handler wrapper around an emulator's handler (gofakes3 for S3,
// fake-gcs-server for GCS) that injects the failures real object stores
// produce:
//
//   - 500 InternalError, 503 SlowDown/ServiceUnavailable and 429
//     TooManyRequests answers (nothing applied);
//   - connection resets before the request is applied;
//   - slow responses (a delay before the request is served, long enough to
//     pass a client's timeout);
//   - lost responses: the request is applied and then the connection is
//     closed without an answer, so the client cannot tell whether its write
//     landed (the case a conditional manifest PUT must survive);
//   - short bodies: a GET's answer announces its full length and breaks
//     off halfway through the body;
//   - odd listing pages: S3 ListObjectsV2 and GCS JSON-API listings are
//     asked for pages of 1 to 7 entries, so clients must follow
//     continuation tokens.
//
// Faults are chosen per request by a seeded random source at the configured
// rates, or forced for matching requests (Rule). Counters record every
// request and every injected fault. Test environment only.
package objfault

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is a fault.
type Kind string

// Fault kinds.
const (
	None         Kind = ""
	Internal     Kind = "500"
	SlowDown     Kind = "503"
	TooMany      Kind = "429"
	Reset        Kind = "reset"
	Slow         Kind = "slow"
	LostResponse Kind = "lost_response"
	ShortBody    Kind = "short_body"
	OddPages     Kind = "odd_pages"
)

// Dialect selects the error body shape.
type Dialect int

// Dialects.
const (
	S3 Dialect = iota
	GCS
)

// Config configures a Handler.
type Config struct {
	Dialect Dialect
	// Seed seeds the fault choice (0: 1).
	Seed uint64
	// Rates: the probability of each kind per request (0..1). OddPages
	// applies to listings only, ShortBody to other GETs.
	Rates map[Kind]float64
	// SlowDelay is how long a Slow fault holds the request (default 3s).
	SlowDelay time.Duration
	// Skip exempts requests from random faults (nil: none exempt).
	Skip func(r *http.Request) bool
	// Exempt exempts a request from one kind of random fault (nil: none).
	Exempt func(r *http.Request, k Kind) bool
}

// Rule forces kind on requests that match, up to Times times (0: always).
type Rule struct {
	Match func(r *http.Request) bool
	Kind  Kind
	Times int
	used  atomic.Int64
}

// Handler injects faults in front of an emulator's handler.
type Handler struct {
	next http.Handler
	cfg  Config

	mu    sync.Mutex
	rng   *rand.Rand
	rules []*Rule

	requests atomic.Int64
	counts   sync.Map // Kind -> *atomic.Int64
	enabled  atomic.Bool
}

// Wrap returns a Handler around next. Random faults start enabled.
func Wrap(next http.Handler, cfg Config) *Handler {
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 3 * time.Second
	}
	h := &Handler{next: next, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	h.enabled.Store(true)
	return h
}

// Enable turns random faults on or off (rules always apply).
func (h *Handler) Enable(on bool) { h.enabled.Store(on) }

// AddRule forces a fault on matching requests.
func (h *Handler) AddRule(r *Rule) {
	h.mu.Lock()
	h.rules = append(h.rules, r)
	h.mu.Unlock()
}

// Requests is the number of requests seen.
func (h *Handler) Requests() int64 { return h.requests.Load() }

// Injected returns how many faults of kind were injected.
func (h *Handler) Injected(kind Kind) int64 {
	if c, ok := h.counts.Load(kind); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// Counts returns the injected faults by kind.
func (h *Handler) Counts() map[Kind]int64 {
	m := map[Kind]int64{}
	h.counts.Range(func(k, v any) bool {
		m[k.(Kind)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}

func (h *Handler) count(kind Kind) {
	c, _ := h.counts.LoadOrStore(kind, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

func (h *Handler) choose(r *http.Request) Kind {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, rule := range h.rules {
		if rule.Match(r) && (rule.Times == 0 || rule.used.Add(1) <= int64(rule.Times)) {
			return rule.Kind
		}
	}
	if !h.enabled.Load() || (h.cfg.Skip != nil && h.cfg.Skip(r)) {
		return None
	}
	list := isListing(r)
	for _, k := range []Kind{Internal, SlowDown, TooMany, Reset, Slow, LostResponse, OddPages, ShortBody} {
		if (k == OddPages && !list) || (k == ShortBody && (list || r.Method != http.MethodGet)) {
			continue
		}
		if p := h.cfg.Rates[k]; p > 0 && h.rng.Float64() < p && (h.cfg.Exempt == nil || !h.cfg.Exempt(r, k)) {
			return k
		}
	}
	return None
}

// isListing reports an S3 ListObjectsV2 or a GCS JSON-API object listing.
func isListing(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	q := r.URL.Query()
	return q.Get("list-type") == "2" || strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/o")
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	kind := h.choose(r)
	if kind != None {
		h.count(kind)
	}
	switch kind {
	case Internal:
		h.fail(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
	case SlowDown:
		code := "SlowDown"
		if h.cfg.Dialect == GCS {
			code = "ServiceUnavailable"
		}
		h.fail(w, http.StatusServiceUnavailable, code, "Please reduce your request rate.")
	case TooMany:
		h.fail(w, http.StatusTooManyRequests, "TooManyRequests", "The rate of requests is too high.")
	case Reset:
		drop(w)
	case Slow:
		select {
		case <-time.After(h.cfg.SlowDelay):
		case <-r.Context().Done():
			return
		}
		h.next.ServeHTTP(w, r)
	case LostResponse:
		rec := httptest.NewRecorder()
		h.next.ServeHTTP(rec, r)
		drop(w)
	case ShortBody:
		rec := httptest.NewRecorder()
		h.next.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		if len(body) < 2 || rec.Code >= 300 {
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body[:len(body)/2])
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil { // flushes what was written
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case OddPages:
		q := r.URL.Query()
		n := strconv.Itoa(1 + int(h.rng.Int64N(7)))
		if q.Get("list-type") == "2" {
			q.Set("max-keys", n)
		} else {
			q.Set("maxResults", n)
		}
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = q.Encode()
		r2.RequestURI = r2.URL.RequestURI()
		h.next.ServeHTTP(w, r2)
	default:
		h.next.ServeHTTP(w, r)
	}
}

func (h *Handler) fail(w http.ResponseWriter, status int, code, msg string) {
	if h.cfg.Dialect == GCS {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		if status == http.StatusTooManyRequests {
			code = "rateLimitExceeded"
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"errors":[{"reason":%q,"message":%q}]}}`, status, msg, code, msg)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
	_, _ = w.Write(b.Bytes())
}

// drop closes the client's connection without an answer (a reset as far as
// the client can tell).
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // net/http drops the connection quietly
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0) // RST rather than FIN
	}
	_ = conn.Close()
}
