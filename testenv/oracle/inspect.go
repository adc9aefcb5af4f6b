package oracle

import (
	"encoding/json"
	"sort"
	"strconv"
	"testing"
)

// Field is one top-level column as real Lance reports it. Type is
// apache-arrow JS's rendering ("Int64", "Utf8", "FixedSizeList[32]<Float32>",
// "List<Struct<{k:Utf8, v:Int64}>>"); use Scan's arrow schema for exact types.
type Field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// Index is one index from listIndices plus indexStats.
type Index struct {
	Name          string   `json:"name"`
	Type          string   `json:"type"` // "BTree", "IvfPq", "Bitmap", ...
	Columns       []string `json:"columns"`
	IndexedRows   int64    `json:"indexed_rows"`
	UnindexedRows int64    `json:"unindexed_rows"`
	Segments      int64    `json:"segments"` // -1 when Lance does not say
	DistanceType  string   `json:"distance_type"`
}

// Branch is one branch from branches().list(), with its latest version
// and row count as real Lance reads them.
type Branch struct {
	ParentBranch  string `json:"parent_branch"` // "" = main
	ParentVersion uint64 `json:"parent_version"`
	Version       uint64 `json:"version"`
	Rows          int64  `json:"rows"`
}

// Stats is table.stats() at the inspected version.
type Stats struct {
	TotalBytes    int64 `json:"totalBytes"`
	NumRows       int64 `json:"numRows"`
	NumIndices    int64 `json:"numIndices"`
	FragmentStats struct {
		NumFragments      int64 `json:"numFragments"`
		NumSmallFragments int64 `json:"numSmallFragments"`
		Lengths           struct {
			Min  int64   `json:"min"`
			Max  int64   `json:"max"`
			Mean float64 `json:"mean"`
			P25  int64   `json:"p25"`
			P50  int64   `json:"p50"`
			P75  int64   `json:"p75"`
			P99  int64   `json:"p99"`
		} `json:"lengths"`
	} `json:"fragmentStats"`
}

// Report is what real Lance sees of one table version.
//
// Fragments, DataFiles, DeletionFiles, PhysicalRows, DeletedRows and
// FilesSize come from Lance's own manifest summary for that version
// (listVersions()[v].metadata: total_fragments, total_data_files,
// total_deletion_files, total_data_file_rows, total_deletion_file_rows,
// total_files_size); -1 when Lance did not report one.
type Report struct {
	URI           string
	Rows          int64 // countRows()
	Version       uint64
	LatestVersion uint64
	Versions      []uint64 // listVersions(), ascending
	Fragments     int
	DataFiles     int
	DeletionFiles int
	PhysicalRows  int64
	DeletedRows   int64
	FilesSize     int64
	// FragmentRows is the number of live rows per fragment id, from a scan
	// of _rowaddr (the fragment id is its upper 32 bits). Fragments with no
	// live row are absent.
	FragmentRows map[uint32]int64
	Stats        Stats
	Schema       []Field
	Indices      []Index
	Tags         map[string]uint64
	Branches     map[string]Branch
	Summary      map[string]string // the raw manifest summary
}

type inspectJSON struct {
	URI           string            `json:"uri"`
	Rows          int64             `json:"rows"`
	Version       uint64            `json:"version"`
	LatestVersion uint64            `json:"latest_version"`
	Versions      []uint64          `json:"versions"`
	Summary       map[string]string `json:"summary"`
	Stats         Stats             `json:"stats"`
	FragmentRows  map[string]int64  `json:"fragment_rows"`
	Schema        []Field           `json:"schema"`
	Indices       []Index           `json:"indices"`
	Tags          map[string]uint64 `json:"tags"`
	Branches      map[string]Branch `json:"branches"`
}

// Inspect asks real Lance about the table at version (0 = latest).
func Inspect(t testing.TB, uri string, version uint64, opts ...Options) Report {
	t.Helper()
	Require(t)
	out := run(t, "inspect.mjs", nodeURI(uri), strconv.FormatUint(version, 10), optionsJSON(opts))
	var j inspectJSON
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatalf("oracle: inspect %s: decode %q: %v", uri, out, err)
	}
	r := Report{
		URI:           uri,
		Rows:          j.Rows,
		Version:       j.Version,
		LatestVersion: j.LatestVersion,
		Versions:      j.Versions,
		Stats:         j.Stats,
		Schema:        j.Schema,
		Indices:       j.Indices,
		Tags:          j.Tags,
		Branches:      j.Branches,
		Summary:       j.Summary,
		FragmentRows:  map[uint32]int64{},
	}
	sort.Slice(r.Versions, func(a, b int) bool { return r.Versions[a] < r.Versions[b] })
	num := func(key string) int64 {
		v, ok := j.Summary[key]
		if !ok {
			return -1
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("oracle: inspect %s: summary %s=%q: %v", uri, key, v, err)
		}
		return n
	}
	r.Fragments = int(num("total_fragments"))
	r.DataFiles = int(num("total_data_files"))
	r.DeletionFiles = int(num("total_deletion_files"))
	r.PhysicalRows = num("total_data_file_rows")
	r.DeletedRows = num("total_deletion_file_rows")
	r.FilesSize = num("total_files_size")
	if r.Fragments < 0 {
		r.Fragments = int(j.Stats.FragmentStats.NumFragments)
	}
	for k, v := range j.FragmentRows {
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			t.Fatalf("oracle: inspect %s: fragment id %q: %v", uri, k, err)
		}
		r.FragmentRows[uint32(id)] = v
	}
	if r.Tags == nil {
		r.Tags = map[string]uint64{}
	}
	if r.Branches == nil {
		r.Branches = map[string]Branch{}
	}
	return r
}
