// Package scheduler runs lanced's maintenance work on NATS JetStream.
//
// It owns four things:
//
//   - The task queue: a work-queue stream LANCED_TASKS with subjects
//     lanced.task.<kind>. Every publication of a task names its attempt
//     in Nats-Msg-Id: the first attempt is the task's key, so planning the
//     same (table, read version, kind, fragments) twice inside the
//     stream's duplicate window, a publish retried after a timeout, or two
//     coordinators racing at a lease takeover, enqueues it once. A task
//     whose copy ended without being committed (failed, given up or
//     dropped at commit: CommitReport.Dropped) is recorded with that
//     copy's stream sequence (tableState.redo, and in the range's lease
//     record); planned again, it is a new attempt, key#<that sequence>,
//     which every node knowing of the ended copy derives alike and which
//     is enqueued once too. A task that was abandoned (it cannot succeed
//     on the table, or it exhausted its deliveries) is not queued again at
//     its read version (tableState.abandoned, also in the lease record
//     while the range is held: a node that takes a released range and
//     plans the table at that version queues such a task once more, and
//     then knows it as abandoned too); the table's next version is
//     planned afresh. A task that ends without being committed (any
//     result but done or corrupt, a commit abandoned or dropped) marks
//     its table for a plan at once: plans made while it was in flight
//     planned around it, and no new version may follow to plan that work
//     once the table's writer stopped. A result's Nats-Msg-Id
//     (and header Lanced-Task-Seq) names its task message, so each copy's
//     result is stored once. One durable pull consumer (lanced-workers) serves every node; AckWait, MaxDeliver and
//     BackOff come from Config.
//   - Workers: each message gets its own context.WithCancelCause; a heartbeat
//     calls InProgress every AckWait/3 while the Executor runs; the outcome is
//     mapped to exactly one ack verb by disposition (done → Ack, stale →
//     TermWithReason, transient → NakWithDelay, incompatible/invalid → Term,
//     corrupt → Term and the table held, shutdown → Nak). A task that exhausts
//     MaxDeliver is copied to the dead-letter stream LANCED_DEAD
//     (lanced.dead.<kind>) from the server's MAX_DELIVERIES advisory and
//     removed from the work queue.
//   - Coordination: one coordinator per table across all nodes, decided by
//     leases on hash ranges of tables: a table belongs to one of 64 ranges
//     (a hash of its TableID), and the node holding a range's lease in the
//     JetStream KV bucket LANCED_LEASES (key range-NN; create-if-absent,
//     renewed with revision checks, taken over by CAS once its stored
//     deadline passed) coordinates every table of the range. So a burst
//     over many tables costs one lease write per range, and a table whose
//     range is held here starts its coordinator without a round trip. A
//     table's coordinator stays for LeaseLinger after the table goes idle,
//     so the next burst of versions is planned at once; the range's lease
//     is released when its last coordinator stops, and when the node
//     exits. Each renewal records the range's tables with their in-flight
//     task keys, so a node taking over an expired range plans every table
//     the previous holder coordinated (and every table of the range it
//     heard of) around the tasks still running. Each node watches the
//     bucket (one watch per node) to skip tables of ranges another node
//     holds without a round trip, and takes a released lease with one
//     compare-and-set on the delete marker it saw. Announced tables wait
//     in two queues served by pools: a lease queue (leaseAttempts attempts
//     side by side, each node taking a burst's tables in its own hash
//     order; a free range is taken in turns: the live nodes, in id order,
//     each have the first turn at every n-th range, and a node whose turn
//     it is not puts the table back for leaser.turn per turn before it,
//     by when the lease view shows the range taken, so one burst costs
//     one lease write per range and leaves the ranges spread evenly;
//     tables of a range being taken wait for that one attempt, holding
//     no slot) and a
//     plan queue (Config.Planners planners, first due first served), so
//     planning never waits for the table's coordinator, which reads
//     results and commits.
//     One loop per node renews every held range lease. Only the lease holder plans a
//     table, feeds its tasks into the queue (round-robin across tables, a
//     per-table in-flight cap, a global queue-depth cap), reads the table's
//     results and commits them in micro-batches through the Committer.
//     Results live in stream LANCED_RESULTS under lanced.result.<table id>;
//     there is no consumer per table: the holder reads its subject by
//     sequence (a message get from the stream leader), removes each result
//     once committed or rejected, and is woken by one subscription per node
//     on lanced.result.* (a busy table also looks every few seconds). A new
//     holder reads the subject from the start and so inherits every result
//     the old one left.
//   - Follow-up tasks: a commit may ask for more tasks of the table
//     (CommitReport.Followups: the index remaps of a rewrite batch, the
//     join of a sliced task once its slices are in) and keep
//     results back for them (CommitReport.Kept): each kept result is
//     published again with the keys it waits for (Result.After, header
//     Lanced-After; its Nats-Msg-Id names the message it is published
//     from, so a publish retried is stored once while a result kept
//     again later is a new message) before the batch's messages are
//     removed, and is left out
//     of commits, with the results it names or that name it, while any of
//     those tasks is pending or in flight; results so linked are committed
//     together, never cut by the batch size. The planner sees kept results'
//     keys as in flight.
//   - Orphans: every few seconds each node looks for results waiting for a
//     table nobody coordinates and for expired leases (their holder died)
//     and marks those tables for evaluation, so a dead coordinator's work is
//     finished without waiting for the table's next commit.
//   - Holds: a table whose task reported corruption is held (all nodes skip
//     it) and lanced_table_held{table} is 1. Each node watches LANCED_HOLDS,
//     so without Config.Holds checking a hold before a plan costs no round
//     trip. With Config.Holds the hold is
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
//   - A result message is removed from LANCED_RESULTS only after the
//     Committer accepted (or finally rejected) it.
//   - At no instant do two nodes both believe they hold one range's lease
//     (and so coordinate one table): every renewal is a compare-and-set on
//     the KV revision, and a holder stops every coordinator of the range as
//     soon as a renewal fails or its deadline passes. A range handed to
//     another node (rebalancing, see rebalance.go) is given up by its
//     holder, every coordinator of it stopped, before the record naming
//     the receiver is written. All nodes of a cluster should run a version
//     with range leases: a node of an earlier version leases single tables
//     and does not see range leases (newer nodes leave the tables it
//     leases to it, but it may take one of a range a newer node holds).
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
