package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// A Remapper rewrites one index segment for a compaction: it reads the old
// segment's files, passes every row address through the Mapping (dropping
// rows the rewrite deleted) and writes the new segment's files. It is what
// Lance's remap_index does for one index type
// (https://github.com/lancedb/lance/blob/main/rust/lance/src/index.rs,
// remap_index), per index kind.
//
// The engine moves the bytes: it hands the remapper a SegmentReader over
// _indices/<old uuid>/ and a SegmentWriter over _indices/<new uuid>/, records
// the exact size of every file written, and commits the new segment with
// the old segment's name, fields, index_details and index_version (Lance's
// remap leaves them unchanged) and the remapped fragment bitmap.
//
// Implementations register themselves from their package's init
// (RegisterRemapper); internal/engine/job imports every index sub-package so
// the planner and the engine see the same registry.
type Remapper interface {
	// Check reports, from the metadata alone, whether this remapper can
	// remap the segment; nil when it can. An error says why not (it is
	// shown in lanced plan and policy explain) and should wrap
	// ErrNoRemapper. Check does no I/O.
	Check(seg *tablepb.IndexMetadata) error
	// Remap writes the remapped segment. It may find out only from the
	// files that it cannot remap them: it then returns an error wrapping
	// ErrNoRemapper (or its package's unsupported sentinel), writes
	// nothing the engine will reference, and the engine keeps the
	// fragments this segment covers. Memory must stay bounded by the
	// segment's unit of work (a partition, a page), never the whole index.
	Remap(ctx context.Context, req RemapRequest) (RemapResult, error)
}

// RemapRequest is one segment's remap.
type RemapRequest struct {
	// Segment is the old segment's metadata as the read version holds it
	// (name, fields, index_details, files with their sizes, bitmap).
	Segment *tablepb.IndexMetadata
	// Kind is Detect(Segment).
	Kind Kind
	// Mapping maps the old row addresses; rows it reports deleted are
	// dropped. Rows of fragments no group rewrote map to themselves.
	Mapping Mapping
	// Groups are the rewrite groups the mapping was built from, with the
	// new fragment ids fixed (reserved) before the remap runs. A remapper
	// that keeps per-fragment state (a fragment list, a deleted-fragments
	// bitmap) reads it here; most only need Mapping.
	Groups []RewriteGroup
	// Old reads the old segment's files.
	Old SegmentReader
	// New writes the new segment's files.
	New SegmentWriter
	// Seed makes randomized rebuilds (HNSW levels) reproducible: the same
	// request writes the same bytes.
	Seed uint64
	// Rows streams the indexed column's live rows of every fragment the
	// remapped segment covers after the rewrite, with their new row
	// addresses, in address order: a remapper that rebuilds the segment
	// from the column (FM) reads it, the others never call it. Nil when
	// the engine cannot read them.
	Rows RowSource
	// BuildBytes bounds what a remapper that rebuilds from the column
	// holds at once (FM: one partition's text); 0: its default.
	BuildBytes int64
}

// RemapResult summarizes a remap.
type RemapResult struct {
	// Rows is the number of index entries written; Dropped the entries the
	// mapping deleted.
	Rows, Dropped uint64
}

// SegmentFile is one file of a segment: its name inside the segment
// directory and its size in bytes.
type SegmentFile struct {
	Name string
	Size int64
}

// SegmentReader gives read access to the files of one segment directory.
type SegmentReader interface {
	// Files lists the segment's files, sorted by name: the metadata's
	// files when it records them, else a listing of the directory.
	Files(ctx context.Context) ([]SegmentFile, error)
	// Open opens one file (a name Files returned) for random access.
	Open(ctx context.Context, name string) (io.ReaderAt, int64, error)
}

// SegmentWriter creates the files of the new segment directory. A file
// exists only once its writer's Close returns nil; the engine records the
// bytes written as the file's size. Close may be called again after it
// returned (later calls return nil), so a remapper can defer it for its
// error paths. A writer may also have an Abort method, which discards the
// file (WriteFiles uses it on errors).
type SegmentWriter interface {
	Create(ctx context.Context, name string) (io.WriteCloser, error)
}

// ErrNoRemapper marks an index segment lanced cannot remap: its fragments
// are kept (not rewritten), with the reason shown.
var ErrNoRemapper = errors.New("no remapper for this index")

var (
	remapMu   sync.RWMutex
	remappers = map[Kind]Remapper{}
	// noRemap says, per kind without a remapper, why (RegisterNoRemap).
	noRemap = map[Kind]string{}
)

// RegisterNoRemap records why lanced has no remapper for kind k; CanRemap
// then names that reason instead of a generic one. Called from init.
func RegisterNoRemap(k Kind, reason string) {
	remapMu.Lock()
	defer remapMu.Unlock()
	noRemap[k] = reason
}

// RegisterRemapper registers r for kind k. It is called from init functions;
// registering a kind twice is a programming error and panics at start-up.
func RegisterRemapper(k Kind, r Remapper) {
	remapMu.Lock()
	defer remapMu.Unlock()
	if _, dup := remappers[k]; dup {
		panic(fmt.Sprintf("index: remapper for %s registered twice", k))
	}
	remappers[k] = r
}

// RemapperFor returns the remapper registered for kind k.
func RemapperFor(k Kind) (Remapper, bool) {
	remapMu.RLock()
	defer remapMu.RUnlock()
	r, ok := remappers[k]
	return r, ok
}

// RemapperKinds lists the kinds with a registered remapper, sorted.
func RemapperKinds() []Kind {
	remapMu.RLock()
	defer remapMu.RUnlock()
	out := make([]Kind, 0, len(remappers))
	for k := range remappers {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// CanRemap reports whether the segment can be remapped: nil, or an error
// wrapping ErrNoRemapper that names the index, its kind and the reason.
// System indices (fragment reuse, MemWAL) cover no rows and are never
// remapped: CanRemap refuses them too, callers handle them before.
func CanRemap(seg *tablepb.IndexMetadata) error {
	k := Detect(seg)
	r, ok := RemapperFor(k)
	if !ok {
		remapMu.RLock()
		why := noRemap[k]
		remapMu.RUnlock()
		if why != "" {
			return fmt.Errorf("%w: index %q is %s: %s", ErrNoRemapper, seg.GetName(), k, why)
		}
		return fmt.Errorf("%w: index %q is %s, which lanced cannot remap yet", ErrNoRemapper, seg.GetName(), k)
	}
	if err := r.Check(seg); err != nil {
		return fmt.Errorf("index %q (%s): %w", seg.GetName(), k, err)
	}
	return nil
}

// A PartRemapper is a Remapper that can also remap one segment in parts:
// the segment's units of work (IVF partitions, btree pages) are cut into contiguous
// ranges, each range is remapped on its own (by any worker, into a
// directory of its own) as file pieces, and a join concatenates the
// pieces into the segment's files by copying their pages, never decoding
// them, and writes the metadata that describes the whole file. The joined
// segment holds what Remap writes for the same request: the same units,
// rows and codes. Memory: one unit per part, like Remap.
type PartRemapper interface {
	Remapper
	// Parts cuts the old segment's units into at most n contiguous ranges
	// of about equal size (fewer when it has fewer units), read from the
	// segment's metadata only.
	Parts(ctx context.Context, old SegmentReader, n int) ([]PartRange, error)
	// RemapPart writes the pieces of units [r.Lo, r.Hi) through req.New.
	RemapPart(ctx context.Context, req RemapRequest, r PartRange) (RemapResult, error)
	// JoinParts writes the segment's files through req.New from the
	// pieces of every range, in order (parts[i] reads the directory
	// RemapPart wrote range i into), and the old segment (req.Old). The
	// result counts the rows written (Dropped is the parts' to report).
	// req.Mapping is not used.
	JoinParts(ctx context.Context, req RemapRequest, parts []SegmentReader) (RemapResult, error)
}

// PartRange is a range [Lo, Hi) of a segment's units of work.
type PartRange struct {
	Lo, Hi int
}

// PartRemapperFor returns the remapper of kind k if it remaps in parts.
func PartRemapperFor(k Kind) (PartRemapper, bool) {
	r, ok := RemapperFor(k)
	if !ok {
		return nil, false
	}
	pr, ok := r.(PartRemapper)
	return pr, ok
}

// CutRanges cuts units of the given sizes into at most n contiguous
// ranges of about equal total size: range k ends at the first unit where
// the running total reaches k/n of the whole. Every range holds at least
// one unit; n is capped at the number of units.
func CutRanges(sizes []uint64, n int) []PartRange {
	if n > len(sizes) {
		n = len(sizes)
	}
	if n <= 1 {
		if len(sizes) == 0 {
			return nil
		}
		return []PartRange{{0, len(sizes)}}
	}
	var total uint64
	for _, s := range sizes {
		total += s
	}
	out := make([]PartRange, 0, n)
	lo := 0
	var run uint64
	for i, s := range sizes {
		run += s
		k := uint64(len(out) + 1)
		left := len(sizes) - (i + 1) // units after i
		need := n - (len(out) + 1)   // ranges still to make after this one
		if len(out) < n-1 && (run*uint64(n) >= k*total || left == need) {
			out = append(out, PartRange{lo, i + 1})
			lo = i + 1
		}
	}
	return append(out, PartRange{lo, len(sizes)})
}
