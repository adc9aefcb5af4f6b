// Package cleanup implements Lance 8.0.0's cleanup_old_versions, checked
// file for file against real Lance: PlanCleanup is pure (which versions and
// files go, and why), Cleaner.Plan reads every manifest and lists the
// table, Cleaner.Execute deletes files before manifests, rate-limited and
// batched. Any unreadable manifest, unknown feature flag, base path or
// branch aborts with nothing deleted. The unreferenced files of abandoned
// or stale pending-output journal entries (engine/journal) go in the same
// pass. Versions and tags are read through engine/table.
//
// Scheduler decides when a daemon cleans a table: on a trigger (after a
// maintenance commit, after a plan with nothing to do), at most once per
// the table's minimum interval (later triggers wait for its end), never on
// a held table, and never while a commit of the same table runs on this
// node (LockTable). The caller's policy decides, per table, from its latest
// manifest, whether and with which options (Settings).
package cleanup
