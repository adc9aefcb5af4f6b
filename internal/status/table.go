// Package status gathers what an operator needs to see about a lanced
// deployment (every table's health and layout, the maintenance timeline,
// the queue, leases, holds and recent errors) and serves it as a
// server-rendered HTML page with inline SVG charts and as JSON. The page is
// read-only; the one mutating action (releasing a hold) is refused unless an
// admin token is configured, and then requires it.
package status

import (
	"context"
	"fmt"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/drift"
	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/store"
)

// DefaultSmallRows is Lance's target_rows_per_fragment (1 Mi rows), the
// threshold below which a fragment counts as small when no policy says
// otherwise.
const DefaultSmallRows = 1024 * 1024

// Table is one table's health at its latest version.
type Table struct {
	URI     string `json:"uri"`
	Version uint64 `json:"version"`
	// Versions counts the manifests kept in _versions/.
	Versions            int     `json:"versions"`
	Fragments           int     `json:"fragments"`
	SmallFragments      int     `json:"small_fragments"`
	SmallRows           uint64  `json:"small_rows_threshold"`
	MaxFilesPerFragment int     `json:"max_files_per_fragment"`
	DataFiles           int     `json:"data_files"`
	Rows                uint64  `json:"rows"`
	DeletedRows         uint64  `json:"deleted_rows"`
	DeletedRatio        float64 `json:"deleted_ratio"`
	Indices             int     `json:"indices"`
	// UnindexedRows is the most live rows any index does not cover (0
	// without indices).
	UnindexedRows uint64 `json:"unindexed_rows"`
	// IndexDrift is each vector index's drift ratio as lanced's catch-ups
	// measured it (package drift), by index name.
	IndexDrift map[string]float64 `json:"index_drift,omitempty"`
	Bytes      uint64             `json:"bytes"`
	// WrittenBy is the library that wrote the latest version ("lanced" or a
	// Lance writer).
	WrittenBy string       `json:"written_by"`
	Committed time.Time    `json:"committed"`
	Layout    []Fragment   `json:"layout"`
	Hold      *hold.Record `json:"hold,omitempty"`
	// HoldChecked is when Hold was read.
	HoldChecked time.Time `json:"-"`
	// LastMaintained is when lanced last committed to the table, as far as
	// this process saw (zero: not yet).
	LastMaintained time.Time `json:"last_maintained,omitzero"`
	Err            string    `json:"error,omitempty"`
	Refreshed      time.Time `json:"refreshed"`
}

// Fragment is one bar of a table's layout picture.
type Fragment struct {
	ID      uint64 `json:"id"`
	Rows    uint64 `json:"rows"`
	Deleted uint64 `json:"deleted"`
	Files   int    `json:"files"`
	Bytes   uint64 `json:"bytes"`
}

// ReadTable reads a table's health from the table itself: its latest
// manifest (the same layout statistics `lanced stats` prints), its version
// count and its hold. openURI opens it; uri is its canonical identity.
func ReadTable(ctx context.Context, uri, openURI string, smallRows func(cfg map[string]string) uint64) (Table, error) {
	t := Table{URI: uri, Refreshed: time.Now().UTC()}
	b, err := store.Open(ctx, openURI)
	if err != nil {
		return t, err
	}
	defer b.Close()
	// The hold first: a table held for corruption may not open.
	if t.Hold, err = hold.Get(ctx, b); err != nil {
		return t, err
	}
	t.HoldChecked = time.Now()
	tbl, err := table.OpenTable(ctx, b)
	if err != nil {
		return t, err
	}
	vs, err := tbl.Versions(ctx)
	if err != nil {
		return t, err
	}
	t.Versions = len(vs)
	m, err := tbl.Latest(ctx)
	if err != nil {
		return t, err
	}
	thr := uint64(DefaultSmallRows)
	if smallRows != nil {
		thr = smallRows(m.PB.GetConfig())
	}
	fill(&t, m, thr)
	df, err := drift.Load(ctx, b)
	if err != nil {
		return t, err
	}
	for name, r := range drift.Current(df, m.Indices.GetIndices()) {
		if t.IndexDrift == nil {
			t.IndexDrift = map[string]float64{}
		}
		t.IndexDrift[name] = r.Ratio()
	}
	return t, nil
}

func fill(t *Table, m *format.Manifest, smallRows uint64) {
	st := format.ComputeLayoutStats(m.PB)
	t.Version = st.Version
	t.Fragments = st.Totals.Fragments
	t.DataFiles = st.Totals.DataFiles
	t.Rows = st.Totals.Rows
	t.DeletedRows = st.Totals.DeletedRows
	t.Bytes = st.Totals.DataFileBytes
	t.SmallRows = smallRows
	if st.Totals.PhysicalRows > 0 {
		t.DeletedRatio = float64(st.Totals.DeletedRows) / float64(st.Totals.PhysicalRows)
	}
	t.WrittenBy = m.PB.GetWriterVersion().GetLibrary()
	if ts := m.PB.GetTimestamp(); ts != nil {
		t.Committed = ts.AsTime().UTC()
	}
	live := map[uint64]uint64{}
	for _, f := range st.Fragments {
		var bytes uint64
		for _, df := range f.Files {
			bytes += df.SizeBytes
		}
		rows := f.PhysicalRows - min(f.PhysicalRows, f.DeletedRows)
		live[f.ID] = rows
		t.Layout = append(t.Layout, Fragment{ID: f.ID, Rows: f.PhysicalRows, Deleted: f.DeletedRows, Files: f.DataFiles, Bytes: bytes})
		t.MaxFilesPerFragment = max(t.MaxFilesPerFragment, f.DataFiles)
		if f.PhysicalRows < smallRows {
			t.SmallFragments++
		}
	}
	if m.Indices != nil {
		for _, ix := range m.Indices.GetIndices() {
			t.Indices++
			bm, err := index.DecodeBitmap(ix.GetFragmentBitmap())
			if err != nil || bm == nil {
				continue // legacy index without a bitmap, or an undecodable one: coverage unknown
			}
			var un uint64
			for id, rows := range live {
				if !bm.Contains(uint32(id)) {
					un += rows
				}
			}
			t.UnindexedRows = max(t.UnindexedRows, un)
		}
	}
}

// Summary is one line describing t, as `lanced status URI` prints it.
func (t Table) Summary() string {
	return fmt.Sprintf("%s v%d: %d fragments (%d small), max %d files/fragment, %.1f%% deleted, %d unindexed rows, %d versions, %s",
		t.URI, t.Version, t.Fragments, t.SmallFragments, t.MaxFilesPerFragment, 100*t.DeletedRatio, t.UnindexedRows, t.Versions, HumanBytes(t.Bytes))
}

// HumanBytes prints n in binary units (64GiB, 1.5MiB).
func HumanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := fmt.Sprintf("%.1f", v)
	if v == float64(int64(v)) {
		s = fmt.Sprintf("%d", int64(v))
	}
	return s + string("KMGTPE"[exp]) + "iB"
}
