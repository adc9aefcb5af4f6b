package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
)

// The large rewrite tables (oracle Sized scenarios): 200 × 5000 rows
// with 128-d float32 vectors, a short text and float64 columns, 10% of rows
// deleted (~0.5 GB); 480 × 5000 rows of 40-120-word prose, 10% deleted
// (text-heavy, ~0.4 GB as Lance stores it); the first table without
// deletions (a clean rewrite: page copy, against cp + fsync); and 800 × 5000
// rows like the first (~2 GB).
var (
	largeTables = []string{"sized-200x5000-v128-t5-d10", "sized-480x5000-v0-t80-d10", "sized-200x5000-v128-t5-d0"}
	hugeTable   = "sized-800x5000-v128-t5-d10"
)

// newDataFiles lists the data files of table that are not in base.
func newDataFiles(base, table string) (files []string, bytes int64) {
	old := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(base, "data"))
	for _, e := range ents {
		old[e.Name()] = true
	}
	ents, _ = os.ReadDir(filepath.Join(table, "data"))
	for _, e := range ents {
		if old[e.Name()] {
			continue
		}
		if info, err := e.Info(); err == nil {
			files = append(files, filepath.Join(table, "data", e.Name()))
			bytes += info.Size()
		}
	}
	return files, bytes
}

// sizedRewrite times Lance's optimize() and lanced's rewrite on fresh
// copies of one Sized table, and cp + fsync of the files lanced wrote.
func sizedRewrite(name, work, cache, oracleDir, root, bin string, reps int) map[string]any {
	sb := buildSized(name, work, cache, oracleDir)
	var lanceOut, oursOut int64
	l := best(reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("%s-lance%d", name, i), "t.lance")
		copyTree(sb, c)
		defer os.RemoveAll(filepath.Dir(c))
		r := measure(oracleDir, "node", "../bench/optimize.mjs", c)
		_, lanceOut = newDataFiles(sb, c)
		return r
	})
	var sum struct {
		Copied    int             `json:"files_page_copied"`
		Reencoded int             `json:"files_reencoded"`
		Pages     json.RawMessage `json:"pages"`
	}
	// both processes start with as much just-freed memory as the table
	// plus 128 MiB (see warmFreePages)
	o, cpSync, pairs := vsCpFsync(work, name, reps, sb, dirBytes(sb)+128<<20, func(c string) run {
		r := measure(root, bin, "compact", "--scope", "rewrite", "--json", "file://"+c)
		_ = json.Unmarshal(r.out, &sum)
		return r
	}, func(n int64) { oursOut = n })
	return map[string]any{
		"table":                         fmt.Sprintf("%s, %.1f MiB", name, float64(dirBytes(sb))/(1<<20)),
		"lance_optimize_seconds":        l.wall.Seconds(),
		"lance_optimize_cpu_seconds":    l.cpu.Seconds(),
		"lance_optimize_rss_mib":        float64(l.rssKB) / 1024,
		"lanced_rewrite_seconds":        o.wall.Seconds(),
		"lanced_rewrite_cpu_seconds":    o.cpu.Seconds(),
		"lanced_rewrite_rss_mib":        float64(o.rssKB) / 1024,
		"cp_fsync_written_seconds":      cpSync.wall.Seconds(),
		"cp_fsync_written_cpu_seconds":  cpSync.cpu.Seconds(),
		"rewrite_vs_cp_fsync_cpu_ratio": o.cpu.Seconds() / cpSync.cpu.Seconds(),
		"runs":                          pairs,
		"rewrite_time_ratio":            o.wall.Seconds() / l.wall.Seconds(),
		"rewrite_cpu_ratio":             o.cpu.Seconds() / l.cpu.Seconds(),
		"rewrite_rss_ratio":             float64(o.rssKB) / float64(l.rssKB),
		"rewrite_vs_cp_fsync_ratio":     o.wall.Seconds() / cpSync.wall.Seconds(),
		"output_bytes_ratio":            float64(oursOut) / float64(lanceOut),
		"lance_output_mib":              float64(lanceOut) / (1 << 20),
		"lanced_output_mib":             float64(oursOut) / (1 << 20),
		"files_page_copied":             sum.Copied,
		"files_reencoded":               sum.Reencoded,
		"pages":                         sum.Pages,
	}
}

// vsCpFsync runs lanced (do, on a fresh synced copy of base) reps times,
// each run followed by cp + fsync of the data files it wrote (each file
// made durable, as lanced makes every data file durable before it
// commits), both right after warm bytes of scratch file were freed
// (warmFreePages), and by dd of the same files with O_DIRECT output and
// fsync (per pair only). It returns the best of each (wall and CPU taken
// separately) and every run's pair; written gets each run's bytes written.
func vsCpFsync(work, tag string, reps int, base string, warm int64, do func(table string) run, written func(int64)) (ours, cpSync run, pairs []map[string]any) {
	ours = best(reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("%s-ours%d", tag, i), "t.lance")
		copyTree(base, c)
		defer os.RemoveAll(filepath.Dir(c))
		warmFreePages(work, warm)
		r := do(c)
		files, n := newDataFiles(base, c)
		written(n)
		// the durable physical limit: cp of the same bytes, each file
		// fsynced; and the same bytes copied around the page cache, as
		// lanced writes them on a filesystem with direct I/O
		dst := filepath.Join(work, fmt.Sprintf("%s-cp%d", tag, i))
		warmFreePages(work, warm)
		c2 := copyEach(work, dst, cpFsyncScript, files)
		if i == 0 || c2.wall < cpSync.wall {
			cpSync.wall = c2.wall
		}
		if i == 0 || c2.cpu < cpSync.cpu {
			cpSync.cpu = c2.cpu
		}
		warmFreePages(work, warm)
		c3 := copyEach(work, dst, ddDirectScript, files)
		pairs = append(pairs, map[string]any{
			"load":                  loadAvg(),
			"lanced_seconds":        r.wall.Seconds(),
			"lanced_cpu_seconds":    r.cpu.Seconds(),
			"cp_fsync_seconds":      c2.wall.Seconds(),
			"cp_fsync_cpu_seconds":  c2.cpu.Seconds(),
			"ratio":                 r.wall.Seconds() / c2.wall.Seconds(),
			"dd_direct_seconds":     c3.wall.Seconds(),
			"dd_direct_cpu_seconds": c3.cpu.Seconds(),
			"ratio_vs_dd_direct":    r.wall.Seconds() / c3.wall.Seconds(),
		})
		return r
	})
	return ours, cpSync, pairs
}

// buildSized builds a Sized table with real Lance (testenv/oracle/build.mjs),
// or reuses the one in cache.
func buildSized(name, work, cache, oracleDir string) string {
	return cachedTable(name, work, cache, func(table string) {
		log.Printf("building rewrite table %s", name)
		measure(oracleDir, "node", "build.mjs", name, table)
	})
}
