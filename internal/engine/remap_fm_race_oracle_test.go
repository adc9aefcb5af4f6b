package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/engine"
	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/engine/table/tabletest"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestRemapFMColumnRewrittenAtCommitOracle: lanced compacts fragments 0
// and 1 of a table real Lance wrote with an FM index on body over
// fragments 0-3; the FM segment is rebuilt in the Rewrite commit from body
// of every covered fragment as read at the planned version. Just before
// the commit another writer rewrites body in untouched fragment 2 (an
// Update REWRITE_COLUMNS naming body in fields_modified, fragment 2 taken
// out of the index's bitmap, as Lance's own commit of such an Update
// does; committed through the table package, since lancedb's API makes
// none). The rebuild read text the table no longer has: the rewrite and
// its remap are dropped as retryable, nothing of theirs is left, real
// Lance's contains() queries through the index return what a scan finds;
// lanced compacts and catches up again (one after the other, nothing
// dropped), and the queries still do.
func TestRemapFMColumnRewrittenAtCommitOracle(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x1000-v0-t12-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "create_index", "column": "body", "type": "fm", "name": "body_idx"},
		{"op": "delete", "where": "id < 2000 AND id % 5 = 0"},
	})
	tune := func(e *policy.Effective) { e.Compaction.TargetRowsPerFragment.Value = 1000 }
	tbl, m := tabletest.Open(t, "file://"+path)
	p := planFor(t, path, m, tune)
	if len(p.Rewrites) != 1 || !slices.Equal(p.Rewrites[0].Fragments, []uint64{0, 1}) {
		t.Fatalf("plan: %+v", p.Decisions)
	}
	r := &engine.Runner{Table: tbl}
	ps := executeAll(t, r, m, []job.Task{{Rewrite: &p.Rewrites[0]}})
	var once sync.Once
	var landed uint64
	ctx := failpoint.WithHook(context.Background(), "remap.commit", func() {
		once.Do(func() { landed = rewriteColumnFrom(t, tbl, "body", 2, 3) })
	})
	reps, err := r.Commit(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if landed == 0 {
		t.Fatal("the remap.commit hook never ran: nothing was remapped")
	}
	var dropped int
	for _, rep := range reps {
		if rep.Version != 0 {
			t.Fatalf("%s committed v%d over the column rewrite at v%d", rep.Op, rep.Version, landed)
		}
		for _, d := range rep.Dropped {
			t.Logf("dropped %s (%s): %s", d.Key, d.Verdict, d.Reason)
			if d.Verdict != job.Retryable {
				t.Fatalf("dropped %s as %s, want retryable", d.Key, d.Verdict)
			}
			dropped++
		}
	}
	_, latest := tabletest.Open(t, "file://"+path)
	if latest.Version() != landed || dropped != 2 {
		t.Fatalf("latest v%d, the column rewrite v%d; %d dropped (want the rewrite and its remap)", latest.Version(), landed, dropped)
	}
	for _, pe := range ps {
		for _, k := range pe.Job.Written() {
			if dataFileExists(t, path, k) {
				t.Fatalf("a dropped job left %s behind", k)
			}
		}
	}
	if w := fmQueriesAgainstScan(t, path, "after the race"); w != 0 {
		t.Fatalf("after the race %d queries through body_idx differ from a scan", w)
	}
	// The default policy: the compaction (FM rebuilt in the Rewrite),
	// then the catch-up of fragment 2 on the next plan; nothing dropped.
	// (target_rows_per_fragment 1000 leaves 800-row fragments that it
	// would plan again.)
	if compactUntilSettled(t, path, nil) == 0 {
		t.Fatal("no catch-up of fragment 2 after the race")
	}
	after := oracle.Inspect(t, path, 0)
	if ix := indexByName(t, after, "body_idx"); ix.UnindexedRows != 0 || ix.IndexedRows != after.Rows || after.Fragments >= 4 {
		t.Fatalf("after lanced: body_idx %+v, %d rows in %d fragments", ix, after.Rows, after.Fragments)
	}
	if w := fmQueriesAgainstScan(t, path, "after lanced"); w != 0 {
		t.Fatalf("after lanced %d queries through body_idx differ from a scan", w)
	}
}

// rewriteColumnFrom commits an Update REWRITE_COLUMNS that gives fragment
// dst's column col the values of fragment src's (same physical rows): the
// column's field id tombstoned in dst's data file, src's file added to dst
// for that field alone; every index on col stops covering dst, as Lance's
// commit of an Update with fields_modified does. It returns the version.
func rewriteColumnFrom(t *testing.T, tbl *table.Table, col string, dst, src uint64) uint64 {
	t.Helper()
	ctx := context.Background()
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var field int32 = -1
	for _, f := range m.PB.GetFields() {
		if f.GetName() == col && f.GetParentId() == -1 {
			field = f.GetId()
		}
	}
	frags := format.FragmentsByID(m.PB)
	d, s := frags[dst], frags[src]
	if field < 0 || d == nil || s == nil || d.GetPhysicalRows() != s.GetPhysicalRows() {
		t.Fatalf("column %s (field %d), fragments %d and %d: not of the same rows", col, field, dst, src)
	}
	nd := proto.Clone(d).(*tablepb.DataFragment)
	var added *tablepb.DataFile
	for i, df := range nd.GetFiles() {
		if j := slices.Index(df.GetFields(), field); j >= 0 {
			df.Fields[j] = -2
			sf := s.GetFiles()[i]
			k := slices.Index(sf.GetFields(), field)
			added = proto.Clone(sf).(*tablepb.DataFile)
			added.Fields, added.ColumnIndices = []int32{field}, []int32{sf.GetColumnIndices()[k]}
		}
	}
	if added == nil {
		t.Fatalf("fragment %d has no file of field %d", dst, field)
	}
	nd.Files = append(nd.Files, added)
	txn := &tablepb.Transaction{Uuid: uuid.NewString(), ReadVersion: m.Version(), Operation: &tablepb.Transaction_Update_{Update: &tablepb.Transaction_Update{
		UpdatedFragments: []*tablepb.DataFragment{nd}, FieldsModified: []uint32{uint32(field)}, UpdateMode: tablepb.Transaction_REWRITE_COLUMNS,
	}}}
	nm, err := tbl.CommitIndexed(ctx, m.Version(), txn, func(latest *format.Manifest) (*tablepb.Manifest, *tablepb.IndexSection, error) {
		next := proto.Clone(latest.PB).(*tablepb.Manifest)
		for i, f := range next.Fragments {
			if f.GetId() == dst {
				next.Fragments[i] = nd
			}
		}
		ixs := proto.Clone(latest.Indices).(*tablepb.IndexSection)
		for _, ix := range ixs.GetIndices() {
			if !slices.Contains(ix.GetFields(), field) {
				continue
			}
			bm, err := index.DecodeBitmap(ix.GetFragmentBitmap())
			if err != nil {
				return nil, nil, err
			}
			bm.Remove(uint32(dst))
			if ix.FragmentBitmap, err = index.EncodeBitmap(bm); err != nil {
				return nil, nil, err
			}
		}
		return next, ixs, nil
	})
	if err != nil {
		t.Fatalf("commit the column rewrite: %v", err)
	}
	return nm.Version()
}
