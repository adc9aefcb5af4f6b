package format

import (
	"errors"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/pb/filepb"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func TestFeatureChecks(t *testing.T) {
	ok := &tablepb.Manifest{Version: 3, ReaderFeatureFlags: 1 | 2 | 16 | 32, WriterFeatureFlags: 63}
	if err := CheckWritable(ok); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		m        *tablepb.Manifest
		readable bool
		want     string
	}{
		{&tablepb.Manifest{Version: 4, ReaderFeatureFlags: 65}, false, "unknown reader feature flags 0x40"},
		{&tablepb.Manifest{Version: 4, ReaderFeatureFlags: 129}, false, "unknown reader feature flags 0x80"},
		{&tablepb.Manifest{Version: 5, WriterFeatureFlags: 65}, true, "unknown writer feature flags 0x40"},
	}
	for _, c := range cases {
		err := CheckWritable(c.m)
		var fe *FeatureError
		if !errors.Is(err, ErrUnsupportedFeature) || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("flags %d/%d: %v", c.m.ReaderFeatureFlags, c.m.WriterFeatureFlags, err)
		}
		if (CheckReadable(c.m) == nil) != c.readable {
			t.Errorf("flags %d/%d: readable = %v", c.m.ReaderFeatureFlags, c.m.WriterFeatureFlags, !c.readable)
		}
	}
}

func TestApplyFeatureFlagsMatchesLance(t *testing.T) {
	// The flags real Lance wrote on every testdata manifest are what we
	// recompute from the content.
	for _, pat := range []string{"appends_v2/*.manifest", "bitmap_v1/*.manifest"} {
		for _, f := range globAll(t, pat) {
			m := manifestFor(t, strings.TrimPrefix(f, "testdata/"))
			r, w := m.PB.ReaderFeatureFlags, m.PB.WriterFeatureFlags
			if err := ApplyFeatureFlags(m.PB, r&FlagStableRowIDs != 0, w&FlagDisableTransactionFile != 0); err != nil {
				t.Fatal(err)
			}
			if m.PB.ReaderFeatureFlags != r || m.PB.WriterFeatureFlags != w {
				t.Errorf("%s: recomputed %d/%d, Lance wrote %d/%d", f, m.PB.ReaderFeatureFlags, m.PB.WriterFeatureFlags, r, w)
			}
		}
	}
	m := &tablepb.Manifest{
		Fragments: []*tablepb.DataFragment{{Id: 0, DeletionFile: &tablepb.DeletionFile{}}},
		Config:    map[string]string{"k": "v"},
		BasePaths: []*tablepb.BasePath{{Id: 0}},
	}
	if err := ApplyFeatureFlags(m, false, true); err != nil {
		t.Fatal(err)
	}
	if m.ReaderFeatureFlags != 1|16 || m.WriterFeatureFlags != 1|8|16|32 {
		t.Fatalf("flags %d/%d", m.ReaderFeatureFlags, m.WriterFeatureFlags)
	}
	if err := ApplyFeatureFlags(m, true, false); err == nil {
		t.Fatal("stable row ids without row ids on every fragment must fail")
	}
	m.Fragments[0].RowIdSequence = &tablepb.DataFragment_InlineRowIds{InlineRowIds: []byte{1}}
	if err := ApplyFeatureFlags(m, false, false); err != nil || m.ReaderFeatureFlags&FlagStableRowIDs == 0 {
		t.Fatalf("row ids present: %v, flags %d", err, m.ReaderFeatureFlags)
	}
}

func TestSchemaHelpers(t *testing.T) {
	fields := []*filepb.Field{
		{Name: "id", Id: 0, ParentId: -1},
		{Name: "s", Id: 1, ParentId: -1},
		{Name: "v", Id: 3, ParentId: -1},
		{Name: "item", Id: 4, ParentId: 3},
	}
	if err := CheckSchema(fields); err != nil {
		t.Fatal(err)
	}
	if TopLevelAncestor(fields, 4) != 3 || TopLevelAncestor(fields, 9) != -1 {
		t.Fatal("ancestor")
	}
	if got := ChildFields(fields, 3); len(got) != 1 || got[0].GetId() != 4 {
		t.Fatal("children")
	}
	bad := []*filepb.Field{{Name: "item", Id: 4, ParentId: 3}, {Name: "v", Id: 3, ParentId: -1}}
	if err := CheckSchema(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("child before parent: %v", err)
	}
	m := &tablepb.Manifest{Fields: fields, Fragments: []*tablepb.DataFragment{{Files: []*tablepb.DataFile{{Fields: []int32{0, 7, -2}}}}}}
	if MaxFieldID(m) != 7 {
		t.Fatalf("max field id %d, want 7 (a dropped column's id in a data file)", MaxFieldID(m))
	}
	// appends_v2 v6 dropped column s (id 1) after adding x (id 2).
	lm := manifestFor(t, "appends_v2/18446744073709551609.manifest")
	if MaxFieldID(lm.PB) != 2 {
		t.Fatalf("appends_v2 v6 max field id %d", MaxFieldID(lm.PB))
	}
}

func TestMaxFragmentIDRules(t *testing.T) {
	m := &tablepb.Manifest{}
	if _, ok := MaxFragmentID(m); ok {
		t.Fatal("empty manifest has a max fragment id")
	}
	UpdateMaxFragmentID(m)
	if m.MaxFragmentId != nil {
		t.Fatal("no fragments must leave max_fragment_id absent")
	}
	m.Fragments = []*tablepb.DataFragment{{Id: 0}, {Id: 4}}
	UpdateMaxFragmentID(m)
	if m.GetMaxFragmentId() != 4 {
		t.Fatal("max_fragment_id not raised")
	}
	m.Fragments = m.Fragments[:1]
	UpdateMaxFragmentID(m)
	if id, _ := MaxFragmentID(m); id != 4 {
		t.Fatal("high-water mark lowered")
	}
}

func TestRemoveTombstonedFiles(t *testing.T) {
	m := &tablepb.Manifest{Fragments: []*tablepb.DataFragment{{Files: []*tablepb.DataFile{
		{Path: "a", Fields: []int32{-2, -2}}, {Path: "b", Fields: []int32{-2, 3}}, {Path: "c"},
	}}}}
	RemoveTombstonedFiles(m)
	if f := m.Fragments[0].Files; len(f) != 1 || f[0].Path != "b" {
		t.Fatalf("kept %v", f)
	}
}

func TestTransactionNames(t *testing.T) {
	txn := NewTransaction(11)
	key := TransactionKey(txn)
	rv, id, err := ParseTransactionFileName(key)
	if err != nil || rv != 11 || id != txn.Uuid || !strings.HasPrefix(key, "_transactions/11-") {
		t.Fatalf("%s: %d %s %v", key, rv, id, err)
	}
	name, data := readTestdata(t, "appends_v2/5-*.txn")
	got, err := DecodeTransaction(name, data)
	if err != nil || OperationName(got) != "Project" || got.ReadVersion != 5 {
		t.Fatalf("v6 txn: %v %v", OperationName(got), err)
	}
	if _, err := DecodeTransaction(name, []byte{0xff, 0xff}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
		t.Fatalf("garbage txn: %v", err)
	}
}

func globAll(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepathGlob("testdata/" + pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("glob %s: %v %v", pattern, files, err)
	}
	return files
}
