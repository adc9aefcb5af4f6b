package cleanup

// Cleanup planning: Lance's cleanup_old_versions (lance 8.0.0,
// https://github.com/lancedb/lance/blob/main/rust/lance/src/dataset/cleanup.rs) as pure
// functions over manifest summaries and a listing. No I/O here; see
// cleanup_exec.go for the run.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/duration"
	"github.com/lanced-dev/lanced/internal/engine/journal"
	"github.com/lanced-dev/lanced/internal/format"
)

// Lance's cleanup defaults.
const (
	// DefaultCleanupOlderThan is LanceDB's optimize() default for
	// cleanupOlderThan.
	DefaultCleanupOlderThan = 7 * 24 * time.Hour
	// DefaultUnverifiedAfter is Lance's UNVERIFIED_THRESHOLD_DAYS: a file no
	// manifest references is left alone until it is this old, because it may
	// belong to a write in flight.
	DefaultUnverifiedAfter = 7 * 24 * time.Hour
)

// Table config keys Lance's auto-cleanup reads (cleanup.rs auto_cleanup_hook).
const (
	ConfigAutoCleanupInterval       = "lance.auto_cleanup.interval"
	ConfigAutoCleanupOlderThan      = "lance.auto_cleanup.older_than"
	ConfigAutoCleanupRetainVersions = "lance.auto_cleanup.retain_versions"
)

// Errors a cleanup run refuses with; nothing is deleted.
var (
	ErrCleanupBranches           = errors.New("cleanup: table has branches; branch-aware cleanup is not implemented (Lance keeps branch parent versions), refusing to clean")
	ErrCleanupBasePaths          = errors.New("cleanup: a manifest uses base paths (files outside the table root); refusing to clean")
	ErrCleanupTaggedOld          = errors.New("cleanup: tagged versions are old enough to clean")
	ErrCleanupManifestUnreadable = errors.New("cleanup: a manifest could not be read; nothing deleted")
	ErrCleanupNoVersions         = errors.New("cleanup: no manifests under _versions/")
)

// CleanupOptions are the retention settings of one cleanup run.
type CleanupOptions struct {
	// OlderThan: a version committed more than OlderThan before now may be
	// removed (Lance's before_timestamp = now - OlderThan). Zero makes every
	// version old enough.
	OlderThan time.Duration
	// KeepVersions keeps the newest KeepVersions versions (Lance's
	// retain_n_versions). Zero or less: no count rule.
	KeepVersions int
	// KeepTagged: tagged versions are always kept. With KeepTagged true an
	// old tagged version is kept silently (Lance's auto-cleanup); with false
	// the run fails with ErrCleanupTaggedOld naming the tags (Lance's
	// error_if_tagged_old_versions=true).
	KeepTagged bool
	// UnverifiedAfter is the in-flight window: a file no manifest has ever
	// referenced is deleted only once it is this old. Zero deletes such
	// files at once (Lance's delete_unverified=true): only safe when no
	// other writer is active.
	UnverifiedAfter time.Duration
	// DeleteRate caps deletes per second; zero or less: no cap.
	DeleteRate float64
	// StaleTaskAfter: pending outputs of a task whose journal entry was not
	// updated for this long (or was marked abandoned) are deleted at once.
	// Zero means journal.DefaultStaleTaskAfter.
	StaleTaskAfter time.Duration
}

// DefaultCleanupOptions returns Lance's defaults: versions older than 7 days
// go, no count rule, tagged versions kept silently, 7-day in-flight window.
func DefaultCleanupOptions() CleanupOptions {
	return CleanupOptions{
		OlderThan:       DefaultCleanupOlderThan,
		KeepTagged:      true,
		UnverifiedAfter: DefaultUnverifiedAfter,
		StaleTaskAfter:  journal.DefaultStaleTaskAfter,
	}
}

// CleanupOptionsFromConfig returns the defaults overridden by the table's
// lance.auto_cleanup.older_than (a humantime duration such as "14d" or
// "7days 12h") and lance.auto_cleanup.retain_versions. A policy's cleanup
// block overrides these in turn (the caller applies it).
func CleanupOptionsFromConfig(config map[string]string) (CleanupOptions, error) {
	o := DefaultCleanupOptions()
	if v, ok := config[ConfigAutoCleanupOlderThan]; ok {
		d, err := duration.Parse(v)
		if err != nil {
			return o, fmt.Errorf("table config %s: %w", ConfigAutoCleanupOlderThan, err)
		}
		o.OlderThan = d
	}
	if v, ok := config[ConfigAutoCleanupRetainVersions]; ok {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 31)
		if err != nil {
			return o, fmt.Errorf("table config %s: %q is not a version count", ConfigAutoCleanupRetainVersions, v)
		}
		o.KeepVersions = int(n)
	}
	return o, nil
}

// Reasons a version is kept or removed, and a file deleted. They appear in
// plans, logs and `lanced cleanup --json`.
const (
	KeepLatest       = "latest"
	KeepNewer        = "newer_than_older_than"
	KeepCount        = "within_keep_versions"
	KeepTagged       = "tagged"
	RemoveOldVersion = "old_version"

	DeleteReferencedByRemoved = "referenced_only_by_removed_versions"
	DeleteUnverifiedOld       = "unreferenced_older_than_window"
	DeleteStaleTemp           = "stale_temp_file"
	DeleteFailedTaskOutput    = "failed_task_output"
)

// File kinds in a plan.
const (
	KindManifest    = "manifest"
	KindData        = "data"
	KindDeletion    = "deletion"
	KindTransaction = "transaction"
	KindIndex       = "index"
	KindTemp        = "temp"
)

// versionPolicy decides which versions stay (Lance's should_clean plus the
// working-set rule).
type versionPolicy struct {
	latest        uint64
	beforeTime    time.Time // zero: no time rule
	beforeVersion uint64    // 0: no count rule
	tagged        map[uint64][]string
}

// newVersionPolicy builds the policy from the listed versions (any order),
// the tags (name -> version) and now.
func newVersionPolicy(opts CleanupOptions, now time.Time, versions []uint64, tags map[string]uint64) versionPolicy {
	p := versionPolicy{tagged: map[uint64][]string{}}
	sorted := slices.Clone(versions)
	slices.Sort(sorted)
	if len(sorted) > 0 {
		p.latest = sorted[len(sorted)-1]
	}
	p.beforeTime = now.Add(-opts.OlderThan)
	if n := opts.KeepVersions; n > 0 && len(sorted) > 0 {
		// retain_n_versions: before_version = versions[len-n], or the first
		// version when there are n or fewer.
		if len(sorted) <= n {
			p.beforeVersion = sorted[0]
		} else {
			p.beforeVersion = sorted[len(sorted)-n]
		}
	}
	for name, v := range tags {
		p.tagged[v] = append(p.tagged[v], name)
	}
	for _, names := range p.tagged {
		slices.Sort(names)
	}
	return p
}

// shouldClean is Lance's CleanupPolicy::should_clean.
func (p versionPolicy) shouldClean(version uint64, ts time.Time) bool {
	ok := true
	if !p.beforeTime.IsZero() {
		ok = ok && ts.Before(p.beforeTime)
	}
	if p.beforeVersion != 0 {
		ok = ok && version < p.beforeVersion
	}
	return ok
}

// keep returns why a version stays, or "" when it goes. taggedOld reports a
// tagged version that is old and not latest (Lance's tagged_old_versions).
func (p versionPolicy) keep(version uint64, ts time.Time) (reason string, taggedOld bool) {
	isLatest := p.latest <= version
	clean := p.shouldClean(version, ts)
	_, isTagged := p.tagged[version]
	switch {
	case isLatest:
		return KeepLatest, false
	case isTagged:
		return KeepTagged, clean
	case !clean:
		if p.beforeVersion != 0 && version >= p.beforeVersion {
			return KeepCount, false
		}
		return KeepNewer, false
	}
	return "", false
}

// ManifestRefs is what one manifest references, as keys relative to the
// table root, plus what the plan needs to classify it.
type ManifestRefs struct {
	Version   uint64
	Key       string // _versions/...
	Size      int64
	Timestamp time.Time
	// DataFiles are "data/<path>", DeletionFiles "_deletions/<name>",
	// Transaction "_transactions/<file>" (empty if none), IndexUUIDs the
	// hyphenated uuids of every index segment.
	DataFiles     []string
	DeletionFiles []string
	Transaction   string
	IndexUUIDs    []string
}

type refSet struct {
	files   map[string]struct{}
	indices map[string]struct{}
}

func newRefSet() refSet {
	return refSet{files: map[string]struct{}{}, indices: map[string]struct{}{}}
}

func (s refSet) add(r *ManifestRefs) {
	for _, k := range r.DataFiles {
		s.files[k] = struct{}{}
	}
	for _, k := range r.DeletionFiles {
		s.files[k] = struct{}{}
	}
	if r.Transaction != "" {
		s.files[r.Transaction] = struct{}{}
	}
	for _, u := range r.IndexUUIDs {
		s.indices[u] = struct{}{}
	}
}

// VersionDecision is one version in a plan.
type VersionDecision struct {
	Version   uint64    `json:"version"`
	Key       string    `json:"key"`
	Timestamp time.Time `json:"timestamp"`
	Keep      bool      `json:"keep"`
	Reason    string    `json:"reason"`
	Tags      []string  `json:"tags,omitempty"`
}

// FileDecision is one object a plan deletes.
type FileDecision struct {
	Key     string    `json:"key"`
	Kind    string    `json:"kind"`
	Size    int64     `json:"size_bytes"`
	ModTime time.Time `json:"mod_time"`
	Reason  string    `json:"reason"`
}

// ListedFile is one object of the table's listing.
type ListedFile struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// CleanupPlan is the outcome of planning: which versions go and which files
// are deleted, each with a reason. Files are deleted before manifests.
type CleanupPlan struct {
	Latest   uint64            `json:"latest_version"`
	Now      time.Time         `json:"now"`
	Versions []VersionDecision `json:"versions"`
	Files    []FileDecision    `json:"files"`
	// Manifests are the removed versions' manifests, oldest first; they are
	// deleted last.
	Manifests []FileDecision `json:"manifests"`
	// EarliestRetained is the oldest commit time among kept versions; files
	// modified after it are never deleted.
	EarliestRetained time.Time         `json:"earliest_retained"`
	TaggedOld        map[string]uint64 `json:"tagged_old,omitempty"`
	BytesRemoved     int64             `json:"bytes_removed"`
	// PendingTasks are journal entries whose outputs this plan deletes; the
	// entries are cleared after their files are gone.
	PendingTasks []string `json:"pending_tasks,omitempty"`
}

// planner accumulates manifests one at a time (bounded memory: sets of
// distinct keys, not per-version lists), then judges listed files.
type planner struct {
	opts       CleanupOptions
	now        time.Time
	policy     versionPolicy
	referenced refSet // by kept versions
	verified   refSet // by removed versions
	plan       CleanupPlan
	earliest   time.Time
	haveKept   bool
	// pending maps a failed task's output key to its task id.
	pending map[string]string
}

func newPlanner(opts CleanupOptions, now time.Time, versions []uint64, tags map[string]uint64) *planner {
	p := &planner{
		opts:       opts,
		now:        now,
		policy:     newVersionPolicy(opts, now, versions, tags),
		referenced: newRefSet(),
		verified:   newRefSet(),
		pending:    map[string]string{},
	}
	p.plan.Latest = p.policy.latest
	p.plan.Now = now
	return p
}

// addManifest classifies one manifest and records its references.
func (p *planner) addManifest(r *ManifestRefs) {
	reason, taggedOld := p.policy.keep(r.Version, r.Timestamp)
	d := VersionDecision{Version: r.Version, Key: r.Key, Timestamp: r.Timestamp, Keep: reason != "", Reason: reason, Tags: p.policy.tagged[r.Version]}
	if taggedOld {
		if p.plan.TaggedOld == nil {
			p.plan.TaggedOld = map[string]uint64{}
		}
		for _, n := range p.policy.tagged[r.Version] {
			p.plan.TaggedOld[n] = r.Version
		}
	}
	if d.Keep {
		p.referenced.add(r)
		if !p.haveKept || r.Timestamp.Before(p.earliest) {
			p.earliest = r.Timestamp
			p.haveKept = true
		}
	} else {
		d.Reason = RemoveOldVersion
		p.verified.add(r)
		p.plan.Manifests = append(p.plan.Manifests, FileDecision{Key: r.Key, Kind: KindManifest, Size: r.Size, Reason: RemoveOldVersion})
		p.plan.BytesRemoved += r.Size
	}
	p.plan.Versions = append(p.plan.Versions, d)
}

// stagingTarget returns the key a local write's hidden staging file
// ("dir/.<name>.<random hex>.lanced.tmp", see internal/store) was going to
// become.
func stagingTarget(key string) (string, bool) {
	dir, base := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir, base = key[:i+1], key[i+1:]
	}
	if !strings.HasPrefix(base, ".") || !strings.HasSuffix(base, tempSuffix) {
		return "", false
	}
	rest := strings.TrimSuffix(base[1:], tempSuffix)
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	return dir + rest[:i], true
}

// judge decides one listed file: Lance's path_if_not_referenced, behind the
// read_dir_all filter (modified at or before the earliest retained commit),
// plus lanced's own stale temp files and failed-task outputs.
func (p *planner) judge(f ListedFile) (FileDecision, bool) {
	if !format.InTableDirs(f.Key) {
		return FileDecision{}, false
	}
	del := func(kind, reason string) (FileDecision, bool) {
		return FileDecision{Key: f.Key, Kind: kind, Size: f.Size, ModTime: f.ModTime, Reason: reason}, true
	}
	// Outputs of a dead lanced task: deleted at once, whatever their age,
	// unless some manifest references them (its commit landed after all).
	if _, ok := p.pending[f.Key]; ok && !p.isReferencedAnywhere(f.Key) {
		return del(kindOf(f.Key), DeleteFailedTaskOutput)
	}
	// The staging file of a dead task's output that was killed mid-upload.
	if target, ok := stagingTarget(f.Key); ok {
		if _, ok := p.pending[target]; ok {
			return del(KindTemp, DeleteFailedTaskOutput)
		}
	}
	if p.haveKept && f.ModTime.After(p.earliest) {
		return FileDecision{}, false
	}
	inProgress := p.opts.UnverifiedAfter > 0 && !f.ModTime.Before(p.now.Add(-p.opts.UnverifiedAfter))
	base := f.Key[strings.LastIndexByte(f.Key, '/')+1:]
	if strings.HasPrefix(base, ".") && strings.HasSuffix(base, tempSuffix) {
		// A local write's staging file left by a crash (store.TempSuffix).
		if inProgress {
			return FileDecision{}, false
		}
		return del(KindTemp, DeleteStaleTemp)
	}
	if strings.HasPrefix(f.Key, "_versions/.tmp") {
		if inProgress {
			return FileDecision{}, false
		}
		return del(KindTemp, DeleteUnverifiedOld)
	}
	if rest, ok := strings.CutPrefix(f.Key, "_indices/"); ok {
		uuid, _, _ := strings.Cut(rest, "/")
		switch {
		case has(p.referenced.indices, uuid):
			return FileDecision{}, false
		case !inProgress:
			return del(KindIndex, DeleteUnverifiedOld)
		case has(p.verified.indices, uuid):
			return del(KindIndex, DeleteReferencedByRemoved)
		}
		return FileDecision{}, false
	}
	var kind string
	switch ext := base[strings.LastIndexByte(base, '.')+1:]; {
	case ext == "lance" && strings.HasPrefix(f.Key, "data/"):
		kind = KindData
	case (ext == "arrow" || ext == "bin") && strings.HasPrefix(f.Key, "_deletions/"):
		kind = KindDeletion
	case ext == "txn" && strings.HasPrefix(f.Key, "_transactions/"):
		kind = KindTransaction
	default:
		return FileDecision{}, false // manifests go through the version list; anything else stays
	}
	switch {
	case has(p.referenced.files, f.Key):
		return FileDecision{}, false
	case !inProgress:
		return del(kind, DeleteUnverifiedOld)
	case has(p.verified.files, f.Key):
		return del(kind, DeleteReferencedByRemoved)
	}
	return FileDecision{}, false
}

func (p *planner) isReferencedAnywhere(key string) bool {
	return has(p.referenced.files, key) || has(p.verified.files, key) || indexReferenced(key, p.referenced) || indexReferenced(key, p.verified)
}

func indexReferenced(key string, s refSet) bool {
	rest, ok := strings.CutPrefix(key, "_indices/")
	if !ok {
		return false
	}
	uuid, _, _ := strings.Cut(rest, "/")
	return has(s.indices, uuid)
}

func kindOf(key string) string {
	switch {
	case strings.HasPrefix(key, "data/"):
		return KindData
	case strings.HasPrefix(key, "_deletions/"):
		return KindDeletion
	case strings.HasPrefix(key, "_transactions/"):
		return KindTransaction
	case strings.HasPrefix(key, "_indices/"):
		return KindIndex
	}
	return KindTemp
}

func has(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
}

// addFile judges a listed file and records a deletion.
func (p *planner) addFile(f ListedFile) {
	if d, ok := p.judge(f); ok {
		p.plan.Files = append(p.plan.Files, d)
		p.plan.BytesRemoved += d.Size
	}
}

// finish sorts the plan: versions ascending, files by key, manifests oldest
// first.
func (p *planner) finish() *CleanupPlan {
	p.plan.EarliestRetained = p.earliest
	slices.SortFunc(p.plan.Versions, func(a, b VersionDecision) int { return cmpU64(a.Version, b.Version) })
	slices.SortFunc(p.plan.Files, func(a, b FileDecision) int { return strings.Compare(a.Key, b.Key) })
	vers := map[string]uint64{}
	for _, v := range p.plan.Versions {
		vers[v.Key] = v.Version
	}
	slices.SortFunc(p.plan.Manifests, func(a, b FileDecision) int { return cmpU64(vers[a.Key], vers[b.Key]) })
	return &p.plan
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PlanCleanup plans a cleanup from complete inputs: every manifest's refs,
// the tags, and the listing of the table root (keys relative to it). It is
// the pure core of Cleaner.Plan, for tests and tools.
func PlanCleanup(opts CleanupOptions, now time.Time, manifests []ManifestRefs, tags map[string]uint64, listing []ListedFile) *CleanupPlan {
	versions := make([]uint64, len(manifests))
	for i := range manifests {
		versions[i] = manifests[i].Version
	}
	p := newPlanner(opts, now, versions, tags)
	for i := range manifests {
		p.addManifest(&manifests[i])
	}
	for _, f := range listing {
		p.addFile(f)
	}
	return p.finish()
}
