// Package store is lanced's object-store seam: one Bucket type over file://,
// mem://, s3:// and gs:// URIs, built on gocloud.dev/blob.
//
// It owns:
//   - opening a URI as a Bucket rooted at a prefix (a table root or a directory
//     of tables) and sub-roots that share the connection (Sub); gs:// URIs
//     take endpoint=http(s)://host:port to reach a GCS emulator or another
//     JSON-API endpoint (with anonymous=true: no credentials), e.g.
//     gs://lance/wh?endpoint=http://127.0.0.1:4443&anonymous=true;
//   - get, ranged get, ReaderAt (ranged GETs underneath), attributes, recursive
//     and one-level listing, put, streaming put, delete, and DeleteMany
//     (S3 DeleteObjects, 1000 keys per request);
//   - PutIfAbsent, the commit primitive, atomic across processes on every
//     backend: file:// writes a temp file in the target's directory and
//     link(2)s it into place (EEXIST means the key exists); S3 sends
//     If-None-Match: * (a 409 ConditionalRequestConflict is retried); GCS uses
//     a DoesNotExist precondition; mem:// checks under the bucket lock;
//   - PutIfMatch, compare-and-swap of an object against the generation
//     GetWithGeneration read (S3 If-Match: <ETag>, GCS ifGenerationMatch,
//     file:// a per-generation claim file and rename(2), atomic between the
//     processes of one host, mem:// under a lock): of writers replacing one
//     generation exactly one wins, the others get ErrPreconditionFailed;
//   - error classification: every error a Bucket returns is a *Error carrying an
//     ErrorCode; errors.Is(err, ErrNotFound) and errors.Is(err,
//     ErrPreconditionFailed) work on all of them, CodeOf gives the code;
//   - bounded waits on cloud stores: a connect gives up after 10s, a request
//     with no answer after 30s; such an endpoint, one refusing connections
//     or a host name that does not resolve is not retried (Unreachable), so
//     a one-shot command says "cannot reach ..." at once and the daemon's
//     task redelivery and sweeps come back to it later;
//   - the AWS SDK's log lines (its credential chain's included) go to slog:
//     warnings at Warn, the rest (and the IMDSv1 fallback off EC2) at Debug;
//   - optional Prometheus instrumentation (Instrument) and fault injection
//     (WithFaults) for tests.
//
// Invariants:
//   - Keys are relative to the bucket root, '/'-separated, and never escape it:
//     absolute keys, empty segments, "." and ".." segments and NUL bytes are
//     rejected with ErrInvalidKey before any I/O.
//   - Nothing is visible under a key until a write completes: Put and NewWriter
//     publish on a successful Close only; a failed or abandoned write (error,
//     cancelled context, Abort) leaves no object.
//   - No sidecar files: fileblob's .attrs metadata files are disabled; local
//     writes stage in a hidden temp file next to the target (".<name>.<rand>
//     .lanced.tmp", a name Lance ignores) that is renamed or linked into place
//     and removed on every path. A crash can leave such a temp file; cleanup
//     removes stale ones (TempSuffix). file:// listings read the directories
//     themselves (one stat per entry, in key order), not through fileblob,
//     whose listing tries to open a ".attrs" sidecar for every object.
//
// Imports: no internal packages. This is the only package that may import the
// AWS and GCS SDKs (through gocloud.dev's drivers).
package store
