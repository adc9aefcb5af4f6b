// Package engine executes maintenance jobs on Lance tables and commits them.
//
// Shape (each subpackage has its own doc):
//
//	engine/job       leaf, no I/O: task and result types shared with the
//	                 planner, the Job and Op interfaces, conflict rules,
//	                 manifest application and verification per kind
//	engine/table     the only code that lists _versions/: open, latest
//	                 version, manifests, transactions, deletions, tags,
//	                 branches, the one-attempt commit primitive, config
//	                 (tabletest: the tests' "open table, latest manifest")
//	engine/scan      the one fragment reader (projection, take, deletions,
//	                 format-version, base-path and field-split checks),
//	                 used by scan/take and by the rewrite and repack
//	engine/journal   the pending-output journal and its per-process keeper
//	engine/quarantine corrupt fragments, left out until they change
//	engine/hold      operator holds (table state)
//	engine/drift     how far catch-up vectors are from each vector index's
//	                 centroids (table state, _lanced/drift.json)
//	engine/cleanup   Lance's cleanup_old_versions, planned and executed,
//	                 and the Scheduler that decides when it runs
//	engine/failpoint crash points for kill tests
//	engine/progress  how far a task or cleanup has come (Reporter on the
//	                 context, Counter read by the CLI, logs and status)
//	engine (here)    executing each kind (rewrite.go, repack.go, remap.go,
//	                 catchup.go), the one commit loop (CommitJobs), and
//	                 the Runner that both `lanced compact` (Compact) and
//	                 the daemon use
//
// Index remap (remap.go): a rewrite planned with index_coverage "remap" on
// a table without stable row ids gets its indices remapped before its
// commit. Runner.Commit reserves the new fragment ids of the batch's
// rewrites with one ReserveFragments commit (index files hold row
// addresses, so the ids must be fixed first, as in lance 8.0.0's
// compaction), then runs one remap task per index segment of the latest
// version that covers a rewritten fragment, through Execute like any task:
// the mapping is rebuilt from the read version's deletion files and the
// groups (no per-row map), the kind's registered index.Remapper writes
// _indices/<new uuid>/. The remap jobs join the Rewrite transaction
// (job.RewriteTxn pairs them with their rewrites and refuses the unpaired).
// Under index_coverage "defer" the same happens for the kinds that are not
// deferred; for the deferred ones (index.Deferrable: bitmap, ivfFlat,
// ivfPq, ivfRq) the rewrite records its groups in the fragment reuse index
// instead (job/deferred.go) and no index file is written.
//
// Row slices (slice.go): a rewrite of one fragment or a repack planned with
// Slices runs as one slice task per row range, each writing its rows as
// file pieces, and a join task that concatenates the pieces by page copy
// (lancewrite.ConcatRows) into the parent's output, which commits like the
// unsliced task. Runner.Commit takes slices out first (prepareSlices):
// when all of a task's slices are in, it runs the join (or, with
// QueueJoins, hands it to workers while the slices wait); the pieces are
// deleted once the join's output is there.
//
// One job model: a task is planned against a read version; executing it
// (Runner.Execute) writes files, recorded in the journal first, and yields
// a job.Job; Runner.Commit groups jobs by their Op and read version and
// calls CommitJobs once per group: build on the latest manifest (Op.Build),
// on a lost race classify every transaction committed since against every
// job (Job.Classify), drop the incompatible ones (their files deleted),
// rebase and retry the rest with jittered backoff, verify the committed
// manifest, and settle the journal.
//
// Errors: every error the engine returns has exactly one Outcome
// (outcome.go, Classify): Retry (transient), Drop (stale), Abandon (a
// malformed task), Skip (unsupported: the planner skips it with the reason
// and never queues it), Quarantine (corrupt input: Runner.Execute records
// the fragment and file in engine/quarantine; without a fragment to blame
// the table is held) or Hold. A test walks every exported Err* in the tree.
//
// Adding a job kind: define its task in engine/job (a field of the Task
// union, Kind, Validate, Key) and its executed form implementing job.Job
// (Classify against a committed transaction; Op, the transaction it joins:
// a new Op, or an existing one whose Build learns to apply it, as an index
// remap joins the Rewrite transaction); add the executor to
// Runner.Execute; the planner emits the task. The commit loop, the journal,
// the daemon's queueing and `lanced compact` need no change.
//
// Invariants:
//   - Nothing becomes visible before the manifest put succeeds; a lost or
//     failed attempt deletes what it wrote when that is known to be safe.
//   - Manifests are never overwritten; the naming scheme of a new version is
//     the latest version's.
//   - Tables with unknown feature flags are never written
//     (format.ErrUnsupportedFeature); reading their stats is allowed.
//   - Messages are edited (proto.Clone of the latest), never rebuilt, so
//     unknown fields and index metadata are carried through.
//
// Imports: internal/format and internal/store (plus the protobuf, roaring
// and arrow runtimes). Logging uses log/slog with fixed keys (table,
// version, task_id, kind, fragments, attempt, err, duration); metrics are
// registered on an injected prometheus.Registerer.
package engine
