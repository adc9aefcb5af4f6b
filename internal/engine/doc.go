// Package engine reads and commits Lance tables and executes maintenance
// tasks on them.
//
// It owns:
//   - table I/O (table.go, table_refs.go): opening a table root, finding the
//     latest version by listing _versions/ (latest_version_hint.json is
//     never trusted), loading manifests, transactions, deletion files, tags
//     and branches;
//   - the commit primitive (commit.go, notes in COMMIT.md): one attempt that
//     writes the .txn and put-if-absents the next manifest, returning a
//     *ConflictError with the concurrent transactions when it loses;
//   - task types, execution (rewrite, repack), conflict classification,
//     manifest application and verification, and cleanup;
//   - cleanup (cleanup_plan.go pure, cleanup_exec.go I/O): Lance 8.0.0's
//     cleanup_old_versions rules, checked file for file against real Lance;
//     any unreadable manifest, unknown feature flag, base path or branch
//     aborts with nothing deleted; files go before manifests;
//   - the pending-output journal (cleanup_journal.go): tasks record files
//     they wrote but have not committed in the table's own store under
//     _lanced/pending/<task id>.json (outside Lance's directories, so any
//     node can recover any other's dead task); cleanup deletes the
//     unreferenced files of abandoned or stale entries in its next pass.
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
// Imports: internal/format and internal/store only (plus the protobuf,
// roaring and arrow runtimes). Logging uses log/slog with the keys listed in
// design.md; metrics are registered on an injected prometheus.Registerer.
package engine
