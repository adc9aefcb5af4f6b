// Package table reads and commits one Lance table: opening a root, finding
// the latest version by listing _versions/ (latest_version_hint.json is
// never trusted), loading manifests and transactions, deletion files, tags
// and branches, and the one-attempt commit primitive (Commit,
// CommitIndexed; notes in COMMIT.md) that writes the .txn and
// put-if-absents the next manifest, returning a *ConflictError with the
// concurrent transactions when it loses. Retrying and classification
// belong to the caller (engine.CommitJobs; SetConfig here is a small
// complete example).
package table
