// Package storetest holds test helpers for the object-store seam: an
// in-process S3 emulator (gofakes3 with the s3mem backend) and GCS emulator
// (fsouza/fake-gcs-server, in memory) that both store.Open and real Lance
// can use, and Run, the conformance suite every
// store backend must pass.
//
// It imports internal/store and test-only dependencies; production code must
// not import it.
package storetest
