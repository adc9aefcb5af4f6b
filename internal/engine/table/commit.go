package table

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lanced-dev/lanced/internal/engine/failpoint"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// CommittedTxn is a version committed by someone else since our read
// version. Txn is nil when its transaction could not be loaded (the version
// was cleaned up, or it has none); treat that as an unknown, incompatible
// operation.
type CommittedTxn struct {
	Version uint64
	Txn     *tablepb.Transaction
	// Err says why Txn is nil.
	Err error
}

// ConflictError is returned by Commit when the version it tried to create
// exists already (or the table moved past the read version before the put).
// Committed holds every version in (ReadVersion, latest], ascending, with its
// transaction, for the engine to classify. Nothing of the attempt stays
// visible: the manifest put failed and the attempt's .txn file is deleted.
type ConflictError struct {
	ReadVersion uint64
	Attempted   uint64
	Committed   []CommittedTxn
}

func (e *ConflictError) Error() string {
	ops := make([]string, len(e.Committed))
	for i, c := range e.Committed {
		name := "unknown"
		if c.Txn != nil {
			name = format.OperationName(c.Txn)
		}
		ops[i] = fmt.Sprintf("v%d %s", c.Version, name)
	}
	return fmt.Sprintf("commit conflict: version %d (read version %d) lost to %d concurrent commit(s): %s",
		e.Attempted, e.ReadVersion, len(e.Committed), strings.Join(ops, ", "))
}

// LatestCommitted returns the newest version in Committed (ReadVersion when empty).
func (e *ConflictError) LatestCommitted() uint64 {
	if n := len(e.Committed); n > 0 {
		return e.Committed[n-1].Version
	}
	return e.ReadVersion
}

// ManifestBuilder builds the next manifest from the latest one. It must
// return a new message (edit a proto.Clone of latest.PB, never latest.PB
// itself). Commit then sets the bookkeeping fields (see Commit).
type ManifestBuilder func(latest *format.Manifest) (*tablepb.Manifest, error)

// IndexedManifestBuilder is a ManifestBuilder that may also replace the
// index section; a nil section keeps the latest version's index section
// byte for byte.
type IndexedManifestBuilder func(latest *format.Manifest) (*tablepb.Manifest, *tablepb.IndexSection, error)

// Commit creates version readVersion+1 with txn as its transaction and the
// manifest build returns, keeping the latest version's index section as is.
// See CommitIndexed.
func (t *Table) Commit(ctx context.Context, readVersion uint64, txn *tablepb.Transaction, build ManifestBuilder) (*format.Manifest, error) {
	return t.CommitIndexed(ctx, readVersion, txn, func(latest *format.Manifest) (*tablepb.Manifest, *tablepb.IndexSection, error) {
		m, err := build(latest)
		return m, nil, err
	})
}

// CommitIndexed is one commit attempt (no retry: the caller classifies a
// *ConflictError and calls again with a new read version):
//
//  1. Load the latest manifest (the shared listing's, on a Table that
//     shares listings: if another writer committed since, the put below
//     fails and step 4 lists afresh); if it is past readVersion, return a
//     *ConflictError without writing anything. Refuse a table with unknown
//     reader or writer flags (format.ErrUnsupportedFeature).
//  2. build the next manifest from it; then set version = latest+1,
//     timestamp = now, writer_version = {WriterLibrary, WriterVersion},
//     tag = txn.tag, transaction_file, sort fragments by id, drop files
//     holding only tombstones, raise max_fragment_id, recompute the feature
//     flags (stable row ids kept when latest had them).
//  3. Write _transactions/{txn.read_version}-{uuid}.txn, then put the manifest
//     (index section, the same transaction bytes inline, manifest, footer)
//     if absent, under the latest version's naming scheme.
//  4. Lost the put: delete our .txn, return a *ConflictError carrying the
//     transactions committed since readVersion. Any other put error is
//     returned as is and the .txn is kept (the put may have happened).
//  5. Won: best-effort update of latest_version_hint.json (local tables,
//     as lance 8.x does), return the committed manifest.
func (t *Table) CommitIndexed(ctx context.Context, readVersion uint64, txn *tablepb.Transaction, build IndexedManifestBuilder) (*format.Manifest, error) {
	if txn == nil || txn.GetUuid() == "" {
		return nil, fmt.Errorf("commit on %s: transaction without uuid", t.b.URI())
	}
	vi, err := t.latestInfo(ctx)
	if err == nil && vi.Version < readVersion {
		// A shared listing older than the caller's read version: list.
		t.forget()
		vi, err = t.latestInfo(ctx)
	}
	if err != nil {
		return nil, err
	}
	if vi.Version < readVersion {
		return nil, fmt.Errorf("commit on %s: read version %d is newer than the latest version %d", t.b.URI(), readVersion, vi.Version)
	}
	if vi.Version > readVersion {
		return nil, t.conflict(ctx, readVersion, readVersion+1, vi.Version)
	}
	latest, naming, err := t.load(ctx, vi.Version, vi.Naming)
	if err != nil {
		return nil, err
	}
	if err := format.CheckWritable(latest.PB); err != nil {
		return nil, fmt.Errorf("commit on %s: manifest %s: %w", t.b.URI(), format.ManifestKey(naming, vi.Version), err)
	}
	next, sec, err := build(latest)
	if err != nil {
		return nil, fmt.Errorf("build manifest for version %d: %w", vi.Version+1, err)
	}
	if next == nil || next == latest.PB {
		return nil, fmt.Errorf("build manifest for version %d: builder must return a new manifest", vi.Version+1)
	}
	if err := t.finish(next, latest, txn); err != nil {
		return nil, err
	}
	txnBytes, err := format.MarshalTransaction(txn)
	if err != nil {
		return nil, err
	}
	indexRaw := latest.IndexSectionRaw
	if sec != nil {
		indexRaw = nil
		if len(sec.GetIndices()) > 0 || len(sec.ProtoReflect().GetUnknown()) > 0 {
			if indexRaw, err = (proto.MarshalOptions{Deterministic: true}).Marshal(sec); err != nil {
				return nil, fmt.Errorf("encode index section for version %d: %w", next.GetVersion(), err)
			}
		}
	}
	data, err := format.EncodeManifest(next, indexRaw, txnBytes)
	if err != nil {
		return nil, err
	}
	txnKey := format.TransactionKey(txn)
	if err := t.b.Put(ctx, txnKey, txnBytes); err != nil {
		return nil, fmt.Errorf("write transaction %s: %w", txnKey, err)
	}
	failpoint.Hit("commit.txn")
	key := format.ManifestKey(naming, next.GetVersion())
	if err := t.b.PutIfAbsent(ctx, key, data); err != nil {
		t.forget()
		if !errors.Is(err, store.ErrPreconditionFailed) {
			return nil, fmt.Errorf("write manifest %s: %w", key, err)
		}
		// Our .txn is referenced by nothing: remove it now rather than
		// leave it to cleanup's age window.
		_ = t.b.Delete(context.WithoutCancel(ctx), txnKey)
		latestNow, lerr := t.LatestVersion(ctx)
		if lerr != nil {
			return nil, fmt.Errorf("commit version %d lost the race; then: %w", next.GetVersion(), lerr)
		}
		return nil, t.conflict(ctx, readVersion, next.GetVersion(), latestNow)
	}
	failpoint.Hit("commit.manifest")
	t.remember(VersionInfo{Version: next.GetVersion(), Naming: naming, Key: key, Size: int64(len(data)), ModTime: t.Now()})
	if t.isLocal() {
		// Best effort, like Lance: readers probe upward from a stale hint.
		_ = t.b.Put(ctx, format.VersionHintKey, fmt.Appendf(nil, `{"version":%d}`, next.GetVersion()))
	}
	m, err := format.DecodeManifestFile(key, data)
	if err != nil {
		return nil, fmt.Errorf("re-read committed manifest %s: %w", key, err)
	}
	return m, nil
}

// finish sets the fields every commit sets, as Lance's build_manifest does.
func (t *Table) finish(next *tablepb.Manifest, latest *format.Manifest, txn *tablepb.Transaction) error {
	next.Version = latest.Version() + 1
	next.Timestamp = timestamppb.New(t.Now())
	next.WriterVersion = &tablepb.Manifest_WriterVersion{Library: WriterLibrary, Version: WriterVersion}
	next.Tag = txn.GetTag()
	next.TransactionFile = format.TransactionFileName(txn)
	sort.SliceStable(next.Fragments, func(i, j int) bool { return next.Fragments[i].GetId() < next.Fragments[j].GetId() })
	format.RemoveTombstonedFiles(next)
	if next.MaxFragmentId == nil && latest.PB.MaxFragmentId != nil {
		v := latest.PB.GetMaxFragmentId()
		next.MaxFragmentId = &v
	}
	format.UpdateMaxFragmentID(next)
	if err := format.ApplyFeatureFlags(next, latest.PB.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0, false); err != nil {
		return fmt.Errorf("commit on %s: %w", t.b.URI(), err)
	}
	return format.CheckWritable(next)
}

// conflict builds the ConflictError for an attempt at version attempted,
// loading the transactions of (readVersion, latest].
func (t *Table) conflict(ctx context.Context, readVersion, attempted, latest uint64) error {
	ce := &ConflictError{ReadVersion: readVersion, Attempted: attempted}
	n, err := t.cachedNaming(ctx)
	if err != nil {
		return err
	}
	for v := readVersion + 1; v <= latest; v++ {
		c := CommittedTxn{Version: v}
		m, _, err := t.load(ctx, v, n)
		if err == nil {
			c.Txn, err = t.LoadTransaction(ctx, m)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Err = err
		}
		ce.Committed = append(ce.Committed, c)
	}
	return ce
}
