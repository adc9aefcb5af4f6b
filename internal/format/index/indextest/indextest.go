// Package indextest holds the test helpers the index remap tests share: it
// reads the manifests real Lance wrote around its own compaction, models
// that compaction as an index.CompactionMapping, checks the mapping against
// the row addresses real Lance reports, and commits a version whose index
// entry points at a segment the test wrote, so real Lance can be asked to
// query through it. Tests only; files are local paths.
package indextest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// ReadManifest reads version v of the table at path.
func ReadManifest(t testing.TB, path string, v uint64) *format.Manifest {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(path, format.VersionsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		got, _, err := format.ParseManifestName(e.Name())
		if err != nil || got != v {
			continue
		}
		data, err := os.ReadFile(filepath.Join(path, format.VersionsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m, err := format.DecodeManifestFile(e.Name(), data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Fatalf("version %d not found", v)
	return nil
}

// Index returns the index entry named name in m.
func Index(t testing.TB, m *format.Manifest, name string) *tablepb.IndexMetadata {
	t.Helper()
	for _, ix := range m.Indices.GetIndices() {
		if ix.GetName() == name {
			return ix
		}
	}
	t.Fatalf("no index %s in version %d", name, m.Version())
	return nil
}

// UUID renders an index uuid as its directory name.
func UUID(t testing.TB, u *tablepb.UUID) string {
	t.Helper()
	id, err := uuid.FromBytes(u.GetUuid())
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// MappingFromManifests models the compaction between two versions: the
// fragments only pre has were rewritten, in id order, into the fragments
// only post has. It returns the mapping and the new fragment ids.
func MappingFromManifests(t testing.TB, path string, pre, post *format.Manifest) (*index.CompactionMapping, []uint64) {
	t.Helper()
	postIDs := map[uint64]bool{}
	for _, f := range post.PB.GetFragments() {
		postIDs[f.GetId()] = true
	}
	preIDs := map[uint64]bool{}
	var g index.RewriteGroup
	for _, f := range pre.PB.GetFragments() {
		preIDs[f.GetId()] = true
		if postIDs[f.GetId()] {
			continue
		}
		of := index.OldFragment{ID: f.GetId(), PhysicalRows: f.GetPhysicalRows()}
		if df := f.GetDeletionFile(); df != nil {
			key := format.DeletionFileKey(f.GetId(), df)
			data, err := os.ReadFile(filepath.Join(path, key))
			if err != nil {
				t.Fatal(err)
			}
			bm, err := format.DecodeDeletionFile(key, df.GetFileType(), data)
			if err != nil {
				t.Fatal(err)
			}
			of.Deleted = bm
		}
		g.Old = append(g.Old, of)
	}
	var newIDs []uint64
	for _, f := range post.PB.GetFragments() {
		if preIDs[f.GetId()] {
			continue
		}
		g.New = append(g.New, index.NewFragment{ID: f.GetId(), Rows: f.GetPhysicalRows()})
		newIDs = append(newIDs, f.GetId())
	}
	m, err := index.NewCompactionMapping([]index.RewriteGroup{g})
	if err != nil {
		t.Fatal(err)
	}
	return m, newIDs
}

// CheckMapping: for every live row, Map(address before) is the address real
// Lance gives the same id after its compaction.
func CheckMapping(t testing.TB, path string, pre, post uint64, m index.Mapping) {
	t.Helper()
	a, b := oracle.RowAddrsByID(t, path, pre), oracle.RowAddrsByID(t, path, post)
	if len(a) != len(b) {
		t.Fatalf("%d live rows before, %d after", len(a), len(b))
	}
	for id, old := range a {
		got, ok := m.Map(old)
		if !ok || got != b[id] {
			t.Fatalf("id %d: mapping sends %d to (%d, %v), Lance put it at %d", id, old, got, ok, b[id])
		}
	}
}

// Create creates a file the test closes at its end.
func Create(t testing.TB, p string) *os.File {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Swap replaces index entry Old by a copy pointing at segment ID, whose
// Files are in _indices/<ID>/.
type Swap struct {
	Old   *tablepb.IndexMetadata
	ID    uuid.UUID
	Files []string
	// Fragments, when not nil, replaces the entry's fragment bitmap (a
	// catch-up that indexed more fragments).
	Fragments *roaring.Bitmap
}

// CommitIndexSwap writes version post+1: post's manifest with each swap's
// index entry replaced by a copy pointing at its uuid, listing its files
// with their sizes (lance 8.0.0 reads each file's tail at the recorded
// size); name, fields, details, version and fragment bitmap are kept.
func CommitIndexSwap(t testing.TB, path string, post *format.Manifest, swaps ...Swap) {
	t.Helper()
	sec := &tablepb.IndexSection{}
	for _, ix := range post.Indices.GetIndices() {
		for _, sw := range swaps {
			if ix != sw.Old {
				continue
			}
			cp := proto.Clone(ix).(*tablepb.IndexMetadata)
			cp.Uuid = &tablepb.UUID{Uuid: sw.ID[:]}
			cp.Files = nil
			for _, name := range sw.Files {
				st, err := os.Stat(filepath.Join(path, "_indices", sw.ID.String(), name))
				if err != nil {
					t.Fatal(err)
				}
				cp.Files = append(cp.Files, &tablepb.IndexFile{Path: name, SizeBytes: uint64(st.Size())})
			}
			if sw.Fragments != nil {
				b, err := sw.Fragments.ToBytes()
				if err != nil {
					t.Fatal(err)
				}
				cp.FragmentBitmap = b
			}
			ix = cp
			break
		}
		sec.Indices = append(sec.Indices, ix)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(sec)
	if err != nil {
		t.Fatal(err)
	}
	pb := proto.Clone(post.PB).(*tablepb.Manifest)
	v := post.Version() + 1
	pb.Version = v
	pb.TransactionFile = ""
	data, err := format.EncodeManifest(pb, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(filepath.Join(path, format.VersionsDir))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	naming, err := format.DetectNaming(names)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, format.ManifestKey(naming, v)), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Dir is a segment directory on local disk: the index.SegmentReader of an
// old segment or the index.SegmentWriter of a new one.
type Dir string

// Files lists the directory's files with their sizes, sorted by name.
func (d Dir) Files(ctx context.Context) ([]index.SegmentFile, error) {
	ents, err := os.ReadDir(string(d))
	if err != nil {
		return nil, err
	}
	var out []index.SegmentFile
	for _, e := range ents {
		st, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, index.SegmentFile{Name: e.Name(), Size: st.Size()})
	}
	return out, nil
}

// Open opens one file; it stays open until the process ends (tests only).
func (d Dir) Open(ctx context.Context, name string) (io.ReaderAt, int64, error) {
	f, err := os.Open(filepath.Join(string(d), name))
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// Create creates one file, making the directory first.
func (d Dir) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(string(d), name))
	if err != nil {
		return nil, err
	}
	return &onceCloser{f: f}, nil
}

// onceCloser lets Close be called again, as index.SegmentWriter allows.
type onceCloser struct {
	f      *os.File
	closed bool
}

func (c *onceCloser) Write(p []byte) (int, error) { return c.f.Write(p) }

func (c *onceCloser) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.f.Close()
}

// Compaction is real Lance's optimize() of a table whose state before it
// is Pre, modelled as a mapping.
type Compaction struct {
	Pre, Post   oracle.Report
	PreM, PostM *format.Manifest
	Mapping     *index.CompactionMapping
	// NewFragments are the fragments the compaction wrote.
	NewFragments []uint64
}

// Compact runs real Lance's optimize() on the table at path (whose latest
// version is pre), checks that it kept the rows, and builds the mapping of
// its compaction, checked row by row against Lance's row addresses.
func Compact(t testing.TB, path string, pre oracle.Report) Compaction {
	t.Helper()
	c := Compaction{Pre: pre}
	oracle.RunOps(t, path, []oracle.Op{{"op": "optimize"}})
	c.Post = oracle.Inspect(t, path, 0)
	if c.Post.Rows != pre.Rows {
		t.Fatalf("optimize changed rows %d -> %d", pre.Rows, c.Post.Rows)
	}
	c.PreM = ReadManifest(t, path, pre.Version)
	c.PostM = ReadManifest(t, path, c.Post.Version)
	c.Mapping, c.NewFragments = MappingFromManifests(t, path, c.PreM, c.PostM)
	CheckMapping(t, path, pre.Version, c.Post.Version, c.Mapping)
	return c
}

// LanceRemap finds real Lance's own remap of index name in the compaction:
// the first version after Pre whose entry has another uuid (optimize() may
// rebuild the index again afterwards). It returns that segment's directory
// and the version.
func (c Compaction) LanceRemap(t testing.TB, path, name string) (string, uint64) {
	t.Helper()
	old := UUID(t, Index(t, c.PreM, name).GetUuid())
	for v := c.Pre.Version + 1; v <= c.Post.Version; v++ {
		if u := UUID(t, Index(t, ReadManifest(t, path, v), name).GetUuid()); u != old {
			return filepath.Join(path, "_indices", u), v
		}
	}
	t.Fatalf("real Lance's optimize did not remap %s", name)
	return "", 0
}
