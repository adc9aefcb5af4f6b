package job

import "strings"

// The page rule: a rewrite that copies encoded pages keeps every source
// page, where a re-encode writes about one page per column per
// lancewrite.DefaultPageBytes. Readers fetch each page with its own
// request, so an extra page is charged what a request is worth in bytes on
// the table's store, and pages are copied only while those charges add at
// most CopyMaxOverhead to the bytes a full scan reads.
//
// The charge is Lance's own: its reader merges two byte ranges into one
// request when the gap between them is under the store's block size, 4 KiB
// for local files and 64 KiB for object stores (DEFAULT_LOCAL_BLOCK_SIZE and
// DEFAULT_CLOUD_BLOCK_SIZE in
// https://github.com/lancedb/lance/blob/main/rust/lance-io/src/object_store.rs).
const (
	LocalPageCost   = 4 << 10
	RemotePageCost  = 64 << 10
	CopyMaxOverhead = 0.25
)

// PageCost is what one extra page is worth in bytes on the store of the
// table at uri: LocalPageCost for a local path or file:// URI,
// RemotePageCost for anything else (object stores, mem://).
func PageCost(uri string) int64 {
	if !strings.Contains(uri, "://") || strings.HasPrefix(uri, "file://") {
		return LocalPageCost
	}
	return RemotePageCost
}
