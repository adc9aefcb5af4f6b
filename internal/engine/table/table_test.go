package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/store/storetest"
)

// lanceMetadata copies the manifests, transactions and deletion files real
// Lance wrote (internal/format/testdata/<name>) into b at their table keys.
// The data files are not there: these tests only touch metadata.
func lanceMetadata(t *testing.T, b *store.Bucket, name string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "format", "testdata", name, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata %s: %v", name, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		var key string
		switch filepath.Ext(base) {
		case ".manifest":
			key = format.VersionsDir + "/" + base
		case ".txn":
			key = format.TransactionsDir + "/" + base
		case ".arrow", ".bin":
			key = format.DeletionsDir + "/" + base
		default:
			continue
		}
		if err := b.Put(context.Background(), key, data); err != nil {
			t.Fatal(err)
		}
	}
}

func localBucket(t *testing.T) *store.Bucket {
	t.Helper()
	b, err := store.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func memBucket(t *testing.T) *store.Bucket {
	t.Helper()
	b, err := store.Open(context.Background(), "mem://"+uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func s3Bucket(t *testing.T) *store.Bucket {
	t.Helper()
	srv := storetest.StartS3(t)
	b, err := store.Open(context.Background(), srv.URI("tables/t.lance"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openLance(t *testing.T, b *store.Bucket, name string) *Table {
	t.Helper()
	lanceMetadata(t, b, name)
	tbl, err := OpenTable(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestTableReadsLanceMetadata(t *testing.T) {
	ctx := context.Background()
	tbl := openLance(t, localBucket(t), "appends_v2")
	m, err := tbl.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 6 {
		t.Fatalf("latest %d, want 6", m.Version())
	}
	if n, _ := tbl.Naming(ctx); n != format.NamingV2 {
		t.Fatalf("naming %s", n)
	}
	vs, err := tbl.Versions(ctx)
	if err != nil || len(vs) != 6 || vs[0].Version != 1 || vs[5].Version != 6 || vs[5].Size == 0 {
		t.Fatalf("versions %+v %v", vs, err)
	}
	txn, err := tbl.LoadTransaction(ctx, m)
	if err != nil || format.OperationName(txn) != "Project" {
		t.Fatalf("txn %v %v", txn, err)
	}
	// Without the inline section the .txn file is read.
	m.Txn = nil
	txn2, err := tbl.LoadTransaction(ctx, m)
	if err != nil || txn2.GetUuid() != txn.GetUuid() {
		t.Fatalf("txn from file: %v", err)
	}
	m3, err := tbl.Load(ctx, 3)
	if err != nil || m3.Version() != 3 {
		t.Fatalf("load 3: %v", err)
	}
	for _, fr := range m.PB.GetFragments() {
		rows, err := tbl.ReadDeletions(ctx, fr)
		if err != nil || rows.GetCardinality() != 30 {
			t.Fatalf("fragment %d deletions: %v", fr.GetId(), err)
		}
	}
	tags, err := tbl.Tags(ctx)
	if err != nil || len(tags) != 0 {
		t.Fatalf("tags %v %v", tags, err)
	}

	v1 := openLance(t, memBucket(t), "bitmap_v1")
	m, err = v1.Latest(ctx)
	if err != nil || m.Version() != 2 {
		t.Fatalf("bitmap_v1 latest: %v", err)
	}
	if n, _ := v1.Naming(ctx); n != format.NamingV1 {
		t.Fatalf("naming %s", n)
	}
	rows, err := v1.ReadDeletions(ctx, m.PB.GetFragments()[0])
	if err != nil || rows.GetCardinality() != 7000 {
		t.Fatalf("bitmap deletions: %v", err)
	}
}

func TestTableRefs(t *testing.T) {
	ctx := context.Background()
	b := localBucket(t)
	tbl := openLance(t, b, "appends_v2")
	tag := `{"branch":null,"version":4,"createdAt":"2026-11-29T00:00:00Z","updatedAt":"2026-11-29T00:00:00Z","manifestSize":629,"metadata":{}}`
	br := `{"parentBranch":null,"parentVersion":2,"createAt":1764000000,"manifestSize":700,"identifier":{"version_mapping":[[2,"ec94"]]},"metadata":{}}`
	for k, v := range map[string]string{"_refs/tags/v4.json": tag, "_refs/branches/feature%2Fx.json": br} {
		if err := b.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	tags, err := tbl.Tags(ctx)
	if err != nil || tags["v4"].Version != 4 || tags["v4"].ManifestSize != 629 || tags["v4"].Branch != nil {
		t.Fatalf("tags %+v %v", tags, err)
	}
	branches, err := tbl.Branches(ctx)
	if err != nil || branches["feature/x"].ParentVersion != 2 {
		t.Fatalf("branches %+v %v", branches, err)
	}
	if err := b.Put(ctx, "_refs/tags/bad.json", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Tags(ctx); err == nil || !strings.Contains(err.Error(), "_refs/tags/bad.json") {
		t.Fatalf("bad tag: %v", err)
	}
}

func TestTableCorruptInputsNameTheFile(t *testing.T) {
	ctx := context.Background()
	latestKey := format.ManifestKey(format.NamingV2, 6)

	cases := []struct {
		label  string
		mutate func(t *testing.T, b *store.Bucket)
		read   func(tbl *Table) error
		want   []string
	}{
		{"truncated manifest", func(t *testing.T, b *store.Bucket) {
			data, _ := b.Get(ctx, latestKey)
			_ = b.Put(ctx, latestKey, data[:len(data)-7])
		}, func(tbl *Table) error { _, err := tbl.Latest(ctx); return err }, []string{latestKey, "bad magic"}},
		{"bad magic", func(t *testing.T, b *store.Bucket) {
			data, _ := b.Get(ctx, latestKey)
			copy(data[len(data)-4:], "XXXX")
			_ = b.Put(ctx, latestKey, data)
		}, func(tbl *Table) error { _, err := tbl.Latest(ctx); return err }, []string{latestKey, "bad magic"}},
		{"garbage protobuf", func(t *testing.T, b *store.Bucket) {
			data, _ := b.Get(ctx, latestKey)
			m, _ := format.DecodeManifest(data)
			pos := int(*m.PB.TransactionSection) + 4 + len(m.TxnRaw) + 4
			for i := pos; i < len(data)-16; i++ {
				data[i] = 0xff
			}
			_ = b.Put(ctx, latestKey, data)
		}, func(tbl *Table) error { _, err := tbl.Latest(ctx); return err }, []string{latestKey, "decode manifest protobuf"}},
		{"missing deletion file", func(t *testing.T, b *store.Bucket) {
			_ = b.Delete(ctx, "_deletions/0-2-18298661562798255314.arrow")
		}, func(tbl *Table) error {
			m, err := tbl.Latest(ctx)
			if err != nil {
				return err
			}
			_, err = tbl.ReadDeletions(ctx, m.PB.GetFragments()[0])
			return err
		}, []string{"_deletions/0-2-18298661562798255314.arrow", "is missing"}},
	}
	for _, c := range cases {
		t.Run(c.label, func(t *testing.T) {
			b := localBucket(t)
			tbl := openLance(t, b, "appends_v2")
			c.mutate(t, b)
			err := c.read(tbl)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := OpenTable(ctx, localBucket(t)); !errors.Is(err, ErrNoTable) {
		t.Fatalf("empty root: %v", err)
	}
}

func TestCommitUpdateConfigLayout(t *testing.T) {
	ctx := context.Background()
	b := localBucket(t)
	tbl := openLance(t, b, "appends_v2")
	before, _ := tbl.Latest(ctx)
	m, err := tbl.SetConfig(ctx, map[string]string{"lanced.test": "yes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 7 || m.PB.GetConfig()["lanced.test"] != "yes" {
		t.Fatalf("committed %d %v", m.Version(), m.PB.GetConfig())
	}
	data, err := b.Get(ctx, format.ManifestKey(format.NamingV2, 7))
	if err != nil {
		t.Fatal(err)
	}
	got, err := format.DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	txnFile, err := b.Get(ctx, format.TransactionKeyFromManifest(got.PB))
	if err != nil || !bytes.Equal(txnFile, got.TxnRaw) {
		t.Fatalf(".txn file differs from the inline transaction (%v)", err)
	}
	if !bytes.Equal(got.IndexSectionRaw, before.IndexSectionRaw) {
		t.Fatal("index section not carried byte for byte")
	}
	if w := got.PB.GetWriterVersion(); w.GetLibrary() != "lanced" || w.GetVersion() == "" {
		t.Fatalf("writer version %v", w)
	}
	if got.PB.GetWriterFeatureFlags() != format.FlagDeletionFiles|format.FlagTableConfig || got.PB.GetReaderFeatureFlags() != format.FlagDeletionFiles {
		t.Fatalf("flags %d/%d", got.PB.GetReaderFeatureFlags(), got.PB.GetWriterFeatureFlags())
	}
	if got.PB.GetMaxFragmentId() != before.PB.GetMaxFragmentId() || len(got.PB.GetFragments()) != 2 || got.Txn.GetReadVersion() != 6 {
		t.Fatal("fragments or max_fragment_id changed")
	}
	hint, err := b.Get(ctx, format.VersionHintKey)
	if err != nil || string(hint) != `{"version":7}` {
		t.Fatalf("hint %q %v", hint, err)
	}
	// Unset the key again.
	m, err = tbl.SetConfig(ctx, nil, []string{"lanced.test"})
	if err != nil || len(m.PB.GetConfig()) != 0 || m.PB.GetWriterFeatureFlags()&format.FlagTableConfig != 0 {
		t.Fatalf("unset: %v %v", err, m.PB.GetConfig())
	}
}

func TestCommitRefusesUnknownFeatureFlags(t *testing.T) {
	ctx := context.Background()
	b := localBucket(t)
	tbl := openLance(t, b, "appends_v2")
	latest, _ := tbl.Latest(ctx)
	latest.PB.WriterFeatureFlags |= 64
	latest.PB.Version = 7
	data, err := latest.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, format.ManifestKey(format.NamingV2, 7), data); err != nil {
		t.Fatal(err)
	}
	_, err = tbl.SetConfig(ctx, map[string]string{"k": "v"}, nil)
	var fe *format.FeatureError
	if !errors.Is(err, format.ErrUnsupportedFeature) || !errors.As(err, &fe) || fe.Unknown != 64 ||
		!strings.Contains(err.Error(), format.ManifestKey(format.NamingV2, 7)) || !strings.Contains(err.Error(), "unknown writer feature flags") {
		t.Fatalf("err = %v", err)
	}
	if v, _ := tbl.LatestVersion(ctx); v != 7 {
		t.Fatalf("a version was committed: %d", v)
	}
	var txns int
	_ = b.List(ctx, "_transactions/", func(store.Object) error { txns++; return nil })
	if txns != 1 {
		t.Fatalf("%d transaction files, want only Lance's one", txns)
	}
	// Stats still read.
	if m, err := tbl.Latest(ctx); err != nil || format.ComputeLayoutStats(m.PB).Totals.Rows != 540 {
		t.Fatalf("stats on an unknown-flag table: %v", err)
	}
}

func TestCommitConflictCarriesTransactions(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tbl := openLance(t, b, "appends_v2")
	txn := UpdateConfigTxn(4, map[string]string{"a": "b"}, nil)
	_, err := tbl.Commit(ctx, 4, txn, applyConfigTxn(txn))
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	if ce.ReadVersion != 4 || ce.Attempted != 5 || len(ce.Committed) != 2 || ce.LatestCommitted() != 6 {
		t.Fatalf("conflict %+v", ce)
	}
	if format.OperationName(ce.Committed[0].Txn) != "Merge" || format.OperationName(ce.Committed[1].Txn) != "Project" {
		t.Fatalf("ops %s %s", format.OperationName(ce.Committed[0].Txn), format.OperationName(ce.Committed[1].Txn))
	}
	// Nothing of the attempt was written.
	if ok, _ := exists(ctx, b, format.TransactionKey(txn)); ok {
		t.Fatal("the .txn of a refused attempt was written")
	}
}

func exists(ctx context.Context, b *store.Bucket, key string) (bool, error) {
	_, err := b.Attributes(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Racing committers on every backend: every acknowledged commit is visible
// at the version it was acknowledged for, no version is written twice, and
// losers leave no .txn behind.
// With shared listings (every committer on one Table that reuses its last
// listing, so most attempts start from a stale version) the same holds.
func TestCommitRace(t *testing.T) {
	for name, open := range map[string]func(*testing.T) *store.Bucket{"file": localBucket, "mem": memBucket, "s3": s3Bucket} {
		for _, shared := range []bool{false, true} {
			if shared {
				name += "/shared"
			}
			t.Run(name, func(t *testing.T) { commitRace(t, open, shared) })
		}
	}
}

func commitRace(t *testing.T, open func(*testing.T) *store.Bucket, shared bool) {
	ctx := context.Background()
	b := open(t)
	tbl := openLance(t, b, "appends_v2")
	if shared {
		tbl.ShareListings(ShareWindow)
	}
	const workers, each = 6, 3
	type ack struct {
		version uint64
		uuid    string
	}
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				m, err := tbl.SetConfig(ctx, map[string]string{fmt.Sprintf("k%d.%d", w, i): "v"}, nil)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acks = append(acks, ack{m.Version(), m.Txn.GetUuid()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	vs, err := tbl.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 6+workers*each {
		t.Fatalf("%d versions, want %d", len(vs), 6+workers*each)
	}
	seen := map[uint64]bool{}
	for _, a := range acks {
		if seen[a.version] {
			t.Fatalf("version %d acknowledged twice", a.version)
		}
		seen[a.version] = true
		m, err := tbl.Load(ctx, a.version)
		if err != nil || m.Txn.GetUuid() != a.uuid {
			t.Fatalf("version %d does not hold the acknowledged commit %s (%v)", a.version, a.uuid, err)
		}
	}
	latest, _ := tbl.Latest(ctx)
	if len(latest.PB.GetConfig()) != workers*each {
		t.Fatalf("final config has %d keys", len(latest.PB.GetConfig()))
	}
	var txns int
	_ = b.List(ctx, "_transactions/", func(store.Object) error { txns++; return nil })
	if txns != 1+workers*each {
		t.Fatalf("%d .txn files, want %d (losers must delete theirs)", txns, 1+workers*each)
	}
}

// listings counts the _versions/ listings (list_dir calls) of an
// instrumented bucket.
func listings(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lanced_store_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == "list_dir" {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// A Table opened with OpenShared lists _versions/ once for the lookups of
// one task (open, latest, the commit's check, a lookup after its own
// commit); a commit from a listing that missed another writer's commit
// fails its put, lists again and commits on top of that writer's version
// without losing it; a plain Table lists on every lookup.
func TestSharedListings(t *testing.T) {
	for name, open := range map[string]func(*testing.T) *store.Bucket{"file": localBucket, "s3": s3Bucket} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			reg := prometheus.NewRegistry()
			b, err := store.Instrument(open(t), reg)
			if err != nil {
				t.Fatal(err)
			}
			lanceMetadata(t, b, "appends_v2")
			tbl, err := OpenShared(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			m, err := tbl.Latest(ctx)
			if err != nil || m.Version() != 6 {
				t.Fatalf("latest %v, %v", m, err)
			}
			if _, err := tbl.SetConfig(ctx, map[string]string{"ours.1": "v"}, nil); err != nil {
				t.Fatal(err)
			}
			if v, err := tbl.LatestVersion(ctx); err != nil || v != 7 {
				t.Fatalf("latest after our commit %d, %v", v, err)
			}
			if n := listings(t, reg); n != 1 {
				t.Fatalf("%d listings for open, latest, commit and a lookup after it; want 1", n)
			}
			// Another writer commits version 8; our shared listing says 7.
			if _, err := At(b).SetConfig(ctx, map[string]string{"theirs": "v"}, nil); err != nil {
				t.Fatal(err)
			}
			before := listings(t, reg)
			m, err = tbl.SetConfig(ctx, map[string]string{"ours.2": "v"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m.Version() != 9 {
				t.Fatalf("committed version %d from a stale listing, want 9", m.Version())
			}
			if n := listings(t, reg) - before; n != 1 {
				t.Fatalf("%d listings for a commit from a stale listing; want 1 (after the failed put)", n)
			}
			latest, err := At(b).Latest(ctx)
			if err != nil || latest.Version() != 9 || latest.Txn.GetUuid() != m.Txn.GetUuid() {
				t.Fatalf("latest %v, %v: not our commit", latest, err)
			}
			for _, k := range []string{"ours.1", "theirs", "ours.2"} {
				if _, ok := latest.PB.GetConfig()[k]; !ok {
					t.Fatalf("config key %s lost: %v", k, latest.PB.GetConfig())
				}
			}
			var txns int
			_ = b.List(ctx, "_transactions/", func(store.Object) error { txns++; return nil })
			if txns != 4 {
				t.Fatalf("%d .txn files, want 4 (the failed attempt's deleted)", txns)
			}
			// Without sharing every lookup lists.
			plain := At(b)
			before = listings(t, reg)
			for i := 0; i < 3; i++ {
				if _, err := plain.LatestVersion(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := listings(t, reg) - before; n != 3 {
				t.Fatalf("%d listings for 3 lookups without sharing", n)
			}
		})
	}
}
