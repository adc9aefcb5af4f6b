package job

import (
	"errors"
	"fmt"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// ErrUnsupported means lanced refuses to rewrite or read something it does
// not fully understand (unknown protobuf fields, files under an external
// base path, external row-id files, legacy data files, a fragment layout
// the reader does not handle). The planner skips it with the reason; the
// table keeps being served; a task that meets it is not retried.
var ErrUnsupported = errors.New("unsupported by this release")

// CheckFragment refuses (ErrUnsupported) a fragment lanced must not
// rewrite or repack: protobuf fields this build does not know (rewriting
// would silently drop them), files under an external base path, external
// row-id or version sequences. It is pure: the planner skips such
// fragments with the reason, and the executors check again.
func CheckFragment(f *tablepb.DataFragment) error {
	if len(f.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("fragment %d has unknown fields: %w", f.GetId(), ErrUnsupported)
	}
	for _, df := range f.GetFiles() {
		if len(df.ProtoReflect().GetUnknown()) > 0 {
			return fmt.Errorf("fragment %d file %s has unknown fields: %w", f.GetId(), df.GetPath(), ErrUnsupported)
		}
		if df.BaseId != nil {
			return fmt.Errorf("fragment %d file %s lives under base path %d: %w", f.GetId(), df.GetPath(), df.GetBaseId(), ErrUnsupported)
		}
	}
	if d := f.GetDeletionFile(); d != nil && len(d.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("fragment %d deletion file has unknown fields: %w", f.GetId(), ErrUnsupported)
	}
	if d := f.GetDeletionFile(); d != nil && d.BaseId != nil {
		return fmt.Errorf("fragment %d deletion file lives under base path %d: %w", f.GetId(), d.GetBaseId(), ErrUnsupported)
	}
	if f.GetExternalRowIds() != nil || f.GetExternalCreatedAtVersions() != nil || f.GetExternalLastUpdatedAtVersions() != nil {
		return fmt.Errorf("fragment %d: %w: %w", f.GetId(), format.ErrExternalRowMeta, ErrUnsupported)
	}
	return nil
}

// CheckRewritable is CheckFragment plus what only a rewrite refuses:
// legacy (v0.x) data files, which the reader does not decode.
func CheckRewritable(f *tablepb.DataFragment) error {
	if err := CheckFragment(f); err != nil {
		return err
	}
	for _, df := range f.GetFiles() {
		if df.GetFileMajorVersion() < 2 {
			return fmt.Errorf("fragment %d file %s is a legacy (v%d.%d) file: %w", f.GetId(), df.GetPath(), df.GetFileMajorVersion(), df.GetFileMinorVersion(), ErrUnsupported)
		}
	}
	return nil
}
