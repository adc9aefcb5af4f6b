package format

import "github.com/lanced-dev/lanced/internal/format/pb/tablepb"

// LiveRows is a fragment's physical rows minus its recorded deletions.
func LiveRows(f *tablepb.DataFragment) uint64 {
	return f.GetPhysicalRows() - f.GetDeletionFile().GetNumDeletedRows()
}

// Totals are a manifest's fragment count, live rows and recorded data-file
// bytes (the sizes a log line reports before and after a commit).
type Totals struct {
	Fragments int
	Rows      uint64
	Bytes     uint64
}

// ManifestTotals sums a manifest's fragments (metadata only).
func ManifestTotals(m *tablepb.Manifest) Totals {
	t := Totals{Fragments: len(m.GetFragments())}
	for _, f := range m.GetFragments() {
		t.Rows += LiveRows(f)
		for _, df := range f.GetFiles() {
			t.Bytes += df.GetFileSizeBytes()
		}
	}
	return t
}

// FragmentsByID indexes a manifest's fragments by id.
func FragmentsByID(m *tablepb.Manifest) map[uint64]*tablepb.DataFragment {
	out := make(map[uint64]*tablepb.DataFragment, len(m.GetFragments()))
	for _, f := range m.GetFragments() {
		out[f.GetId()] = f
	}
	return out
}
