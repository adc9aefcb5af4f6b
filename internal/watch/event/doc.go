// Package event decodes object-store notifications and maps them to table
// versions: S3 event JSON (direct, SNS-wrapped, EventBridge), GCS Pub/Sub
// notifications (attributes plus JSON payload, or the push envelope), and
// the root allow-list that decides which keys may name a table.
//
// It is pure: no I/O, no clock, no transport. Decoders take the message
// bytes and attributes; Roots.Ref takes a decoded event. Everything here is
// table-tested on real sample payloads in testdata/ and fuzzed
// (FuzzDecode): no input panics, and no output escapes the roots.
//
// Invariants:
//   - Every decode error wraps ErrUndecodable; every Ref error wraps exactly
//     one of ErrNotCreated, ErrNotManifest, ErrUnsafeKey, ErrOutsideRoots,
//     ErrBranch (DropReason names it for metrics).
//   - A key names only its own table: the prefix before "/_versions/", held
//     to the safe-key rules, inside a root of the same scheme and bucket at a
//     '/' boundary.
//
// Imports: the standard library and internal/format (VersionRef, manifest
// names) only. internal/watch re-exports the API; the split keeps the fuzz
// target's binary small (the sources link NATS and cloud SDKs).
package event
