package plan

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// colSet is a set of top-level column (field) ids.
type colSet map[int32]bool

func (a colSet) disjoint(b colSet) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for c := range a {
		if b[c] {
			return false
		}
	}
	return true
}

func (a colSet) subsetOf(b colSet) bool {
	for c := range a {
		if !b[c] {
			return false
		}
	}
	return true
}

func (a colSet) equal(b colSet) bool { return len(a) == len(b) && a.subsetOf(b) }

func (a colSet) sorted() []int32 { return sortedIDs(a) }

// fileVersion classifies a data file's format version the way Lance's
// DataFile::file_version does: 0.1/0.2 are legacy (V1), 0.3 and 2.x are V2.
func fileVersion(f *tablepb.DataFile) (legacy, known bool) {
	switch maj, min := f.GetFileMajorVersion(), f.GetFileMinorVersion(); {
	case maj == 0 && min <= 2:
		return true, true
	case maj == 0 && min == 3, maj == 2 && min <= 2:
		return false, true
	}
	return false, false
}

// liveFileCount is the number of the fragment's data files holding a field
// of the schema (the live file count of
// format.LayoutStats, the per-fragment column-layout statistics): files left
// with only dropped or tombstoned fields do not count, a V2.0 file holding
// only a struct header does.
func liveFileCount(s *schema, frag *tablepb.DataFragment) int {
	n := 0
	for _, f := range frag.GetFiles() {
		for _, id := range f.GetFields() {
			if s.ids[id] {
				n++
				break
			}
		}
	}
	return n
}

// fragLayout is one fragment's files as the repack planner sees them.
type fragLayout struct {
	s        *schema
	frag     *tablepb.DataFragment
	live     []*tablepb.DataFile // files holding a schema field
	coverage []map[int32]bool    // per live file: listed ids >= 0 plus their schema ancestors
	columns  []colSet            // per live file: top-level columns it holds data for (by leaves)
}

func newFragLayout(s *schema, frag *tablepb.DataFragment) *fragLayout {
	l := &fragLayout{s: s, frag: frag}
	for _, f := range frag.GetFiles() {
		inSchema := false
		for _, id := range f.GetFields() {
			if s.ids[id] {
				inSchema = true
				break
			}
		}
		if !inSchema {
			continue
		}
		cov := map[int32]bool{}
		for _, id := range f.GetFields() {
			if id >= 0 {
				cov[id] = true
				s.ancestors(id, cov)
			}
		}
		cols := colSet{}
		for _, t := range s.top {
			for leaf := range s.leaves[t] {
				if cov[leaf] {
					cols[t] = true
					break
				}
			}
		}
		l.live = append(l.live, f)
		l.coverage = append(l.coverage, cov)
		l.columns = append(l.columns, cols)
	}
	return l
}

func holdsLineage(f *tablepb.DataFile) bool {
	for _, id := range f.GetFields() {
		if isLineageID(id) {
			return true
		}
	}
	return false
}

// planFragmentRepack decides which new files a repack of one fragment
// writes, each as the top-level column ids it holds, or nil with the reason
// none is due. groups are column groups as top-level ids (nil: none set);
// maxFiles 0 means no file limit.
func planFragmentRepack(s *schema, frag *tablepb.DataFragment, groups [][]int32, maxFiles uint64) ([][]int32, string) {
	files, why, _ := planFragmentRepackC(s, frag, -1, groups, maxFiles)
	return files, why
}

// planFragmentRepackC is planFragmentRepack that also says whether the
// answer depends only on the fragment's layout signature (not on paths).
// liveN is the fragment's live file count from layout stats, or -1 to
// count here.
func planFragmentRepackC(s *schema, frag *tablepb.DataFragment, liveN int, groups [][]int32, maxFiles uint64) ([][]int32, string, bool) {
	if liveN < 0 {
		liveN = liveFileCount(s, frag)
	}
	over := maxFiles > 0 && uint64(liveN) > maxFiles
	if groups == nil && !over {
		if maxFiles == 0 {
			return nil, "no repack trigger set (max_data_files_per_fragment, column_groups)", true
		}
		return nil, strconv.Itoa(liveN) + " live data files, within max_data_files_per_fragment " + strconv.FormatUint(maxFiles, 10), true
	}
	if why := repackableFiles(frag); why != "" {
		return nil, why, false
	}
	l := newFragLayout(s, frag)
	present, movable := l.presentColumns()
	candidates := l.mergeCandidates(movable)
	var wanted []colSet
	if groups != nil {
		wanted = l.wantedGroups(groups, candidates, over)
	} else if merged := l.wantedMerge(candidates, maxFiles); len(merged) > 1 {
		wanted = []colSet{l.columnsOf(merged)}
	}
	out, moved := l.groupsToMove(wanted, present, movable)
	if len(out) == 0 {
		if over {
			return nil, fmt.Sprintf("%d live data files, over max_data_files_per_fragment %d, but no merge empties two or more files (blob, lineage or partially present columns stay)", liveN, maxFiles), true
		}
		return nil, "column groups already in place or cannot move", true
	}
	for i, f := range l.live {
		if holdsLineage(f) && len(l.columns[i]) > 0 && l.columns[i].subsetOf(moved) {
			return nil, fmt.Sprintf("a repack would leave %s holding only the spilled row lineage", f.GetPath()), false
		}
	}
	return out, "", true
}

// repackableFiles says why a repack may not touch the fragment's files
// ("" when it may): a legacy file's fields cannot be tombstoned one by one,
// and a file of an unknown format version is not read.
func repackableFiles(frag *tablepb.DataFragment) string {
	for _, f := range frag.GetFiles() {
		legacy, known := fileVersion(f)
		if legacy {
			return fmt.Sprintf("legacy (v1) data file %s: its fields cannot be tombstoned one by one", f.GetPath())
		}
		if !known {
			return fmt.Sprintf("data file %s has unknown format version %d.%d", f.GetPath(), f.GetFileMajorVersion(), f.GetFileMinorVersion())
		}
	}
	return ""
}

// presentColumns is the top-level columns with any leaf in a live file, and
// of those the movable ones: every leaf present and no blob.
func (l *fragLayout) presentColumns() (present, movable colSet) {
	covered := map[int32]bool{}
	for _, cov := range l.coverage {
		for id := range cov {
			covered[id] = true
		}
	}
	present, movable = colSet{}, colSet{}
	for _, t := range l.s.top {
		any, all := false, true
		for leaf := range l.s.leaves[t] {
			if covered[leaf] {
				any = true
			} else {
				all = false
			}
		}
		if any {
			present[t] = true
			if all && !l.s.holdsBlob(t) {
				movable[t] = true
			}
		}
	}
	return present, movable
}

// mergeCandidates is the live files a merge may take: holding columns, all
// movable, none shared with a file that holds the row lineage.
func (l *fragLayout) mergeCandidates(movable colSet) []int {
	lineageCols := colSet{}
	for i, f := range l.live {
		if holdsLineage(f) {
			for c := range l.columns[i] {
				lineageCols[c] = true
			}
		}
	}
	var candidates []int
	for i, f := range l.live {
		cols := l.columns[i]
		if len(cols) == 0 || holdsLineage(f) || !cols.disjoint(lineageCols) || !cols.subsetOf(movable) {
			continue
		}
		candidates = append(candidates, i)
	}
	return candidates
}

// wantedGroups is the configured column groups and, when the fragment is
// over its file limit, one merge of the candidates no group claims.
func (l *fragLayout) wantedGroups(groups [][]int32, candidates []int, over bool) []colSet {
	var wanted []colSet
	claimed := colSet{}
	for _, g := range groups {
		gs := colSet{}
		for _, c := range g {
			gs[c] = true
			claimed[c] = true
		}
		wanted = append(wanted, gs)
	}
	if over {
		var unclaimed []int
		for _, i := range candidates {
			if l.columns[i].disjoint(claimed) {
				unclaimed = append(unclaimed, i)
			}
		}
		if merged := l.emptied(unclaimed); len(merged) > 1 {
			wanted = append(wanted, l.columnsOf(merged))
		}
	}
	return wanted
}

// wantedMerge is the files merged to bring a fragment without column
// groups under its file limit: every candidate that a merge empties, or,
// when that would be every file holding a column and the limit is above 1,
// the merge chooseKept picks.
func (l *fragLayout) wantedMerge(candidates []int, maxFiles uint64) []int {
	all := l.emptied(candidates)
	holding := 0
	for _, cols := range l.columns {
		if len(cols) > 0 {
			holding++
		}
	}
	if len(all) < 2 || len(all) < holding || maxFiles == 1 {
		return all
	}
	return chooseKept(l, all)
}

// groupsToMove is, of wanted, the groups (their present columns) that are
// movable and not already alone in one file, sorted, and every column they
// move.
func (l *fragLayout) groupsToMove(wanted []colSet, present, movable colSet) ([][]int32, colSet) {
	var out [][]int32
	moved := colSet{}
	for _, g := range wanted {
		group := colSet{}
		for c := range g {
			if present[c] {
				group[c] = true
			}
		}
		if len(group) == 0 || !group.subsetOf(movable) {
			continue
		}
		var holders []colSet
		for _, cols := range l.columns {
			if !cols.disjoint(group) {
				holders = append(holders, cols)
			}
		}
		if len(holders) == 1 && holders[0].equal(group) {
			continue // already in place
		}
		out = append(out, group.sorted())
		for c := range group {
			moved[c] = true
		}
	}
	return out, moved
}

// columnsOf is every column the files hold.
func (l *fragLayout) columnsOf(files []int) colSet {
	out := colSet{}
	for _, i := range files {
		for c := range l.columns[i] {
			out[c] = true
		}
	}
	return out
}

// emptied keeps, of files, those that moving all their columns together
// leaves with no schema field (a struct header in a file is taken out only
// by moving that struct), until nothing changes.
func (l *fragLayout) emptied(files []int) []int {
	for {
		moved := map[int32]bool{}
		for _, i := range files {
			for c := range l.columns[i] {
				for id := range l.s.subtree[c] {
					moved[id] = true
				}
			}
		}
		next := files[:0:0]
		for _, i := range files {
			ok := true
			for _, id := range l.live[i].GetFields() {
				if l.s.ids[id] && !moved[id] {
					ok = false
					break
				}
			}
			if ok {
				next = append(next, i)
			}
		}
		if len(next) == len(files) {
			return files
		}
		files = next
	}
}

// chooseKept picks the merge when every file holding a column could go and
// the limit is above 1: one file stays. Trying files largest first by
// recorded size (then by column count), for each kept file the candidate
// merges are the files sharing no column with it, and every other file as
// long as the kept file keeps a column. The first merge (of two or more
// files) that leaves the largest file in place wins, else the first merge;
// with none, every file merges, as under a limit of 1.
func chooseKept(l *fragLayout, all []int) []int {
	bySize := append([]int(nil), all...)
	sort.SliceStable(bySize, func(a, b int) bool {
		fa, fb := l.live[bySize[a]], l.live[bySize[b]]
		// Lance sorts by Reverse((Option<size>, column count)); an unknown
		// size (0) is None and sorts below every known size.
		ka, kb := fa.GetFileSizeBytes() > 0, fb.GetFileSizeBytes() > 0
		if ka != kb {
			return ka
		}
		if fa.GetFileSizeBytes() != fb.GetFileSizeBytes() {
			return fa.GetFileSizeBytes() > fb.GetFileSizeBytes()
		}
		return len(l.columns[bySize[a]]) > len(l.columns[bySize[b]])
	})
	largest := bySize[0]
	var first []int
	for _, kept := range bySize {
		var disjoint, others []int
		for _, i := range all {
			if l.columns[i].disjoint(l.columns[kept]) {
				disjoint = append(disjoint, i)
			}
			if i != kept {
				others = append(others, i)
			}
		}
		untouched := l.emptied(disjoint)
		rest := l.emptied(others)
		options := [][]int{untouched}
		if !l.columns[kept].subsetOf(l.columnsOf(rest)) {
			options = append(options, rest)
		}
		for _, m := range options {
			if len(m) < 2 {
				continue
			}
			if !contains(m, largest) {
				return m
			}
			if first == nil {
				first = m
			}
		}
	}
	if first != nil {
		return first
	}
	return all
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// layoutKey is a fragment's layout signature for memoising repack plans:
// per file its format version, field ids, and the rank of its recorded size
// (the planner only compares sizes).
func layoutKey(frag *tablepb.DataFragment, buf []byte) []byte {
	files := frag.GetFiles()
	for i, f := range files {
		buf = strconv.AppendUint(buf, uint64(f.GetFileMajorVersion()), 10)
		buf = append(buf, '.')
		buf = strconv.AppendUint(buf, uint64(f.GetFileMinorVersion()), 10)
		buf = append(buf, ':')
		for _, id := range f.GetFields() {
			buf = strconv.AppendInt(buf, int64(id), 10)
			buf = append(buf, ',')
		}
		rank := 0
		for j, g := range files {
			if g.GetFileSizeBytes() > f.GetFileSizeBytes() || (g.GetFileSizeBytes() == f.GetFileSizeBytes() && j < i) {
				rank++
			}
		}
		buf = append(buf, '#')
		buf = strconv.AppendInt(buf, int64(rank), 10)
		if f.GetFileSizeBytes() == 0 {
			buf = append(buf, '?')
		}
		buf = append(buf, '|')
	}
	return buf
}
