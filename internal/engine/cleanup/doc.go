// Package cleanup implements Lance 8.0.0's cleanup_old_versions, checked
// file for file against real Lance: PlanCleanup is pure (which versions and
// files go, and why), Cleaner.Plan reads every manifest and lists the
// table, Cleaner.Execute deletes files before manifests, rate-limited and
// batched. Any unreadable manifest, unknown feature flag, base path or
// branch aborts with nothing deleted. The unreferenced files of abandoned
// or stale pending-output journal entries (engine/journal) go in the same
// pass.
package cleanup
