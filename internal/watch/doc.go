// Package watch turns object-store events into table versions to evaluate:
// S3 notifications (via SQS directly, SNS-wrapped, or EventBridge), GCS
// Pub/Sub notifications, events on a NATS subject, and a poll sweep over
// configured roots, all coalesced per table. It never reads table contents.
//
// # Constructor API (what cmd/lanced wires)
//
//	metrics := watch.NewMetrics(reg)                 // once per process
//	roots, err := watch.ParseRoots(cfg.Tables...)    // the allow-list; "?query" kept
//	opts := watch.Options{Roots: roots, Logger: log, Metrics: metrics}
//
//	co := watch.NewCoalescer(watch.CoalescerConfig{Debounce: 5 * time.Second,
//		MaxDelay: time.Minute, Logger: log, Metrics: metrics}, submit)
//	go co.Run(ctx)              // calls submit(ctx, ref) once per evaluation
//	// The consumer calls co.Done(ref.Table) when the table's run ends, or
//	// sets CoalescerConfig.AutoDone when submit does the whole run.
//
//	src := watch.NewPubSubSource("awssqs://sqs.us-east-1.amazonaws.com/123/q?region=us-east-1", opts)
//	src := watch.NewPubSubSource("gcppubsub://projects/p/subscriptions/s", opts)
//	src, err := watch.NewNATSSource(nc, watch.NATSConfig{Subject: "s3.events.>", Stream: "LANCED_EVENTS"}, opts)
//	src, err := watch.NewPollSource(watch.PollConfig{URIs: cfg.Tables, Interval: 10 * time.Minute}, opts)
//	go src.Run(ctx, co.Add)     // every Source feeds the coalescer
//
//	store.Open(ctx, roots.OpenURI(ref.Table)) // re-attach the root's connection query
//
// Sink is func(context.Context, format.VersionRef) error; Source is
// interface{ Run(ctx, sink) error }. VersionRef.Table is the canonical
// table root URI without any query (s3://bucket/prefix/table.lance,
// gs://…, file:///…), the same whichever source reported it, so the
// coalescer merges them; Roots.OpenURI adds the connection query of the
// most specific configured root back for opening the table.
//
// # Decoding and filtering
//
// Decode accepts every supported message shape and returns ObjectEvents
// (scheme, bucket, URL-decoded key, created or not). Roots.Ref maps an event
// to a VersionRef only when the key is a committed manifest directly under
// "<table>/_versions/" (V1 "{v}.manifest" or V2 inverted 20-digit names,
// parsed by format.ParseManifestName; detached "d{v}.manifest", staging
// and temporary names are ignored), the key is safe (no "." or ".."
// segments, no empty segments, no leading '/', no '%', '\\', '?', '#' or
// control characters), and the table lies inside an allow-listed root of
// the same scheme and bucket at a '/' boundary ("tables" does not admit
// "tables2"). Branch manifests (<t>.lance/tree/…) and LanceDB's
// __manifest namespace table are ignored.
//
// # Invariants
//
//   - A message is acknowledged only after the sink returned nil for every
//     version it named; undecodable messages are logged, counted
//     (lanced_watch_messages_total{outcome="undecodable"}) and acknowledged.
//   - A key can only name its own table: the table is the key's prefix
//     before "/_versions/", never anything the key points elsewhere.
//   - Message sources survive a failing subscription or consumer: it is
//     reopened with backoff (lanced_watch_source_restarts_total); only a
//     subscription that cannot be opened at start returns from Run.
//   - The coalescer emits at most one evaluation per table per debounce
//     window and never hands out a table that is still busy.
//
// # Imports
//
// watch imports internal/format (VersionRef, manifest names) and
// internal/store (the poll source lists through it), Go CDK pubsub with its
// awssnssqs, gcppubsub and mempubsub drivers (which link the cloud SDKs;
// watch calls no SDK itself), prometheus client_golang, and nats.go: the
// NATS source is the one place outside internal/scheduler allowed to
// import nats.go. It never imports scheduler, engine or policy.
//
// Logging uses the fixed keys (table, version, err) plus source and reason;
// metrics are lanced_watch_* on an injected registerer.
package watch
