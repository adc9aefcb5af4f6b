package cleanup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/internal/format"
)

func TestCleanupOptionsFromConfig(t *testing.T) {
	o, err := CleanupOptionsFromConfig(nil)
	if err != nil || o != DefaultCleanupOptions() {
		t.Errorf("no config: %+v, %v; want the defaults", o, err)
	}
	o, err = CleanupOptionsFromConfig(map[string]string{
		ConfigAutoCleanupOlderThan: "14d", ConfigAutoCleanupRetainVersions: "5", ConfigAutoCleanupInterval: "20",
	})
	if err != nil || o.OlderThan != 14*24*time.Hour || o.KeepVersions != 5 || o.UnverifiedAfter != DefaultUnverifiedAfter {
		t.Errorf("config: %+v, %v", o, err)
	}
	if _, err := CleanupOptionsFromConfig(map[string]string{ConfigAutoCleanupOlderThan: "soon"}); err == nil || !strings.Contains(err.Error(), ConfigAutoCleanupOlderThan) {
		t.Errorf("bad older_than: %v, want an error naming the key", err)
	}
	if _, err := CleanupOptionsFromConfig(map[string]string{ConfigAutoCleanupRetainVersions: "-2"}); err == nil {
		t.Error("bad retain_versions accepted")
	}
}

var t0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.Add(time.Duration(n) * 24 * time.Hour) }

func TestVersionRetention(t *testing.T) {
	// Versions 1..10 committed on days 1..10; now is day 20.
	var ms []ManifestRefs
	for v := 1; v <= 10; v++ {
		ms = append(ms, ManifestRefs{Version: uint64(v), Key: fmt.Sprintf("_versions/%d.manifest", v), Timestamp: day(v)})
	}
	now := day(20)
	kept := func(opts CleanupOptions, tags map[string]uint64) (keep []uint64, reasons map[uint64]string, p *CleanupPlan) {
		p = PlanCleanup(opts, now, ms, tags, nil)
		reasons = map[uint64]string{}
		for _, v := range p.Versions {
			reasons[v.Version] = v.Reason
			if v.Keep {
				keep = append(keep, v.Version)
			}
		}
		return keep, reasons, p
	}
	o := DefaultCleanupOptions()
	o.OlderThan = 15 * 24 * time.Hour // cutoff day 5: versions 5.. stay (5 is not before the cutoff)
	keep, why, p := kept(o, nil)
	if !slices.Equal(keep, []uint64{5, 6, 7, 8, 9, 10}) || why[10] != KeepLatest || why[6] != KeepNewer || why[1] != RemoveOldVersion {
		t.Errorf("older_than: kept %v, reasons %v", keep, why)
	}
	if len(p.Manifests) != 4 || p.Manifests[0].Key != "_versions/1.manifest" || p.Manifests[3].Key != "_versions/4.manifest" {
		t.Errorf("manifests to delete %v, want 1..4 oldest first", p.Manifests)
	}
	if !p.EarliestRetained.Equal(day(5)) {
		t.Errorf("earliest retained %v, want day 5", p.EarliestRetained)
	}

	o.OlderThan = 0
	keep, _, _ = kept(o, nil)
	if !slices.Equal(keep, []uint64{10}) {
		t.Errorf("older_than 0: kept %v, want only the latest", keep)
	}
	o.OlderThan = 1000 * 24 * time.Hour
	keep, _, _ = kept(o, nil)
	if len(keep) != 10 {
		t.Errorf("nothing is old: kept %v", keep)
	}

	// keep_versions: both rules must agree to clean (Lance ANDs them).
	o.OlderThan = 0
	o.KeepVersions = 3
	keep, why, _ = kept(o, nil)
	if !slices.Equal(keep, []uint64{8, 9, 10}) || why[8] != KeepCount {
		t.Errorf("keep 3: kept %v %v", keep, why)
	}
	o.KeepVersions = 30
	keep, _, _ = kept(o, nil)
	if len(keep) != 10 {
		t.Errorf("keep 30 of 10: kept %v", keep)
	}
	o.KeepVersions = 3
	o.OlderThan = 12 * 24 * time.Hour // cutoff day 8
	keep, _, _ = kept(o, nil)
	if !slices.Equal(keep, []uint64{8, 9, 10}) {
		t.Errorf("keep 3 and cutoff day 8: kept %v", keep)
	}

	// Tags keep versions; old tagged versions are reported.
	o = DefaultCleanupOptions()
	o.OlderThan = 0
	keep, why, p = kept(o, map[string]uint64{"gold": 2, "also": 2, "new": 10})
	if !slices.Equal(keep, []uint64{2, 10}) || why[2] != KeepTagged || why[10] != KeepLatest {
		t.Errorf("tags: kept %v %v", keep, why)
	}
	if len(p.TaggedOld) != 2 || p.TaggedOld["gold"] != 2 || p.TaggedOld["also"] != 2 {
		t.Errorf("tagged old = %v, want gold and also at 2 (latest's tag is not old)", p.TaggedOld)
	}
	// The latest is kept even when every rule says clean.
	o.KeepVersions = 0
	keep, _, _ = kept(o, nil)
	if !slices.Equal(keep, []uint64{10}) {
		t.Errorf("latest: kept %v", keep)
	}
}

func TestJudgeFiles(t *testing.T) {
	now := day(30)
	ms := []ManifestRefs{
		{Version: 1, Key: "_versions/1.manifest", Timestamp: day(1), DataFiles: []string{"data/a.lance", "data/b.lance"},
			DeletionFiles: []string{"_deletions/0-1-5.arrow"}, Transaction: "_transactions/0-x.txn", IndexUUIDs: []string{"u-old"}},
		{Version: 2, Key: "_versions/2.manifest", Timestamp: day(25), DataFiles: []string{"data/b.lance", "data/c.lance"},
			Transaction: "_transactions/1-y.txn", IndexUUIDs: []string{"u-new"}},
	}
	recent, old, future := day(24), day(2), day(26) // earliest retained commit: day 25
	listing := []ListedFile{
		{Key: "data/a.lance", ModTime: recent},     // referenced only by removed v1 -> delete even though recent
		{Key: "data/b.lance", ModTime: old},        // referenced by kept v2 -> keep
		{Key: "data/c.lance", ModTime: old},        // kept
		{Key: "data/orphan.lance", ModTime: old},   // never referenced, old -> delete
		{Key: "data/young.lance", ModTime: recent}, // never referenced, in flight -> keep
		{Key: "data/late.lance", ModTime: future},  // modified after the earliest retained commit -> keep
		{Key: "data/x.txt", ModTime: old},          // not a .lance -> keep
		{Key: "other.lance", ModTime: old},         // outside the cleaned dirs -> keep
		{Key: "_deletions/0-1-5.arrow", ModTime: recent},
		{Key: "_deletions/0-9-9.bin", ModTime: old},
		{Key: "_transactions/0-x.txn", ModTime: recent},
		{Key: "_transactions/1-y.txn", ModTime: old},
		{Key: "_transactions/junk.txn", ModTime: old},
		{Key: "_indices/u-old/page_data.lance", ModTime: recent},
		{Key: "_indices/u-new/page_data.lance", ModTime: old},
		{Key: "_indices/u-orphan/index.idx", ModTime: recent},
		{Key: "_versions/.tmp_x", ModTime: old},
		{Key: "_versions/1.manifest", ModTime: old}, // manifests go by the version list only
		{Key: "_versions/latest_version_hint.json", ModTime: old},
		{Key: "data/.a.lance.0123.lanced.tmp", ModTime: old},
		{Key: "data/.b.lance.0456.lanced.tmp", ModTime: recent},
		{Key: "_refs/tags/x.json", ModTime: old},
	}
	o := DefaultCleanupOptions()
	o.OlderThan = 10 * 24 * time.Hour
	p := PlanCleanup(o, now, ms, nil, listing)
	got := map[string]string{}
	for _, f := range p.Files {
		got[f.Key] = f.Reason
	}
	want := map[string]string{
		"data/a.lance":                   DeleteReferencedByRemoved,
		"data/orphan.lance":              DeleteUnverifiedOld,
		"_deletions/0-1-5.arrow":         DeleteReferencedByRemoved,
		"_deletions/0-9-9.bin":           DeleteUnverifiedOld,
		"_transactions/0-x.txn":          DeleteReferencedByRemoved,
		"_transactions/junk.txn":         DeleteUnverifiedOld,
		"_indices/u-old/page_data.lance": DeleteReferencedByRemoved,
		"_versions/.tmp_x":               DeleteUnverifiedOld,
		"data/.a.lance.0123.lanced.tmp":  DeleteStaleTemp,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deleted:\n got %v\nwant %v", got, want)
	}
	// With no in-flight window, never-referenced recent files go too.
	o.UnverifiedAfter = 0
	p = PlanCleanup(o, now, ms, nil, listing)
	got = map[string]string{}
	for _, f := range p.Files {
		got[f.Key] = f.Reason
	}
	for _, k := range []string{"data/young.lance", "_indices/u-orphan/index.idx", "data/.b.lance.0456.lanced.tmp"} {
		if _, ok := got[k]; !ok {
			t.Errorf("delete_unverified: %s kept", k)
		}
	}
	for _, k := range []string{"data/late.lance", "data/b.lance", "_indices/u-new/page_data.lance", "other.lance"} {
		if _, ok := got[k]; ok {
			t.Errorf("delete_unverified: %s deleted", k)
		}
	}
}

// TestCleanupPropertyRandomHistories generates random table histories
// (appends, deletes, compactions, tags, uncommitted writes of concurrent
// writers and of dead lanced tasks) and checks the safety invariants of
// every plan.
func TestCleanupPropertyRandomHistories(t *testing.T) {
	iters := 400
	if testing.Short() {
		iters = 60
	}
	for seed := range iters {
		h := randomHistory(rand.New(rand.NewPCG(uint64(seed), 99)))
		checkPlanInvariants(t, seed, h)
	}
}

type history struct {
	manifests []ManifestRefs
	listing   []ListedFile
	tags      map[string]uint64
	now       time.Time
	opts      CleanupOptions
	pending   map[string]bool // outputs of dead lanced tasks (never committed)
}

func randomHistory(r *rand.Rand) history {
	h := history{tags: map[string]uint64{}, pending: map[string]bool{}}
	type frag struct {
		files []string
		del   string
	}
	var frags []frag
	clock := t0
	nextFile := 0
	newFile := func(dir, ext string) string {
		nextFile++
		return fmt.Sprintf("%s/f%04d.%s", dir, nextFile, ext)
	}
	var indexUUID string
	mtimes := map[string]time.Time{}
	commits := 2 + r.IntN(25)
	for v := 1; v <= commits; v++ {
		clock = clock.Add(time.Duration(1+r.IntN(72)) * time.Hour)
		written := clock.Add(-time.Duration(r.IntN(60)) * time.Minute)
		switch op := r.IntN(10); {
		case op < 4 || len(frags) == 0: // append
			f := newFile("data", "lance")
			mtimes[f] = written
			frags = append(frags, frag{files: []string{f}})
		case op < 6: // delete rows in a fragment
			i := r.IntN(len(frags))
			d := newFile("_deletions", []string{"arrow", "bin"}[r.IntN(2)])
			mtimes[d] = written
			frags[i].del = d
		case op < 8: // compaction of a run of fragments
			i := r.IntN(len(frags))
			j := i + 1 + r.IntN(len(frags)-i)
			f := newFile("data", "lance")
			mtimes[f] = written
			frags = append(frags[:i], append([]frag{{files: []string{f}}}, frags[j:]...)...)
		case op < 9: // index (re)build
			indexUUID = fmt.Sprintf("idx-%d", v)
			k := "_indices/" + indexUUID + "/page_data.lance"
			mtimes[k] = written
		default: // add a column to a fragment
			i := r.IntN(len(frags))
			f := newFile("data", "lance")
			mtimes[f] = written
			frags[i].files = append(slices.Clone(frags[i].files), f)
		}
		txn := fmt.Sprintf("_transactions/%d-t%d.txn", v-1, v)
		mtimes[txn] = written
		m := ManifestRefs{Version: uint64(v), Key: fmt.Sprintf("_versions/%d.manifest", v), Timestamp: clock, Transaction: txn}
		for _, f := range frags {
			m.DataFiles = append(m.DataFiles, f.files...)
			if f.del != "" {
				m.DeletionFiles = append(m.DeletionFiles, f.del)
			}
		}
		if indexUUID != "" {
			m.IndexUUIDs = []string{indexUUID}
		}
		mtimes[m.Key] = clock
		h.manifests = append(h.manifests, m)
		if r.IntN(6) == 0 {
			h.tags[fmt.Sprintf("tag%d", v)] = uint64(v)
		}
		// Concurrent writers that never committed (or are still running).
		for range r.IntN(2) {
			k := newFile([]string{"data", "_deletions", "_transactions", "_indices/u" + fmt.Sprint(v)}[r.IntN(4)],
				[]string{"lance", "arrow", "txn", "idx"}[r.IntN(4)])
			mtimes[k] = clock.Add(time.Duration(r.IntN(48)) * time.Hour)
			if r.IntN(3) == 0 {
				h.pending[k] = true
			}
		}
	}
	h.now = clock.Add(time.Duration(r.IntN(30*24)) * time.Hour)
	for k, mt := range mtimes {
		h.listing = append(h.listing, ListedFile{Key: k, ModTime: mt, Size: 1})
	}
	h.listing = append(h.listing, ListedFile{Key: "other/thing.lance", ModTime: t0}, ListedFile{Key: "_refs/tags/x.json", ModTime: t0})
	slices.SortFunc(h.listing, func(a, b ListedFile) int { return strings.Compare(a.Key, b.Key) })
	h.opts = CleanupOptions{
		OlderThan:       time.Duration(r.IntN(20*24)) * time.Hour,
		KeepVersions:    r.IntN(5),
		KeepTagged:      true,
		UnverifiedAfter: []time.Duration{0, time.Hour, 7 * 24 * time.Hour}[r.IntN(3)],
	}
	return h
}

func checkPlanInvariants(t *testing.T, seed int, h history) {
	t.Helper()
	versions := make([]uint64, len(h.manifests))
	for i := range h.manifests {
		versions[i] = h.manifests[i].Version
	}
	p := newPlanner(h.opts, h.now, versions, h.tags)
	for i := range h.manifests {
		p.addManifest(&h.manifests[i])
	}
	for k := range h.pending {
		p.pending[k] = "dead-task"
	}
	for _, f := range h.listing {
		p.addFile(f)
	}
	plan := p.finish()

	kept := map[uint64]bool{}
	for _, v := range plan.Versions {
		kept[v.Version] = v.Keep
	}
	latest := slices.Max(versions)
	if !kept[latest] {
		t.Fatalf("seed %d: latest version %d removed", seed, latest)
	}
	for _, v := range h.tags {
		if !kept[v] {
			t.Fatalf("seed %d: tagged version %d removed", seed, v)
		}
	}
	everReferenced := map[string]bool{}
	keptRefs := map[string]uint64{}
	for _, m := range h.manifests {
		for _, k := range slices.Concat(m.DataFiles, m.DeletionFiles, []string{m.Transaction}) {
			everReferenced[k] = true
			if kept[m.Version] {
				keptRefs[k] = m.Version
			}
		}
		for _, u := range m.IndexUUIDs {
			everReferenced["_indices/"+u+"/page_data.lance"] = true
			if kept[m.Version] {
				keptRefs["_indices/"+u+"/page_data.lance"] = m.Version
			}
		}
	}
	mtime := map[string]time.Time{}
	for _, f := range h.listing {
		mtime[f.Key] = f.ModTime
	}
	for _, d := range plan.Files {
		if v, ok := keptRefs[d.Key]; ok {
			t.Fatalf("seed %d: deletes %s, referenced by kept version %d", seed, d.Key, v)
		}
		if !format.InTableDirs(d.Key) {
			t.Fatalf("seed %d: deletes %s outside the cleaned directories", seed, d.Key)
		}
		if strings.HasSuffix(d.Key, ".manifest") {
			t.Fatalf("seed %d: manifest %s in the file list", seed, d.Key)
		}
		if h.pending[d.Key] {
			if everReferenced[d.Key] {
				t.Fatalf("seed %d: pending output %s deleted although a manifest references it", seed, d.Key)
			}
			continue // dead task outputs go at once
		}
		if mtime[d.Key].After(plan.EarliestRetained) {
			t.Fatalf("seed %d: deletes %s modified %v, after the earliest retained commit %v", seed, d.Key, mtime[d.Key], plan.EarliestRetained)
		}
		young := h.opts.UnverifiedAfter > 0 && h.now.Sub(mtime[d.Key]) < h.opts.UnverifiedAfter
		if young && !everReferenced[d.Key] {
			t.Fatalf("seed %d: deletes never-referenced %s of age %v, inside the %v window", seed, d.Key, h.now.Sub(mtime[d.Key]), h.opts.UnverifiedAfter)
		}
	}
	for _, m := range plan.Manifests {
		for _, v := range plan.Versions {
			if v.Key == m.Key && v.Keep {
				t.Fatalf("seed %d: deletes manifest of kept version %d", seed, v.Version)
			}
		}
	}
	// Completeness: a removed version's file that no kept version needs and
	// that is old enough is deleted (the plan does not silently leak).
	deleted := map[string]bool{}
	for _, d := range plan.Files {
		deleted[d.Key] = true
	}
	for _, f := range h.listing {
		if !format.InTableDirs(f.Key) || strings.HasSuffix(f.Key, ".manifest") {
			continue
		}
		if _, needed := keptRefs[f.Key]; needed || f.ModTime.After(plan.EarliestRetained) {
			continue
		}
		if everReferenced[f.Key] && !deleted[f.Key] {
			t.Fatalf("seed %d: %s is referenced only by removed versions and old enough, but kept", seed, f.Key)
		}
	}
}

func TestStagingTarget(t *testing.T) {
	got, ok := stagingTarget("data/.abc.lance.896dcd3bd27258c5" + tempSuffix)
	if !ok || got != "data/abc.lance" {
		t.Fatalf("got %q %v", got, ok)
	}
	if _, ok := stagingTarget("data/abc.lance"); ok {
		t.Fatal("a data file is not a staging file")
	}
}
