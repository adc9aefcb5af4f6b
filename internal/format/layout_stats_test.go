package format

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

var filepathGlob = filepath.Glob

func TestLayoutStatsLanceTables(t *testing.T) {
	// appends_v2 v6: two 300-row fragments, 30 deletions each, files
	// {id, s} (s dropped at v6) and {x} from the backfill.
	st := ComputeLayoutStats(manifestFor(t, "appends_v2/18446744073709551609.manifest").PB)
	if st.Version != 6 || st.Totals.Fragments != 2 || st.Totals.PhysicalRows != 600 || st.Totals.DeletedRows != 60 || st.Totals.Rows != 540 || st.Totals.DataFiles != 4 {
		t.Fatalf("totals %+v", st.Totals)
	}
	for _, fr := range st.Fragments {
		if fr.DataFiles != 2 || fr.DeletionFileKind != "arrow" || fr.DeletedRows != 30 {
			t.Fatalf("fragment %+v", fr)
		}
		// First file holds id (live) and s (dropped): one dead slot of three.
		if f := fr.Files[0]; f.Fields != 1 || f.DeadFields != 1 || f.SizeBytes == 0 || f.FileVersion != "2.1" {
			t.Fatalf("file %+v", f)
		}
		if fr.DeadSlotRatio != 1.0/3 {
			t.Fatalf("dead slot ratio %v", fr.DeadSlotRatio)
		}
	}
	st = ComputeLayoutStats(manifestFor(t, "bitmap_v1/2.manifest").PB)
	if st.Totals.Rows != 5000 || st.Fragments[0].DeletionFileKind != "bitmap" || st.Fragments[0].DeletedRows != 7000 {
		t.Fatalf("bitmap_v1 %+v", st)
	}
}

func TestLayoutStatsJSONKeys(t *testing.T) {
	st := ComputeLayoutStats(&tablepb.Manifest{
		Version: 2,
		Fields:  []*filepb.Field{{Id: 0, ParentId: -1}, {Id: 1, ParentId: -1}},
		Fragments: []*tablepb.DataFragment{
			{Id: 3, PhysicalRows: 10, Files: []*tablepb.DataFile{
				{Path: "a.lance", Fields: []int32{0, -2}, FileSizeBytes: 100},
				{Path: "b.lance", Fields: []int32{1}, FileSizeBytes: 50},
				{Path: "gone.lance", Fields: []int32{9}},
			}},
		},
	})
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "fragments", "totals"} {
		if _, ok := generic[k]; !ok {
			t.Fatalf("missing %q in %s", k, b)
		}
	}
	fr := generic["fragments"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "physical_rows", "deleted_rows", "data_files", "files", "dead_slot_ratio"} {
		if _, ok := fr[k]; !ok {
			t.Fatalf("fragment missing %q in %s", k, b)
		}
	}
	f := fr["files"].([]any)[0].(map[string]any)
	for _, k := range []string{"path", "size_bytes", "fields", "dead_fields"} {
		if _, ok := f[k]; !ok {
			t.Fatalf("file missing %q", k)
		}
	}
	tot := generic["totals"].(map[string]any)
	for _, k := range []string{"fragments", "rows", "physical_rows", "deleted_rows", "data_files"} {
		if _, ok := tot[k]; !ok {
			t.Fatalf("totals missing %q", k)
		}
	}
	if fr["data_files"].(float64) != 2 || fr["skipped_files"].(float64) != 1 || fr["dead_slot_ratio"].(float64) != 1.0/3 {
		t.Fatalf("stats %s", b)
	}
}

// synthManifest builds a manifest with n fragments of three data files each.
func synthManifest(n int) *tablepb.Manifest {
	m := &tablepb.Manifest{Version: 7}
	for i := int32(0); i < 8; i++ {
		m.Fields = append(m.Fields, &filepb.Field{Name: fmt.Sprintf("c%d", i), Id: i, ParentId: -1, LogicalType: "int64"})
	}
	for i := 0; i < n; i++ {
		fr := &tablepb.DataFragment{Id: uint64(i), PhysicalRows: 1 << 20}
		fr.Files = []*tablepb.DataFile{
			{Path: fmt.Sprintf("%050d.lance", i*3), Fields: []int32{0, 1, 2, -2}, ColumnIndices: []int32{0, 1, 2, 3}, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 1 << 26},
			{Path: fmt.Sprintf("%050d.lance", i*3+1), Fields: []int32{3, 4, 5}, ColumnIndices: []int32{0, 1, 2}, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 1 << 25},
			{Path: fmt.Sprintf("%050d.lance", i*3+2), Fields: []int32{6, 7}, ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 1 << 24},
		}
		if i%3 == 0 {
			fr.DeletionFile = &tablepb.DeletionFile{ReadVersion: 3, Id: uint64(i), NumDeletedRows: 17}
		}
		m.Fragments = append(m.Fragments, fr)
	}
	return m
}

// BenchmarkLayoutStats decodes a 100,000-fragment manifest file (26 MB)
// and computes its layout stats; the requirement is well under a second per
// op. The memcpy sub-benchmark copies the same bytes, for a ratio on the
// same machine in the same run.
func BenchmarkLayoutStats(b *testing.B) {
	m := synthManifest(100_000)
	data, err := EncodeManifest(m, nil, []byte{0x08, 0x06})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("part=decode+stats", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			dm, err := DecodeManifest(data)
			if err != nil {
				b.Fatal(err)
			}
			st := ComputeLayoutStats(dm.PB)
			if st.Totals.Fragments != 100_000 || st.Totals.DataFiles != 300_000 {
				b.Fatalf("totals %+v", st.Totals)
			}
		}
	})
	b.Run("part=stats", func(b *testing.B) {
		dm, err := DecodeManifest(data)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			_ = ComputeLayoutStats(dm.PB)
		}
	})
	b.Run("part=memcpy", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		dst := make([]byte, len(data))
		for b.Loop() {
			copy(dst, data)
		}
	})
}

func TestSynthManifestStats(t *testing.T) {
	st := ComputeLayoutStats(synthManifest(30))
	if st.Totals.DeletedRows != 10*17 || !strings.HasSuffix(st.Fragments[0].Files[0].Path, ".lance") || st.Fragments[0].Files[0].DeadFields != 1 {
		t.Fatalf("%+v", st.Totals)
	}
}
