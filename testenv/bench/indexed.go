package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// indexedCheck is what verifyindexed.mjs reports about one table: per index
// real Lance's indexStats, and per query its rows and whether the plan went
// through the index.
type indexedCheck struct {
	Rows    int64 `json:"rows"`
	Indices map[string]struct {
		Type      string `json:"type"`
		Indexed   int64  `json:"indexed"`
		Unindexed int64  `json:"unindexed"`
		Segments  int    `json:"segments"`
	} `json:"indices"`
	BTreeEq    indexedQuery `json:"btree_eq"`
	BTreeRange indexedQuery `json:"btree_range"`
	FTS        indexedQuery `json:"fts"`
	Vector     indexedQuery `json:"vector"`
}

type indexedQuery struct {
	Rows     int     `json:"rows"`
	IDs      []int64 `json:"ids_digest"`
	ViaIndex bool    `json:"via_index"`
	Recall   float64 `json:"recall_at_10_vs_exact"`
}

// buildIndexed builds the indexed table FxR (F fragments of R rows) with
// genindexed.mjs, or reuses the one in cache.
func buildIndexed(spec, work, cache, oracleDir string) string {
	var frags, rows int
	if _, err := fmt.Sscanf(spec, "%dx%d", &frags, &rows); err != nil || frags < 1 || rows < 1 {
		log.Fatalf("-indexed %q: want FRAGSxROWS, e.g. 100x10000", spec)
	}
	return cachedTable("indexed-"+spec, work, cache, func(table string) {
		log.Printf("building indexed table indexed-%s (real Lance: appends, BTree, IVF_PQ, FTS, 10%% deleted, one append)", spec)
		measure(oracleDir, "node", "../bench/genindexed.mjs", table, fmt.Sprint(frags), fmt.Sprint(rows))
	})
}

func verifyIndexed(oracleDir, table string) indexedCheck {
	r := measure(oracleDir, "node", "../bench/verifyindexed.mjs", table)
	var c indexedCheck
	if err := json.Unmarshal(r.out, &c); err != nil {
		log.Fatalf("verifyindexed %s: %v\n%s", table, err, r.out)
	}
	return c
}

// indexedRewrite times Lance's optimize() and `lanced compact --scope
// rewrite` (which remaps every index) on fresh copies of one indexed table,
// then checks both copies with real Lance: the same rows, every index
// present with the same indexed rows of the compacted data, and the
// filter, FTS and vector queries planned through the indices.
func indexedRewrite(spec, work, cache, oracleDir, root, bin string, reps int) map[string]any {
	sb := buildIndexed(spec, work, cache, oracleDir)
	before := verifyIndexed(oracleDir, sb)
	l, o, lanceCheck, oursCheck := optimizeVsCompact(sb, "ix-"+spec, work, oracleDir, root, bin, reps, "--scope", "rewrite")
	var problems []string
	if lanceCheck.Rows != oursCheck.Rows || oursCheck.Rows != before.Rows {
		problems = append(problems, fmt.Sprintf("rows: before %d, Lance %d, lanced %d", before.Rows, lanceCheck.Rows, oursCheck.Rows))
	}
	for name, b := range before.Indices {
		ours, ok := oursCheck.Indices[name]
		if !ok {
			problems = append(problems, "lanced lost index "+name)
			continue
		}
		// lanced remaps: the rows indexed before stay indexed, the appended ones
		// stay unindexed. Lance's optimize() also indexes the appended rows.
		if ours.Indexed != b.Indexed || ours.Unindexed != b.Unindexed {
			problems = append(problems, fmt.Sprintf("%s: before %d/%d indexed/unindexed, lanced %d/%d", name, b.Indexed, b.Unindexed, ours.Indexed, ours.Unindexed))
		}
		if _, ok := lanceCheck.Indices[name]; !ok {
			problems = append(problems, "Lance lost index "+name)
		}
	}
	for _, q := range []struct {
		name      string
		l, o, was indexedQuery
	}{
		{"btree_eq", lanceCheck.BTreeEq, oursCheck.BTreeEq, before.BTreeEq},
		{"btree_range", lanceCheck.BTreeRange, oursCheck.BTreeRange, before.BTreeRange},
		{"fts", lanceCheck.FTS, oursCheck.FTS, before.FTS},
		{"vector", lanceCheck.Vector, oursCheck.Vector, before.Vector},
	} {
		if !q.o.ViaIndex || !q.l.ViaIndex {
			problems = append(problems, fmt.Sprintf("%s: through the index: Lance %v, lanced %v", q.name, q.l.ViaIndex, q.o.ViaIndex))
		}
		if q.name == "vector" {
			continue // PQ distances tie; ids break ties by storage order
		}
		if q.o.Rows != q.was.Rows || q.l.Rows != q.was.Rows || !reflect.DeepEqual(q.o.IDs, q.l.IDs) {
			problems = append(problems, fmt.Sprintf("%s: rows before %d, Lance %d, lanced %d", q.name, q.was.Rows, q.l.Rows, q.o.Rows))
		}
	}
	return indexedResult(fmt.Sprintf("%s, %d rows, %.1f MiB", "indexed-"+spec, before.Rows, float64(dirBytes(sb))/(1<<20)), l, o, before, lanceCheck, oursCheck, problems)
}

// indexedResult is the JSON result of an indexed benchmark: Lance's
// optimize() (l) and lanced compact (o) timed on copies of one table, the
// real-Lance checks before and on both copies, and the problems found.
func indexedResult(table string, l, o run, before, lanceCheck, oursCheck indexedCheck, problems []string) map[string]any {
	return map[string]any{
		"table":                      table,
		"lance_optimize_seconds":     l.wall.Seconds(),
		"lance_optimize_cpu_seconds": l.cpu.Seconds(),
		"lance_optimize_rss_mib":     float64(l.rssKB) / 1024,
		"lanced_compact_seconds":     o.wall.Seconds(),
		"lanced_compact_cpu_seconds": o.cpu.Seconds(),
		"lanced_compact_rss_mib":     float64(o.rssKB) / 1024,
		"time_ratio":                 o.wall.Seconds() / l.wall.Seconds(),
		"cpu_ratio":                  o.cpu.Seconds() / l.cpu.Seconds(),
		"rss_ratio":                  float64(o.rssKB) / float64(l.rssKB),
		"indices_before":             before.Indices,
		"indices_lance":              lanceCheck.Indices,
		"indices_lanced":             oursCheck.Indices,
		"vector_recall_at_10":        fmt.Sprintf("before %.1f, Lance %.1f, lanced %.1f", before.Vector.Recall, lanceCheck.Vector.Recall, oursCheck.Vector.Recall),
		"checks":                     strings.Join(problems, "; "),
		"checks_ok":                  len(problems) == 0,
	}
}

// optimizeVsCompact times real Lance's optimize() and `lanced compact
// [compactArgs]` on fresh copies of tbl (best of reps each, the copies
// named after name and removed afterwards) and checks each copy with real
// Lance before it is removed.
func optimizeVsCompact(tbl, name, work, oracleDir, root, bin string, reps int, compactArgs ...string) (l, o run, lanceCheck, oursCheck indexedCheck) {
	l = best(reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("%s-lance%d", name, i), "t.lance")
		copyTree(tbl, c)
		defer os.RemoveAll(filepath.Dir(c))
		r := measure(oracleDir, "node", "../bench/optimize.mjs", c)
		lanceCheck = verifyIndexed(oracleDir, c)
		return r
	})
	o = best(reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("%s-ours%d", name, i), "t.lance")
		copyTree(tbl, c)
		defer os.RemoveAll(filepath.Dir(c))
		args := append(append([]string{"compact"}, compactArgs...), "--json", "file://"+c)
		r := measure(root, bin, args...)
		oursCheck = verifyIndexed(oracleDir, c)
		return r
	})
	return l, o, lanceCheck, oursCheck
}
