package quarantine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/engine/quarantine"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

func segment(name string, b byte) *tablepb.IndexMetadata {
	u := make([]byte, 16)
	u[15] = b
	return &tablepb.IndexMetadata{Name: name, Uuid: &tablepb.UUID{Uuid: u}}
}

// An index mark applies while its segment is in the index section, and
// fragment and index records do not read as each other.
func TestIndexMarksFollowTheSegment(t *testing.T) {
	ctx := context.Background()
	b, err := store.Open(ctx, "mem://quarantine-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	old, rebuilt := segment("id_idx", 1), segment("id_idx", 2)
	seg := "00000000-0000-0000-0000-000000000001"
	mk := quarantine.IndexMark{Index: "id_idx", Segment: seg, File: "_indices/" + seg + "/page_data.lance", Reason: "corrupt"}
	if err := quarantine.RecordIndex(ctx, b, mk); err != nil {
		t.Fatal(err)
	}
	if err := quarantine.Record(ctx, b, quarantine.Mark{Fragment: 3, Reason: "corrupt"}); err != nil {
		t.Fatal(err)
	}
	got, err := quarantine.LoadIndices(ctx, b, []*tablepb.IndexMetadata{old})
	if err != nil || len(got) != 1 || got[seg].File != mk.File {
		t.Fatalf("mark not loaded (%v): %+v", err, got)
	}
	why := quarantine.IndexReasons(got)[seg]
	if !strings.Contains(why, `"id_idx"`) || !strings.Contains(why, mk.File) || !strings.Contains(why, "createIndex") {
		t.Fatalf("reason: %s", why)
	}
	if got, _ := quarantine.LoadIndices(ctx, b, []*tablepb.IndexMetadata{rebuilt}); len(got) != 0 {
		t.Fatalf("mark applies to a rebuilt segment: %+v", got)
	}
	frags, err := quarantine.Load(ctx, b, &tablepb.Manifest{Fragments: []*tablepb.DataFragment{{Id: 3}}})
	if err != nil || len(frags) != 1 {
		t.Fatalf("fragment marks (%v): %+v", err, frags)
	}
	if err := quarantine.RecordIndex(ctx, b, quarantine.IndexMark{Index: "x", Segment: "../y"}); err == nil {
		t.Fatal("a segment uuid with a path was recorded")
	}
}
