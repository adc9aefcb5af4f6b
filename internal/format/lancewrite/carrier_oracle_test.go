package lancewrite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/lancewrite"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// The backfill table's fragments have 3 data files each; collapse them into
// one by page copy and commit through the engine as the repack carrier
// (Update, REWRITE_COLUMNS, fragment in updated_fragments, fields_modified
// empty). Real Lance must read the same rows, and keep writing on top.
func TestOracleRepackCarrierBackfill(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the oracle")
	}
	oracle.Require(t)
	t.Parallel()
	ctx := context.Background()
	uri := oracle.Build(t, "backfill", t.TempDir())
	want := oracle.Scan(t, uri, 0, nil)
	tbl, m := tabletest.Open(t, "file://"+uri)
	var updated []*tablepb.DataFragment
	for _, fr := range m.PB.Fragments {
		if len(fr.Files) < 2 {
			continue
		}
		var srcs []lancewrite.CopySource
		for _, df := range fr.Files {
			f, err := os.Open(filepath.Join(uri, "data", df.Path))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			srcs = append(srcs, lancewrite.CopySource{R: f, Size: st.Size(), Name: df.Path, File: df})
		}
		name := uuid.NewString() + ".lance"
		out, err := os.Create(filepath.Join(uri, "data", name))
		if err != nil {
			t.Fatal(err)
		}
		res, err := lancewrite.CopyColumns(ctx, out, srcs, m.PB.Fields)
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		nf := proto.Clone(fr).(*tablepb.DataFragment)
		nf.Files = []*tablepb.DataFile{{Path: name, Fields: res.Fields, ColumnIndices: res.ColumnIndices,
			FileMajorVersion: res.Major, FileMinorVersion: res.Minor, FileSizeBytes: uint64(res.Size)}}
		updated = append(updated, nf)
	}
	if len(updated) == 0 {
		t.Fatal("backfill has no multi-file fragment")
	}
	txn := &tablepb.Transaction{ReadVersion: m.Version(), Uuid: uuid.NewString(), Operation: &tablepb.Transaction_Update_{
		Update: &tablepb.Transaction_Update{UpdatedFragments: updated, UpdateMode: tablepb.Transaction_REWRITE_COLUMNS}}}
	_, err := tbl.Commit(ctx, m.Version(), txn, func(latest *format.Manifest) (*tablepb.Manifest, error) {
		next := proto.Clone(latest.PB).(*tablepb.Manifest)
		byID := map[uint64]*tablepb.DataFragment{}
		for _, u := range updated {
			byID[u.Id] = u
		}
		for i, fr := range next.Fragments {
			if u, ok := byID[fr.Id]; ok {
				next.Fragments[i] = u
			}
		}
		return next, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	oracle.Equal(t, want, oracle.Scan(t, uri, 0, nil))
	// real Lance keeps writing on top: delete a row and read again
	oracle.RunOps(t, uri, []oracle.Op{{"op": "delete", "where": "id = 5"}})
	after := oracle.Scan(t, uri, 0, nil)
	if after.NumRows() != want.NumRows()-1 {
		t.Fatalf("after delete: %d rows, want %d", after.NumRows(), want.NumRows()-1)
	}
}
