// Package scheduler runs lanced's maintenance work on NATS JetStream.
//
// It owns four things:
//
//   - The task queue: a work-queue stream LANCED_TASKS with subjects
//     lanced.task.<kind>. Every task is published with Nats-Msg-Id set to its
//     key, so planning the same (table, read version, kind, fragments) twice
//     inside the stream's duplicate window enqueues it once. One durable pull
//     consumer (lanced-workers) serves every node; AckWait, MaxDeliver and
//     BackOff come from Config.
//   - Workers: each message gets its own context.WithCancelCause; a heartbeat
//     calls InProgress every AckWait/3 while the Executor runs; the outcome is
//     mapped to exactly one ack verb by disposition (done → Ack, stale →
//     TermWithReason, transient → NakWithDelay, incompatible/invalid → Term,
//     corrupt → Term and the table held, shutdown → Nak). A task that exhausts
//     MaxDeliver is copied to the dead-letter stream LANCED_DEAD
//     (lanced.dead.<kind>) from the server's MAX_DELIVERIES advisory and
//     removed from the work queue.
//   - Coordination: one coordinator per table across all nodes, decided by a
//     lease in the JetStream KV bucket LANCED_LEASES (create-if-absent, renewed
//     with revision checks, released when the table goes idle or the node
//     exits, taken over by CAS once its stored deadline passed). Only the lease
//     holder plans a table, feeds its tasks into the queue (round-robin across
//     tables, a per-table in-flight cap, a global queue-depth cap), consumes the
//     table's results (stream LANCED_RESULTS, subject lanced.result.<table id>,
//     one durable consumer per table so a new holder inherits results the old
//     one never saw) and commits them in micro-batches through the Committer.
//   - Orphans: every few seconds each node looks for results waiting for a
//     table nobody coordinates and for expired leases (their holder died)
//     and marks those tables for evaluation, so a dead coordinator's work is
//     finished without waiting for the table's next commit.
//   - Holds: a table whose task reported corruption is held (all nodes skip
//     it) and lanced_table_held{table} is 1. With Config.Holds the hold is
//     table state (internal/engine/hold) that one-shot commands see and
//     `lanced holds release` clears; the KV bucket LANCED_HOLDS indexes it.
//
// Seams, declared here and satisfied elsewhere: Planner (table → tasks),
// Executor (task → result; the engine), Committer (a batch of results → one
// commit). The queue is generic over task payloads (kind, key, table, bytes),
// so it does not depend on the engine's task types.
//
// Invariants:
//   - A task message is acked only after the Executor returned and its result
//     was published; it is never lost: a worker that dies or drains without
//     finishing leaves it to be redelivered.
//   - A result message is acked only after the Committer accepted (or finally
//     rejected) it.
//   - At no instant do two nodes both believe they hold one table's lease:
//     every renewal is a compare-and-set on the KV revision, and a holder stops
//     acting as coordinator as soon as a renewal fails or its deadline passes.
//
// Logging keys: table, version, read_version, task_id, kind, fragments,
// attempt, err, duration. Metrics are registered on the injected
// prometheus.Registerer as lanced_scheduler_* plus lanced_table_held and
// lanced_table_lag_versions.
//
// Imports: policy, engine and format (internal), nats.go (the only package
// besides cmd/lanced and internal/watch's NATS source that may). Tests use an
// embedded nats-server.
package scheduler
