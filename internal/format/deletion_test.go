package format

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func manifestFor(t *testing.T, pattern string) *Manifest {
	t.Helper()
	name, data := readTestdata(t, pattern)
	m, err := DecodeManifestFile(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Deletion files real Lance wrote decode to exactly the rows it deleted and
// match the manifest's num_deleted_rows and key naming.
func TestDecodeLanceDeletionFiles(t *testing.T) {
	// appends_v2 v3: delete id % 10 = 0 over two 300-row fragments.
	m := manifestFor(t, "appends_v2/18446744073709551612.manifest")
	if m.Version() != 3 {
		t.Fatalf("version %d", m.Version())
	}
	for _, fr := range m.PB.GetFragments() {
		df := fr.GetDeletionFile()
		key := DeletionFileKey(fr.GetId(), df)
		data, err := os.ReadFile(filepath.Join("testdata/appends_v2", filepath.Base(key)))
		if err != nil {
			t.Fatalf("fragment %d: deletion key %s: %v", fr.GetId(), key, err)
		}
		bm, err := DecodeDeletionFile(key, df.GetFileType(), data)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckDeletions(key, df, fr.GetPhysicalRows(), bm); err != nil {
			t.Fatal(err)
		}
		want := roaring.New()
		for i := uint32(0); i < 300; i += 10 {
			want.Add(i)
		}
		if !bm.Equals(want) {
			t.Fatalf("%s: got %v", key, bm.ToArray())
		}
	}
	// bitmap_v1 v2: delete 2000 <= id < 9000 of 12000 rows, one .bin file.
	m = manifestFor(t, "bitmap_v1/2.manifest")
	fr := m.PB.GetFragments()[0]
	df := fr.GetDeletionFile()
	if df.GetFileType() != tablepb.DeletionFile_BITMAP {
		t.Fatalf("file type %v", df.GetFileType())
	}
	key := DeletionFileKey(fr.GetId(), df)
	data, err := os.ReadFile(filepath.Join("testdata/bitmap_v1", filepath.Base(key)))
	if err != nil {
		t.Fatal(err)
	}
	bm, err := DecodeDeletionFile(key, df.GetFileType(), data)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDeletions(key, df, fr.GetPhysicalRows(), bm); err != nil {
		t.Fatal(err)
	}
	if bm.GetCardinality() != 7000 || bm.Minimum() != 2000 || bm.Maximum() != 8999 {
		t.Fatalf("bitmap: %d rows %d..%d", bm.GetCardinality(), bm.Minimum(), bm.Maximum())
	}
	// Our encoding of the same rows is byte-identical to Lance's (both
	// portable roaring without run containers).
	out, err := EncodeDeletionFile(tablepb.DeletionFile_BITMAP, bm)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(data) {
		t.Fatalf("bitmap encoding differs from Lance's (%d vs %d bytes)", len(out), len(data))
	}
}

func TestDeletionFileRoundTrip(t *testing.T) {
	rows := roaring.BitmapOf(441, 140, 231, 945, 0, 1<<20)
	run := roaring.New()
	run.AddRange(10, 9000)
	run.RunOptimize()
	for _, kind := range []tablepb.DeletionFile_DeletionFileType{tablepb.DeletionFile_ARROW_ARRAY, tablepb.DeletionFile_BITMAP} {
		for _, bm := range []*roaring.Bitmap{rows, roaring.New(), run} {
			data, err := EncodeDeletionFile(kind, bm)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeDeletionFile("x", kind, data)
			if err != nil {
				t.Fatalf("%v: %v", kind, err)
			}
			if !got.Equals(bm) {
				t.Fatalf("%v: round trip %v != %v", kind, got.GetCardinality(), bm.GetCardinality())
			}
			if kind == tablepb.DeletionFile_BITMAP && got.HasRunCompression() {
				t.Fatalf("bitmap written with run containers")
			}
		}
	}
	if DeletionKindFor(4999) != tablepb.DeletionFile_ARROW_ARRAY || DeletionKindFor(5000) != tablepb.DeletionFile_BITMAP {
		t.Fatal("threshold differs from Lance's 5000")
	}
}

func TestDeletionFileNames(t *testing.T) {
	df := &tablepb.DeletionFile{FileType: tablepb.DeletionFile_BITMAP, ReadVersion: 6, Id: 11861705700458195064}
	key := DeletionFileKey(0, df)
	if key != "_deletions/0-6-11861705700458195064.bin" {
		t.Fatalf("key %q", key)
	}
	f, rv, id, kind, err := ParseDeletionFileName(key)
	if err != nil || f != 0 || rv != 6 || id != df.Id || kind != tablepb.DeletionFile_BITMAP {
		t.Fatalf("parse: %d %d %d %v %v", f, rv, id, kind, err)
	}
	for _, bad := range []string{"0-6.bin", "a-1-2.arrow", "0-1-2.txt", "0-1-2-3.bin"} {
		if _, _, _, _, err := ParseDeletionFileName(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestDeletionFileCorrupt(t *testing.T) {
	_, arrowData := readTestdata(t, "appends_v2/0-2-*.arrow")
	_, binData := readTestdata(t, "bitmap_v1/*.bin")
	// A nullable row_id column: Lance rejects it, so must we.
	nullable := rewriteArrowNullable(t)
	cases := []struct {
		label string
		kind  tablepb.DeletionFile_DeletionFileType
		data  []byte
		want  string
	}{
		{"empty arrow", tablepb.DeletionFile_ARROW_ARRAY, nil, "not an arrow ipc file"},
		{"truncated arrow", tablepb.DeletionFile_ARROW_ARRAY, arrowData[:len(arrowData)/2], "arrow"},
		{"bitmap as arrow", tablepb.DeletionFile_ARROW_ARRAY, binData, "arrow"},
		{"truncated bitmap", tablepb.DeletionFile_BITMAP, binData[:100], "roaring bitmap"},
		{"bad cookie", tablepb.DeletionFile_BITMAP, []byte("ARROW1\x00\x00abcd"), "bad cookie"},
		{"nullable schema", tablepb.DeletionFile_ARROW_ARRAY, nullable, "schema"},
		{"unknown kind", tablepb.DeletionFile_DeletionFileType(7), binData, "unknown deletion file type"},
	}
	for _, c := range cases {
		_, err := DecodeDeletionFile("_deletions/0-1-2.x", c.kind, c.data)
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "_deletions/0-1-2.x") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrCorrupt naming the file and %q", c.label, err, c.want)
		}
	}
	df := &tablepb.DeletionFile{NumDeletedRows: 3}
	if err := CheckDeletions("f", df, 100, roaring.BitmapOf(1, 2)); err == nil || !strings.Contains(err.Error(), "num_deleted_rows=3") {
		t.Errorf("count mismatch: %v", err)
	}
	if err := CheckDeletions("f", &tablepb.DeletionFile{}, 100, roaring.BitmapOf(100)); err == nil || !strings.Contains(err.Error(), "100 physical rows") {
		t.Errorf("offset past the end: %v", err)
	}
}

func FuzzDecodeDeletionFile(f *testing.F) {
	for _, pat := range []string{"testdata/*/*.arrow", "testdata/*/*.bin"} {
		files, _ := filepath.Glob(pat)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err == nil {
				f.Add(strings.HasSuffix(file, ".bin"), b)
			}
		}
	}
	small, _ := EncodeDeletionFile(tablepb.DeletionFile_ARROW_ARRAY, roaring.BitmapOf(1, 2, 3))
	f.Add(false, small)
	f.Add(true, []byte{0x3b, 0x30, 0, 0, 0, 0, 1, 0})
	deletionAllocLimit.Store(8 << 20)
	f.Fuzz(func(t *testing.T, bitmap bool, data []byte) {
		kind := tablepb.DeletionFile_ARROW_ARRAY
		if bitmap {
			kind = tablepb.DeletionFile_BITMAP
		}
		bm, err := DecodeDeletionFile("fuzz", kind, data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		out, err := EncodeDeletionFile(kind, bm)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeDeletionFile("fuzz", kind, out)
		if err != nil || !back.Equals(bm) {
			t.Fatalf("re-encode does not round-trip: %v", err)
		}
	})
}
