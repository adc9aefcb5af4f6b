package scheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Stream, subject and bucket names. They are part of the wire contract
// between lanced nodes of one cluster.
const (
	TasksStream   = "LANCED_TASKS"
	ResultsStream = "LANCED_RESULTS"
	DeadStream    = "LANCED_DEAD"
	LeaseBucket   = "LANCED_LEASES"
	HoldBucket    = "LANCED_HOLDS"
	WorkerDurable = "lanced-workers"

	taskSubjectPrefix   = "lanced.task."
	resultSubjectPrefix = "lanced.result."
	deadSubjectPrefix   = "lanced.dead."
	pokeSubjectPrefix   = "lanced.poke."
	pokeBatchSubject    = "lanced.pokes"
)

// Message headers carrying the task envelope; the message data is the payload.
const (
	hdrKind    = "Lanced-Kind"
	hdrTable   = "Lanced-Table"
	hdrKey     = "Lanced-Key"
	hdrWorker  = "Lanced-Worker"
	hdrError   = "Lanced-Error"
	hdrOutcome = "Lanced-Outcome"
	hdrBytesR  = "Lanced-Bytes-Read"
	hdrBytesW  = "Lanced-Bytes-Written"
	hdrVersion = "Lanced-Read-Version"
	hdrAfter   = "Lanced-After"
	hdrTaskSeq = "Lanced-Task-Seq"
)

// ErrInvalidTaskEnvelope is returned for a queue message without the headers
// every lanced task carries.
var ErrInvalidTaskEnvelope = errors.New("invalid task envelope")

// Task is one unit of work on the queue. The scheduler does not interpret
// Payload; the Planner produces it and the Executor consumes it.
type Task struct {
	// Kind names the task type ("rewrite", "repack", ...). It becomes the
	// subject token lanced.task.<kind>, so it must be a single subject token.
	Kind string
	// Key identifies the work for deduplication: table, read version, kind
	// and fragments. Equal keys are the same task.
	Key string
	// Table is the table URI the task belongs to.
	Table string
	// ReadVersion is the table version the task was planned against.
	ReadVersion uint64
	// Payload is the engine's serialized task.
	Payload []byte
}

// Result is what a worker sends back to the table's coordinator.
type Result struct {
	Task Task
	// Payload is the engine's serialized result (files written, rows, ...).
	Payload []byte
	// BytesRead and BytesWritten feed lanced_scheduler_bytes_total.
	BytesRead, BytesWritten int64
	// FragmentsBefore/After and RowsBefore/After are what the task
	// replaced and what it wrote (logged on "task done"; not sent to the
	// coordinator).
	FragmentsBefore, FragmentsAfter int
	RowsBefore, RowsAfter           uint64
	// Worker is the node that executed the task.
	Worker string
	// After are keys of tasks of the same table whose results this one
	// is committed with: the coordinator keeps it out of commits while
	// any of them is still pending or in flight (a rewrite waiting for the
	// remaps of its indices; CommitReport.Kept).
	After []string
	// taskSeq is the task message's stream sequence (header
	// Lanced-Task-Seq; 0 when the result does not say).
	taskSeq uint64
}

// TableID is the subject- and KV-safe identifier of a table URI.
func TableID(table string) string {
	sum := sha256.Sum256([]byte(table))
	return hex.EncodeToString(sum[:12])
}

func validKind(kind string) bool {
	if kind == "" {
		return false
	}
	for _, r := range kind {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func (t Task) validate() error {
	if !validKind(t.Kind) {
		return fmt.Errorf("task kind %q: want [a-z0-9_-]+", t.Kind)
	}
	if t.Key == "" || t.Table == "" {
		return fmt.Errorf("task kind %s: empty key or table", t.Kind)
	}
	return nil
}

func taskMsg(t Task) *nats.Msg {
	m := nats.NewMsg(taskSubjectPrefix + t.Kind)
	m.Header.Set(hdrKind, t.Kind)
	m.Header.Set(hdrTable, t.Table)
	m.Header.Set(hdrKey, t.Key)
	m.Header.Set(hdrVersion, strconv.FormatUint(t.ReadVersion, 10))
	m.Data = t.Payload
	return m
}

func taskFromHeaders(h nats.Header, data []byte) (Task, error) {
	t := Task{Kind: h.Get(hdrKind), Table: h.Get(hdrTable), Key: h.Get(hdrKey), Payload: data}
	if v := h.Get(hdrVersion); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return t, fmt.Errorf("%w: read version %q", ErrInvalidTaskEnvelope, v)
		}
		t.ReadVersion = n
	}
	if t.Kind == "" || t.Table == "" || t.Key == "" {
		return t, fmt.Errorf("%w: missing kind, table or key header", ErrInvalidTaskEnvelope)
	}
	return t, nil
}

func resultMsg(r Result) *nats.Msg {
	m := taskMsg(r.Task)
	m.Subject = resultSubjectPrefix + TableID(r.Task.Table)
	m.Header.Set(hdrWorker, r.Worker)
	m.Header.Set(hdrBytesR, strconv.FormatInt(r.BytesRead, 10))
	m.Header.Set(hdrBytesW, strconv.FormatInt(r.BytesWritten, 10))
	if len(r.After) > 0 {
		after, _ := json.Marshal(r.After)
		m.Header.Set(hdrAfter, string(after))
	}
	if r.taskSeq != 0 {
		m.Header.Set(hdrTaskSeq, strconv.FormatUint(r.taskSeq, 10))
	}
	m.Data = r.Payload
	return m
}

func resultFromMsg(h nats.Header, data []byte) (Result, error) {
	t, err := taskFromHeaders(h, nil)
	if err != nil {
		return Result{}, err
	}
	r := Result{Task: t, Payload: data, Worker: h.Get(hdrWorker)}
	r.BytesRead, _ = strconv.ParseInt(h.Get(hdrBytesR), 10, 64)
	r.BytesWritten, _ = strconv.ParseInt(h.Get(hdrBytesW), 10, 64)
	r.taskSeq, _ = strconv.ParseUint(h.Get(hdrTaskSeq), 10, 64)
	if a := h.Get(hdrAfter); a != "" {
		if err := json.Unmarshal([]byte(a), &r.After); err != nil {
			return Result{}, fmt.Errorf("%w: %s header: %v", ErrInvalidTaskEnvelope, hdrAfter, err)
		}
	}
	return r, nil
}
