package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Op is one operation for ops.mjs, e.g.
//
//	oracle.Op{"op": "add", "rows": 100, "seed": 7}
//	oracle.Op{"op": "delete", "where": "id % 3 = 0"}
//	oracle.Op{"op": "optimize"}
//	oracle.Op{"op": "cleanup", "older_than_ms": 0, "delete_unverified": true}
//
// The full list with arguments is at the top of ops.mjs and in README.md.
type Op map[string]any

// RunOps applies ops in order with real Lance on one open table and returns
// one JSON result per op; each has "op" and "version" (the table version
// after it). A failing op fails the test with Lance's error.
func RunOps(t testing.TB, uri string, ops []Op, opts ...Options) []json.RawMessage {
	t.Helper()
	Require(t)
	res, err := tryOps(t, uri, ops, opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return res
}

// TryOps is RunOps that returns Lance's error instead of failing, with the
// results of the ops that succeeded before it (for tests that expect real
// Lance to refuse something).
func TryOps(t testing.TB, uri string, ops []Op, opts ...Options) ([]json.RawMessage, error) {
	t.Helper()
	Require(t)
	return tryOps(t, uri, ops, opts...)
}

func tryOps(t testing.TB, uri string, ops []Op, opts ...Options) ([]json.RawMessage, error) {
	t.Helper()
	ctx, cancel := testContext(t)
	defer cancel()
	res, err := RunOpsContext(ctx, uri, ops, opts...)
	if errors.Is(err, errOpsOutput) {
		t.Fatalf("%v", err)
	}
	return res, err
}

var errOpsOutput = errors.New("oracle: unreadable ops output")

// RetryableConflict reports whether err is real Lance giving up an op
// because other commits kept landing first: a retryable commit conflict
// (e.g. a concurrent rewrite of the fragments an update or delete read), or
// its retry loop running out ("Too many concurrent writers"). Such an op
// committed nothing; a Lance application retries it.
func RetryableConflict(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "Retryable commit conflict") || strings.Contains(s, "Too many concurrent writers")
}

// RunOpsRetryingConflicts runs ops in order on one table like TryOps, and
// when real Lance refuses one with a RetryableConflict it resumes at that
// op (the ops before it committed), up to attempts tries of one op. It
// returns the retries it made and the first error it did not retry. Safe
// to call from a goroutine other than the test's.
func RunOpsRetryingConflicts(t testing.TB, uri string, ops []Op, attempts int, opts ...Options) (retries int, err error) {
	tries := 0
	for len(ops) > 0 {
		res, err := tryOps(t, uri, ops, opts...)
		if err == nil {
			return retries, nil
		}
		if len(res) > 0 {
			tries = 0
		}
		tries++
		if !RetryableConflict(err) || tries >= attempts || len(res) >= len(ops) {
			return retries, err
		}
		ops = ops[len(res):]
		retries++
	}
	return retries, nil
}

// RunOpsContext is RunOps without a testing.TB: safe to call from other
// goroutines (e.g. a real-Lance writer racing lanced's committers). Call
// Require in the test first. On failure it returns Lance's error and the
// results of the ops that succeeded before it.
func RunOpsContext(ctx context.Context, uri string, ops []Op, opts ...Options) ([]json.RawMessage, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("oracle: ops for %s: %w", uri, err)
	}
	out, runErr := runNode(ctx, "ops.mjs", nodeURI(uri), string(b), optionsJSON(opts))
	return decodeOps(uri, out, runErr)
}

// RunOpsProcess is RunOpsContext in a node process of its own (not the
// shared server, and not counted against the two-calls-at-a-time limit):
// for races between separate real-Lance writer processes. ctx bounds it.
func RunOpsProcess(ctx context.Context, uri string, ops []Op, opts ...Options) ([]json.RawMessage, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("oracle: ops for %s: %w", uri, err)
	}
	out, runErr := runProcess(ctx, "ops.mjs", nodeURI(uri), string(b), optionsJSON(opts))
	return decodeOps(uri, out, runErr)
}

func decodeOps(uri string, out []byte, runErr error) ([]json.RawMessage, error) {
	var res []json.RawMessage
	if len(bytes.TrimSpace(out)) > 0 {
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, fmt.Errorf("%w: ops on %s: %q: %v (run error: %v)", errOpsOutput, uri, out, err, runErr)
		}
	}
	return res, runErr
}

// Elapsed is an op result's own duration inside node (its "elapsed_ms"),
// without process start-up: for benchmarks that compare with real Lance.
func Elapsed(t testing.TB, res json.RawMessage) time.Duration {
	t.Helper()
	var r struct {
		ElapsedMs *float64 `json:"elapsed_ms"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.ElapsedMs == nil {
		t.Fatalf("oracle: no elapsed_ms in %s (%v)", res, err)
	}
	return time.Duration(*r.ElapsedMs * float64(time.Millisecond))
}
