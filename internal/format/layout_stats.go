package format

import (
	"strconv"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// LayoutStats is the per-fragment column-layout statistics of one version
// (what lanced's repack planner reads), computed
// from manifest metadata only (no data file is opened).
type LayoutStats struct {
	Version   uint64           `json:"version"`
	Fragments []FragmentLayout `json:"fragments"`
	Totals    LayoutTotals     `json:"totals"`
}

// FragmentLayout describes one fragment's files.
type FragmentLayout struct {
	ID uint64 `json:"id"`
	// PhysicalRows counts rows including deleted ones (0 = unknown, as in
	// the manifest).
	PhysicalRows uint64 `json:"physical_rows"`
	// DeletedRows is the deletion file's num_deleted_rows (0 when none).
	DeletedRows uint64 `json:"deleted_rows"`
	// DataFiles counts the files holding at least one schema column.
	DataFiles int `json:"data_files"`
	// Files lists those files in manifest order.
	Files []FileLayout `json:"files"`
	// DeadSlotRatio is the share of the listed files' field slots that hold
	// no live data (tombstoned, or left by a dropped column); 0 with no slots.
	DeadSlotRatio float64 `json:"dead_slot_ratio"`
	// DeletionFileKind is "arrow", "bitmap" or "" (no deletion file).
	DeletionFileKind string `json:"deletion_file_kind"`
	// SkippedFiles counts data files holding no schema column at all; they
	// are not in Files and not in DataFiles.
	SkippedFiles int `json:"skipped_files"`
	// HasRowIDs reports stable row-id metadata on the fragment.
	HasRowIDs bool `json:"has_row_ids"`
}

// FileLayout describes one data file of a fragment.
type FileLayout struct {
	// Path is DataFile.path (relative to data/, or to its base path).
	Path string `json:"path"`
	// SizeBytes is the recorded file_size_bytes (0 = unknown).
	SizeBytes uint64 `json:"size_bytes"`
	// Fields counts the file's field slots that hold a schema column.
	Fields int `json:"fields"`
	// DeadFields counts slots that are tombstones (-2) or ids no longer in
	// the schema (dropped columns).
	DeadFields int `json:"dead_fields"`
	// FileVersion is "major.minor" of the data file format ("2.1").
	FileVersion string `json:"file_version"`
	// BaseID is the base path id when the file lives outside the table root.
	BaseID *uint32 `json:"base_id,omitempty"`
}

// LayoutTotals sums the fragments.
type LayoutTotals struct {
	Fragments int `json:"fragments"`
	// Rows is physical_rows - deleted_rows over all fragments.
	Rows         uint64 `json:"rows"`
	PhysicalRows uint64 `json:"physical_rows"`
	DeletedRows  uint64 `json:"deleted_rows"`
	DataFiles    int    `json:"data_files"`
	// DataFileBytes sums the recorded file_size_bytes of every data file
	// (skipped ones included), as Lance's total_files_size.
	DataFileBytes uint64 `json:"data_file_bytes"`
}

// ComputeLayoutStats returns the layout statistics of a manifest.
func ComputeLayoutStats(m *tablepb.Manifest) LayoutStats {
	live := FieldIDSet(m.GetFields())
	versions := map[[2]uint32]string{}
	st := LayoutStats{Version: m.GetVersion(), Fragments: make([]FragmentLayout, 0, len(m.GetFragments()))}
	// One backing array for every fragment's Files (sub-sliced with a
	// capped capacity), instead of one allocation per fragment.
	nfiles := 0
	for _, fr := range m.GetFragments() {
		nfiles += len(fr.GetFiles())
	}
	arena := make([]FileLayout, 0, nfiles)
	for _, fr := range m.GetFragments() {
		start := len(arena)
		fl := FragmentLayout{ID: fr.GetId(), PhysicalRows: fr.GetPhysicalRows(), HasRowIDs: HasRowIDMeta(fr)}
		if df := fr.GetDeletionFile(); df != nil {
			fl.DeletedRows = df.GetNumDeletedRows()
			fl.DeletionFileKind = "arrow"
			if df.GetFileType() == tablepb.DeletionFile_BITMAP {
				fl.DeletionFileKind = "bitmap"
			}
		}
		var slots, dead int
		for _, df := range fr.GetFiles() {
			f := FileLayout{Path: df.GetPath(), SizeBytes: df.GetFileSizeBytes(), BaseID: df.BaseId}
			st.Totals.DataFileBytes += f.SizeBytes
			for _, id := range df.GetFields() {
				if id >= 0 && live[id] {
					f.Fields++
				} else {
					f.DeadFields++
				}
			}
			if f.Fields == 0 {
				fl.SkippedFiles++
				continue
			}
			key := [2]uint32{df.GetFileMajorVersion(), df.GetFileMinorVersion()}
			v, ok := versions[key]
			if !ok {
				v = strconv.FormatUint(uint64(key[0]), 10) + "." + strconv.FormatUint(uint64(key[1]), 10)
				versions[key] = v
			}
			f.FileVersion = v
			slots += f.Fields + f.DeadFields
			dead += f.DeadFields
			arena = append(arena, f)
		}
		fl.Files = arena[start:len(arena):len(arena)]
		fl.DataFiles = len(fl.Files)
		if slots > 0 {
			fl.DeadSlotRatio = float64(dead) / float64(slots)
		}
		st.Totals.Fragments++
		st.Totals.PhysicalRows += fl.PhysicalRows
		st.Totals.DeletedRows += fl.DeletedRows
		st.Totals.DataFiles += fl.DataFiles
		st.Fragments = append(st.Fragments, fl)
	}
	if st.Totals.PhysicalRows >= st.Totals.DeletedRows {
		st.Totals.Rows = st.Totals.PhysicalRows - st.Totals.DeletedRows
	}
	return st
}
