package engine

import (
	"path"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// committedFiles lists the data files and index directories a committed
// transaction added (the keys a job's Written names), by walking the
// transaction for DataFile paths and IndexMetadata uuids.
func committedFiles(txn *tablepb.Transaction) map[string]bool {
	out := map[string]bool{}
	if txn == nil {
		return out
	}
	dfName := (&tablepb.DataFile{}).ProtoReflect().Descriptor().FullName()
	ixName := (&tablepb.IndexMetadata{}).ProtoReflect().Descriptor().FullName()
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		switch m.Descriptor().FullName() {
		case dfName:
			if df, ok := m.Interface().(*tablepb.DataFile); ok {
				out[format.DataFileKey(df.GetPath())] = true
			}
			return
		case ixName:
			if ix, ok := m.Interface().(*tablepb.IndexMetadata); ok && ix.GetUuid() != nil {
				out[path.Join(format.IndicesDir, (&index.Segment{Meta: ix}).UUID())] = true
			}
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				return true
			}
			switch {
			case fd.IsList():
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
			case fd.IsMap():
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
						walk(mv.Message())
						return true
					})
				}
			default:
				walk(v.Message())
			}
			return true
		})
	}
	walk(txn.ProtoReflect())
	return out
}

// committedSet is the files one committed transaction references.
type committedSet struct {
	version uint64
	files   map[string]bool
}

// committedSets walks each committed transaction once for the files it
// references; transactions that reference none are left out.
func committedSets(committed []job.Committed) []committedSet {
	var out []committedSet
	for _, c := range committed {
		if files := committedFiles(c.Txn); len(files) > 0 {
			out = append(out, committedSet{version: c.Version, files: files})
		}
	}
	return out
}

// alreadyCommitted returns the version of a committed transaction that
// references a file j wrote: j's own earlier commit (its result delivered
// again, e.g. to a new coordinator after the old one committed and died
// before removing it). Such a job is neither committed again nor dropped:
// dropping would delete files the table references. 0 when none does.
func alreadyCommitted(j job.Job, committed []committedSet) uint64 {
	for _, c := range committed {
		for _, key := range j.Written() {
			if c.files[key] || c.files[path.Dir(key)] {
				return c.version
			}
		}
	}
	return 0
}
