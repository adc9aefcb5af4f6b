package drift

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

func seg(name string) *tablepb.IndexMetadata {
	u := uuid.New()
	return &tablepb.IndexMetadata{Name: name, Uuid: &tablepb.UUID{Uuid: u[:]}}
}

// TestUpdateAccumulates: counts of one model add up over catch-ups,
// another model starts them again, and a record applies only while one of
// its segments is in the table.
func TestUpdateAccumulates(t *testing.T) {
	ctx := context.Background()
	b, err := store.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if f, err := Load(ctx, b); err != nil || len(f.Indices) != 0 {
		t.Fatalf("no record: %+v %v", f, err)
	}
	s1, s2 := seg("vec_idx"), seg("vec_idx")
	if err := Update(ctx, b, 3, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 100, Far: 10, Bound: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := Update(ctx, b, 4, []*tablepb.IndexMetadata{s1, s2}, []Sample{{Index: "vec_idx", Model: "m1", Rows: 300, Far: 90, Bound: 2}}); err != nil {
		t.Fatal(err)
	}
	f, err := Load(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	r := Current(f, []*tablepb.IndexMetadata{s2})["vec_idx"]
	if r.Rows != 400 || r.Far != 100 || r.Ratio() != 0.25 || r.Version != 4 {
		t.Fatalf("accumulated: %+v", r)
	}
	if got := Current(f, []*tablepb.IndexMetadata{seg("vec_idx")}); len(got) != 0 {
		t.Fatalf("a record applies to a rebuilt index: %+v", got)
	}
	if err := Update(ctx, b, 5, []*tablepb.IndexMetadata{s1}, []Sample{{Index: "vec_idx", Model: "m2", Rows: 50, Far: 1, Bound: 3}}); err != nil {
		t.Fatal(err)
	}
	f, _ = Load(ctx, b)
	if r := f.Indices["vec_idx"]; r.Rows != 50 || r.Far != 1 || r.Model != "m2" {
		t.Fatalf("another model did not start again: %+v", r)
	}
	if err := b.Put(ctx, Key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(ctx, b); err != nil || len(f.Indices) != 0 {
		t.Fatalf("damaged record: %+v %v", f, err)
	}
}
