package lancewrite

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestFilterConcatMergePaths: under the page rule of an object store
// (64 KiB a page), the small mini-block pages of a column are merged chunk
// by chunk (no decode), with or without deleted rows, bit-packed ones too
// (the 500-value tails of id's pages cut into powers of two: 5 padded
// blocks, less than a page); pages that are not mini-block are
// re-encoded; the file holds exactly the live rows.
func TestFilterConcatMergePaths(t *testing.T) {
	for _, tc := range []struct {
		name string
		dels []*roaring.Bitmap
	}{
		{"clean", []*roaring.Bitmap{nil, nil, nil}},
		{"deleted", []*roaring.Bitmap{bitmapOf(5, 6, 7), nil, bitmapOf(1, 1024, 1999)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := filterRun(t, tc.dels, FilterOptions{PageCost: 64 << 10, Workers: 2})
			if r.diff != "" {
				t.Fatalf("rows differ: %s", r.diff)
			}
			ev := r.events
			// id: int64 bit-packed mini-block pages of 500 rows each (the
			// tails of 500 values are cut into powers of two)
			for _, c := range []string{"id", "u64", "f64", "s", "bin"} {
				if ev[c][PathMerge] == 0 || ev[c][PathReencode] != 0 || ev[c][PathCopy] != 0 {
					t.Errorf("%s: want merged pages only: %v", c, ev[c])
				}
			}
			// cat: dictionary pages, no two neighbours with one dictionary:
			// no run to merge, re-encoded (into one page)
			if ev["cat"][PathReencode] != 1 || ev["cat"][PathMerge] != 0 {
				t.Errorf("cat (dictionaries differ): want one re-encoded page: %v", ev["cat"])
			}
			if ev["none"][PathReencode] == 0 || ev["none"][PathMerge] != 0 {
				t.Errorf("none (all-null pages): want re-encoded: %v", ev["none"])
			}
			if r.res.Paths.Merged.Pages == 0 || r.res.Paths.Merged.Bytes == 0 {
				t.Errorf("stats: %+v", r.res.Paths)
			}
			// 3 sources of 2000 rows, 4 pages each per column: merged into
			// fewer pages than the sources hold
			if n := ev["id"][PathMerge]; n >= 3*4 {
				t.Errorf("id: %d merged pages from 12 source pages", n)
			}
		})
	}
}

// TestOracleFilterConcatMerge: tables real Lance wrote (every type, text,
// the benchmark's sized table, whose fragments' category dictionaries
// differ) rewritten with the page rule of a remote store, clean and with
// rows deleted: real Lance reads the same rows; the small mini-block pages
// were merged without decoding, and the category pages (dictionaries that
// differ from fragment to fragment) re-encoded.
func TestOracleFilterConcatMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	sized := oracle.Sized{Fragments: 4, RowsPerFragment: 2500, VectorDim: 16, TextWords: 5}.Scenario()
	for _, sc := range []string{"types", "text", sized} {
		for _, where := range []string{"", "id % 5 = 1 OR (id >= 100 AND id < 1300)"} {
			name := sc + "/clean"
			if where != "" {
				name = sc + "/deleted"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				evs, res, names := oracleFilterTable(t, sc, where, FilterOptions{PageCost: 64 << 10, Workers: 2})
				paths := map[string]map[PagePath]int{}
				for _, e := range evs {
					n := names[e.Column]
					if paths[n] == nil {
						paths[n] = map[PagePath]int{}
					}
					paths[n][e.Path]++
				}
				t.Logf("paths %v, stats %+v", paths, res.Paths)
				if res.Paths.Merged.Pages == 0 {
					t.Errorf("no page merged: %+v", res.Paths)
				}
				if sc == sized {
					if p := paths["id"]; p[PathMerge] != 1 || p[PathReencode] != 0 {
						t.Errorf("id: want one merged page: %v", p)
					}
					if p := paths["category"]; p[PathReencode] == 0 || p[PathMerge] != 0 {
						t.Errorf("category (dictionaries differ per fragment): want re-encoded: %v", p)
					}
				}
			})
		}
	}
}
