package format

import "github.com/lanced-dev/lanced/internal/format/pb/tablepb"

// LiveRows is a fragment's physical rows minus its recorded deletions.
func LiveRows(f *tablepb.DataFragment) uint64 {
	return f.GetPhysicalRows() - f.GetDeletionFile().GetNumDeletedRows()
}

// FragmentsByID indexes a manifest's fragments by id.
func FragmentsByID(m *tablepb.Manifest) map[uint64]*tablepb.DataFragment {
	out := make(map[uint64]*tablepb.DataFragment, len(m.GetFragments()))
	for _, f := range m.GetFragments() {
		out[f.GetId()] = f
	}
	return out
}
