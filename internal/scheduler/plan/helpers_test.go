package plan

import (
	"bytes"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// col is a schema field for tests: id, name, parent (-1 top level).
type col struct {
	id     int32
	name   string
	parent int32
	blob   bool
}

func top(id int32, name string) col                 { return col{id: id, name: name, parent: -1} }
func child(id int32, name string, parent int32) col { return col{id: id, name: name, parent: parent} }
func blobCol(id int32, name string) col             { return col{id: id, name: name, parent: -1, blob: true} }

func fields(cols ...col) []*filepb.Field {
	out := make([]*filepb.Field, len(cols))
	for i, c := range cols {
		f := &filepb.Field{Id: c.id, Name: c.name, ParentId: c.parent, LogicalType: "int32"}
		if c.blob {
			f.LogicalType = "large_binary"
			f.Metadata = map[string][]byte{blobMetaKey: []byte("true")}
		}
		out[i] = f
	}
	return out
}

// v20 is a V2.0 data file with the given fields and recorded size.
func v20(path string, size uint64, ids ...int32) *tablepb.DataFile {
	ci := make([]int32, len(ids))
	for i := range ci {
		ci[i] = int32(i)
	}
	return &tablepb.DataFile{Path: path, Fields: ids, ColumnIndices: ci, FileMajorVersion: 0, FileMinorVersion: 3, FileSizeBytes: size}
}

func legacy(path string, ids ...int32) *tablepb.DataFile {
	return &tablepb.DataFile{Path: path, Fields: ids}
}

func frag(id, physical, deleted uint64, files ...*tablepb.DataFile) *tablepb.DataFragment {
	f := &tablepb.DataFragment{Id: id, PhysicalRows: physical, Files: files}
	if deleted > 0 {
		f.DeletionFile = &tablepb.DeletionFile{FileType: tablepb.DeletionFile_BITMAP, ReadVersion: 1, Id: 1, NumDeletedRows: deleted}
	}
	return f
}

func manifest(version uint64, schema []*filepb.Field, frags ...*tablepb.DataFragment) *tablepb.Manifest {
	var maxID uint32
	for _, f := range frags {
		if uint32(f.Id) > maxID {
			maxID = uint32(f.Id)
		}
	}
	return &tablepb.Manifest{Version: version, Fields: schema, Fragments: frags, MaxFragmentId: &maxID}
}

func indexMeta(t testing.TB, name string, ids ...uint32) *tablepb.IndexMetadata {
	bm := roaring.BitmapOf(ids...)
	var buf bytes.Buffer
	if _, err := bm.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return &tablepb.IndexMetadata{Name: name, Fields: []int32{0}, DatasetVersion: 1, FragmentBitmap: buf.Bytes()}
}

// pol returns Lance's defaults with edits applied.
func pol(edit func(e *policy.Effective)) policy.Effective {
	e := policy.LanceDefaults("t")
	if edit != nil {
		edit(&e)
	}
	return e
}

func set[T any](s *policy.Setting[T], v T) {
	*s = policy.Setting[T]{Value: v, Source: policy.Source{Kind: policy.FromPolicy, Where: "test"}}
}

// applyRepack is the layout a committed repack leaves: moved fields
// tombstoned in the files that stay, emptied files dropped, new files
// appended.
func applyRepack(s *schema, f *tablepb.DataFragment, task job.RepackTask) *tablepb.DataFragment {
	out := &tablepb.DataFragment{Id: f.Id, PhysicalRows: f.PhysicalRows, DeletionFile: f.DeletionFile}
	moved := map[int32]bool{}
	for _, nf := range task.Files {
		for _, id := range nf.Fields {
			moved[id] = true
		}
	}
	removed := map[string]bool{}
	for _, p := range task.Removes {
		removed[p] = true
	}
	for _, df := range f.Files {
		if removed[df.Path] {
			continue
		}
		nf := &tablepb.DataFile{Path: df.Path, FileMajorVersion: df.FileMajorVersion, FileMinorVersion: df.FileMinorVersion, FileSizeBytes: df.FileSizeBytes}
		for i, id := range df.Fields {
			if moved[id] {
				id = tombstoneFieldID
			}
			nf.Fields = append(nf.Fields, id)
			if i < len(df.ColumnIndices) {
				nf.ColumnIndices = append(nf.ColumnIndices, df.ColumnIndices[i])
			}
		}
		out.Files = append(out.Files, nf)
	}
	for i, nf := range task.Files {
		out.Files = append(out.Files, v20("new"+string(rune('a'+i))+".lance", 1, nf.Fields...))
	}
	return out
}

// applyRewrite is the layout a committed rewrite leaves: each task's
// fragments replaced in place by clean fragments of up to target rows with
// fresh ids, as Lance splices contiguous groups.
func applyRewrite(m *tablepb.Manifest, p *Plan) *tablepb.Manifest {
	next := uint64(m.GetMaxFragmentId()) + 1
	byFirst := map[uint64]job.RewriteTask{}
	gone := map[uint64]bool{}
	for _, t := range p.Rewrites {
		byFirst[t.Fragments[0]] = t
		for _, id := range t.Fragments {
			gone[id] = true
		}
	}
	var frags []*tablepb.DataFragment
	for _, f := range m.Fragments {
		if t, ok := byFirst[f.Id]; ok {
			rows := t.Rows
			for rows > 0 {
				n := min(rows, t.TargetRowsPerFragment)
				frags = append(frags, &tablepb.DataFragment{Id: next, PhysicalRows: n, Files: []*tablepb.DataFile{v20("rw.lance", n, f.Files[0].Fields...)}})
				next++
				rows -= n
			}
			continue
		}
		if !gone[f.Id] {
			frags = append(frags, f)
		}
	}
	maxID := uint32(next - 1)
	return &tablepb.Manifest{Version: m.Version + 1, Fields: m.Fields, Fragments: frags, MaxFragmentId: &maxID}
}
