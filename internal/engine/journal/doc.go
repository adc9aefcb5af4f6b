// Package journal is lanced's pending-output journal: a record, kept in the
// table's own store under _lanced/pending/<execution id>.json, of files a
// task wrote that no manifest references yet, so that a crash between an
// upload and its commit never leaks files. TaskJournal reads and writes
// entries; Keeper is one process's use of it (per-execution ids, start-up
// recovery of dead owners' entries, refreshes during long tasks, settling
// after a commit); RecordOutput is how executors report each file before
// writing it. Cleanup (engine/cleanup) deletes the unreferenced files of
// abandoned and stale entries.
package journal
