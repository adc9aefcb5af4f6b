package main

import (
	"fmt"
	"log"
	"strings"
)

// catchUpBench times index catch-up of about 10% new rows: the indexed
// table FxR after real Lance's optimize() (every row indexed, compacted),
// with F/10 appends of R rows added by real Lance, then Lance's optimize()
// and `lanced compact` (default policy: rewrite the new fragments, then
// catch the indices up) on fresh copies. vectorOnly drops the BTree and FTS
// indices first, so both sides do the same index work (lanced catches up
// vector indices only; without it Lance also indexes the new rows in the
// BTree and FTS, lanced leaves them unindexed). Both copies are checked with
// real Lance: rows, indexStats per index, queries through the indices and
// the vector recall.
func catchUpBench(spec string, vectorOnly bool, work, cache, oracleDir, root, bin string, reps int) map[string]any {
	var frags, rows int
	if _, err := fmt.Sscanf(spec, "%dx%d", &frags, &rows); err != nil || frags < 10 || rows < 1 {
		log.Fatalf("-catchup %q: want FRAGSxROWS with at least 10 fragments, e.g. 100x10000", spec)
	}
	base := buildIndexed(spec, work, cache, oracleDir)
	name, mode := "catchup-"+spec, ""
	if vectorOnly {
		name, mode = name+"-vector", "vector-only"
	}
	appends := frags / 10
	tbl := cachedTable(name, work, cache, func(table string) {
		copyTree(base, table)
		measure(oracleDir, "node", "../bench/gencatchup.mjs", table, fmt.Sprint(appends), fmt.Sprint(rows), mode)
	})
	before := verifyIndexed(oracleDir, tbl)
	l, o, lanceCheck, oursCheck := optimizeVsCompact(tbl, "cu-"+name, work, oracleDir, root, bin, reps)
	var problems []string
	if lanceCheck.Rows != before.Rows || oursCheck.Rows != before.Rows {
		problems = append(problems, fmt.Sprintf("rows: before %d, Lance %d, lanced %d", before.Rows, lanceCheck.Rows, oursCheck.Rows))
	}
	var added int64
	for name, b := range before.Indices {
		added = max(added, b.Unindexed)
		lx, ok := lanceCheck.Indices[name]
		if !ok || lx.Unindexed != 0 {
			problems = append(problems, fmt.Sprintf("Lance's optimize left %s %+v", name, lx))
		}
		ox, ok := oursCheck.Indices[name]
		switch {
		case !ok:
			problems = append(problems, "lanced lost index "+name)
		case ox.Type == lx.Type && strings.Contains(strings.ToLower(ox.Type), "ivf") && ox.Unindexed != 0:
			problems = append(problems, fmt.Sprintf("lanced left %d rows of %s unindexed", ox.Unindexed, name))
		}
	}
	if !oursCheck.Vector.ViaIndex || !lanceCheck.Vector.ViaIndex {
		problems = append(problems, fmt.Sprintf("vector search through the index: Lance %v, lanced %v", lanceCheck.Vector.ViaIndex, oursCheck.Vector.ViaIndex))
	}
	if oursCheck.Vector.Recall < lanceCheck.Vector.Recall {
		problems = append(problems, fmt.Sprintf("recall@10 lanced %.1f < Lance %.1f", oursCheck.Vector.Recall, lanceCheck.Vector.Recall))
	}
	return indexedResult(fmt.Sprintf("%s, %d rows (%d new, unindexed), %.1f MiB", name, before.Rows, added, float64(dirBytes(tbl))/(1<<20)), l, o, before, lanceCheck, oursCheck, problems)
}
