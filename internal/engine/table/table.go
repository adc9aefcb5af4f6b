package table

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/store"
)

// Errors of table reads.
var (
	// ErrNoTable: the root has no committed manifest under _versions/.
	ErrNoTable = errors.New("no Lance table: no manifest under _versions/")
	// ErrNoTransaction: a version records neither an inline transaction
	// nor a transaction file (Lance refuses to rebase over such a version).
	ErrNoTransaction = errors.New("version has no transaction")
)

// WriterLibrary and WriterVersion go into writer_version of every manifest
// lanced commits. Never "lance": Lance keys bug workarounds on its own
// versions. cmd/lanced may set WriterVersion at start-up (semver).
var (
	WriterLibrary = "lanced"
	WriterVersion = "0.1.0"
)

// Table is one Lance table (its root bucket). Reads go straight to the
// store every time: the latest version is not cached, since other writers
// commit concurrently, except for the few seconds a Table opened with
// OpenShared lets one task's lookups share a listing. A Table is safe for
// concurrent use.
type Table struct {
	b *store.Bucket
	// naming caches the naming scheme of the newest version seen (0 before
	// the first listing); loads fall back to the other scheme, so a stale
	// value after a V1->V2 migration costs one extra GET, never a wrong read.
	naming atomic.Int32
	// Now is the clock used for manifest timestamps (tests replace it).
	Now func() time.Time
	// shareWindow, when set (ShareListings), lets latest-version lookups
	// reuse the newest listing (or this Table's own commit) for that long.
	shareWindow time.Duration
	shared      atomic.Pointer[sharedListing]
}

// sharedListing is the newest version a listing or a commit of this Table
// found, and when.
type sharedListing struct {
	vi VersionInfo
	at time.Time
}

// ShareWindow is how long a Table opened with OpenShared reuses a listing:
// long enough for the lookups of one task (open, plan or commit checks,
// the commit itself) to share one, short against any cleanup age window.
const ShareWindow = 10 * time.Second

// VersionInfo is one committed version found in _versions/.
type VersionInfo struct {
	Version uint64
	Naming  format.Naming
	// Key is the manifest key relative to the table root.
	Key     string
	Size    int64
	ModTime time.Time
}

// OpenTable opens the table rooted at b. It checks that at least one
// committed manifest exists.
func OpenTable(ctx context.Context, b *store.Bucket) (*Table, error) {
	t := At(b)
	if _, err := t.latestInfo(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// At returns the table rooted at b without checking that it holds a
// version (Versions then lists none, Latest fails with ErrNoTable).
func At(b *store.Bucket) *Table { return &Table{b: b, Now: time.Now} }

// OpenShared is OpenTable for one task's worth of lookups: the Table
// shares listings for ShareWindow (see ShareListings), starting with the
// listing that checks the table exists.
func OpenShared(ctx context.Context, b *store.Bucket) (*Table, error) {
	t := At(b).ShareListings(ShareWindow)
	if _, err := t.latestInfo(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// ShareListings makes the latest-version lookups (Latest, LatestVersion,
// LatestInfo, Naming and the commit's own check) reuse the newest listing
// of _versions/, or the version this Table last committed, for window
// after it was made, instead of listing again (on an object store each
// listing is a LIST request). Sharing is safe for commits: a commit puts
// its manifest only if that version does not exist yet, so a listing that
// missed a concurrent commit costs one failed put, after which the commit
// lists afresh and reports the conflict as usual. Call it before the
// Table is used concurrently; it returns t.
func (t *Table) ShareListings(window time.Duration) *Table {
	t.shareWindow = window
	return t
}

// sharedInfo returns the shared newest version while it is fresh.
func (t *Table) sharedInfo() (VersionInfo, bool) {
	if t.shareWindow <= 0 {
		return VersionInfo{}, false
	}
	s := t.shared.Load()
	if s == nil || time.Since(s.at) > t.shareWindow {
		return VersionInfo{}, false
	}
	return s.vi, true
}

// remember records vi as the newest version known now (when sharing).
func (t *Table) remember(vi VersionInfo) {
	if t.shareWindow > 0 {
		t.shared.Store(&sharedListing{vi: vi, at: time.Now()})
	}
}

// forget drops the shared listing: the next lookup lists.
func (t *Table) forget() { t.shared.Store(nil) }

// Bucket returns the table's root bucket.
func (t *Table) Bucket() *store.Bucket { return t.b }

// URI returns the table root URI.
func (t *Table) URI() string { return t.b.URI() }

// wrap says what failed; it names the table unless err (a store error)
// names it already, so a message carries the URI once.
func (t *Table) wrap(what string, err error) error {
	var se *store.Error
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s of %s: %w", what, t.b.URI(), err)
}

// Versions lists every committed version, ascending. Detached versions and
// staging or temporary files are skipped.
func (t *Table) Versions(ctx context.Context) ([]VersionInfo, error) {
	var out []VersionInfo
	err := t.listVersions(ctx, func(o store.Object) error {
		if o.Key == "" { // a restarted listing
			out = out[:0]
			return nil
		}
		if o.IsDir {
			return nil
		}
		v, n, err := format.ParseManifestName(o.Key)
		if err != nil {
			return nil
		}
		out = append(out, VersionInfo{Version: v, Naming: n, Key: o.Key, Size: o.Size, ModTime: o.ModTime})
		return nil
	})
	if err != nil {
		return nil, t.wrap("list versions", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// listAttempts bounds restarts of a _versions/ listing that failed because
// a file vanished under it (a concurrent committer's temp file on a local
// file system).
const listAttempts = 5

// listVersions lists _versions/, restarting when the listing fails with
// NotFound; before every (re)start fn sees an Object with an empty Key so
// it can reset what it collected.
func (t *Table) listVersions(ctx context.Context, fn func(store.Object) error) error {
	var err error
	for attempt := 0; attempt < listAttempts; attempt++ {
		if err = fn(store.Object{}); err != nil {
			return err
		}
		err = t.b.ListDir(ctx, format.VersionsDir+"/", fn)
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return err
}

// errStopListing ends a listing early.
var errStopListing = errors.New("stop listing")

// v2ProbeWindow is how many entries after the first V2 manifest the latest
// lookup still checks (Lance sanity-checks 999 more).
const v2ProbeWindow = 1000

// latestInfo finds the newest committed version by listing _versions/. V2
// names list newest first on every store (lexical order), so the listing
// stops a window after the first V2 manifest; V1 tables are listed whole.
// latest_version_hint.json is not consulted: the listing is the truth.
func (t *Table) latestInfo(ctx context.Context) (VersionInfo, error) {
	if vi, ok := t.sharedInfo(); ok {
		return vi, nil
	}
	var best VersionInfo
	var found bool
	var sinceV2 int
	err := t.listVersions(ctx, func(o store.Object) error {
		if o.Key == "" { // a restarted listing
			best, found, sinceV2 = VersionInfo{}, false, -1
			return nil
		}
		if sinceV2 >= 0 {
			if sinceV2++; sinceV2 > v2ProbeWindow {
				return errStopListing
			}
		}
		if o.IsDir {
			return nil
		}
		v, n, err := format.ParseManifestName(o.Key)
		if err != nil {
			return nil
		}
		if n == format.NamingV2 && sinceV2 < 0 {
			sinceV2 = 0
		}
		if !found || v > best.Version {
			best, found = VersionInfo{Version: v, Naming: n, Key: o.Key, Size: o.Size, ModTime: o.ModTime}, true
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopListing) {
		return VersionInfo{}, t.wrap("list versions", err)
	}
	if !found {
		return VersionInfo{}, fmt.Errorf("open %s: %w", t.b.URI(), ErrNoTable)
	}
	t.naming.Store(int32(best.Naming))
	t.remember(best)
	return best, nil
}

// LatestVersion returns the newest committed version number.
func (t *Table) LatestVersion(ctx context.Context) (uint64, error) {
	vi, err := t.latestInfo(ctx)
	return vi.Version, err
}

// LatestInfo returns the newest committed version: number, naming and
// manifest key.
func (t *Table) LatestInfo(ctx context.Context) (VersionInfo, error) { return t.latestInfo(ctx) }

// Latest loads the newest committed manifest.
func (t *Table) Latest(ctx context.Context) (*format.Manifest, error) {
	for attempt := 0; ; attempt++ {
		vi, err := t.latestInfo(ctx)
		if err != nil {
			return nil, err
		}
		m, _, err := t.load(ctx, vi.Version, vi.Naming)
		// A newer version and a concurrent cleanup can remove the version
		// we just listed as latest: list again.
		if errors.Is(err, store.ErrNotFound) && attempt < listAttempts {
			t.forget()
			continue
		}
		return m, err
	}
}

// Naming returns the manifest naming scheme of the newest version, the one
// a new commit must use.
func (t *Table) Naming(ctx context.Context) (format.Naming, error) {
	vi, err := t.latestInfo(ctx)
	return vi.Naming, err
}

// Load loads one version's manifest. Its reader flags are not checked: use
// format.CheckReadable before interpreting data, format.CheckWritable
// before committing on top of it.
func (t *Table) Load(ctx context.Context, version uint64) (*format.Manifest, error) {
	n, err := t.cachedNaming(ctx)
	if err != nil {
		return nil, err
	}
	m, _, err := t.load(ctx, version, n)
	return m, err
}

// cachedNaming returns the last naming scheme seen, listing only when none
// has been seen yet.
func (t *Table) cachedNaming(ctx context.Context) (format.Naming, error) {
	if n := format.Naming(t.naming.Load()); n != 0 {
		return n, nil
	}
	return t.Naming(ctx)
}

// load reads version v under naming n, falling back to the other scheme (a
// table migrated from V1 to V2, or mid-migration).
func (t *Table) load(ctx context.Context, v uint64, n format.Naming) (*format.Manifest, format.Naming, error) {
	key := format.ManifestKey(n, v)
	data, err := t.b.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		other := format.NamingV1
		if n == format.NamingV1 {
			other = format.NamingV2
		}
		if d2, err2 := t.b.Get(ctx, format.ManifestKey(other, v)); err2 == nil {
			key, data, err, n = format.ManifestKey(other, v), d2, nil, other
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read manifest %s of %s: %w", key, t.b.URI(), err)
	}
	m, err := format.DecodeManifestFile(key, data)
	if err != nil {
		return nil, 0, err
	}
	if m.Version() != v {
		return nil, 0, fmt.Errorf("format: manifest %s: records version %d: %w", key, m.Version(), format.ErrCorrupt)
	}
	return m, n, nil
}

// LoadTransaction returns the transaction that created m: the inline
// section when present, else _transactions/{transaction_file}; ErrNoTransaction
// when it has neither.
func (t *Table) LoadTransaction(ctx context.Context, m *format.Manifest) (*tablepb.Transaction, error) {
	if m.Txn != nil {
		return m.Txn, nil
	}
	key := format.TransactionKeyFromManifest(m.PB)
	if key == "" {
		return nil, fmt.Errorf("version %d of %s: %w", m.Version(), t.b.URI(), ErrNoTransaction)
	}
	data, err := t.b.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read transaction %s of version %d: %w", key, m.Version(), err)
	}
	return format.DecodeTransaction(key, data)
}

// ReadDeletions returns the deleted row offsets of a fragment of this table
// (see ReadDeletions).
func (t *Table) ReadDeletions(ctx context.Context, frag *tablepb.DataFragment) (*roaring.Bitmap, error) {
	return ReadDeletions(ctx, t.b, frag)
}

// ReadDeletions is the one deletion-file reader: it returns the deleted row
// offsets of a fragment in the table at b (empty when it has no deletion
// file). The file must exist, decode, hold exactly num_deleted_rows rows and
// no offset at or past physical_rows; one under an external base path is
// refused (job.ErrUnsupported).
func ReadDeletions(ctx context.Context, b *store.Bucket, frag *tablepb.DataFragment) (*roaring.Bitmap, error) {
	df := frag.GetDeletionFile()
	if df == nil {
		return roaring.New(), nil
	}
	key := format.DeletionFileKey(frag.GetId(), df)
	if df.BaseId != nil {
		return nil, fmt.Errorf("deletion file %s of fragment %d (base %d) is under an external base path: %w", key, frag.GetId(), df.GetBaseId(), job.ErrUnsupported)
	}
	data, err := b.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("deletion file %s of fragment %d is missing: %w", key, frag.GetId(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("read deletion file %s of fragment %d: %w", key, frag.GetId(), err)
	}
	rows, err := format.DecodeDeletionFile(key, df.GetFileType(), data)
	if err != nil {
		return nil, err
	}
	if err := format.CheckDeletions(key, df, frag.GetPhysicalRows(), rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// isLocal reports whether the table lives on a local file system, where
// lance 8.x maintains latest_version_hint.json.
func (t *Table) isLocal() bool { return strings.HasPrefix(t.b.URI(), "file://") }
