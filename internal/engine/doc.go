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
//     manifest application and verification, and cleanup.
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
