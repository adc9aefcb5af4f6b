// Command bench compares lanced with real Lance on the same tables in the
// same run, on this machine:
//
//   - rewrite: `lanced compact --scope rewrite` against LanceDB's own
//     optimize() on two copies of one table of many small fragments (wall
//     time and peak RSS of each process);
//   - repack: `lanced compact --scope repack` on a table of backfilled
//     fragments against `cp` of the bytes the repack moves.
//
// Usage: go run ./testenv/bench [-frags 200] [-rows 5000] [-repack-frags 8] [-repack-rows 100000] [-backfills 3]
// [-sized sized-60x5000-v0-t40-d0,sized-60x5000-v128-t0-d0] (more rewrite
// tables, built by testenv/oracle/build.mjs: text-heavy, vectors, deletions)
// [-indexed 25x10000,100x10000] (indexed tables: BTree, IVF_PQ, FTS, 10%
// deleted, compacted by lanced (remap) and by Lance's optimize(), both then
// checked with real Lance) [-large] (the ~0.5 GB rewrite table and the ~0.4 GB text-heavy table, both
// with 10% of rows deleted; with -huge also the ~2 GB one) [-cache dir]
// (keep built tables there and reuse them) (needs `make oracle`). Results
// are printed as ratios; noisy machines make single runs noisy, so it
// repeats each measurement and keeps the best.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type run struct {
	out   []byte
	wall  time.Duration
	cpu   time.Duration // user + system: what the process itself spent, whatever else the machine runs
	rssKB int64
}

func measure(dir string, name string, args ...string) run {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		log.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return run{out: out, wall: wall, cpu: cpu, rssKB: ru.Maxrss}
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute load averages: how busy
// the machine was (other processes skew wall times, not CPU times).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func copyTree(src, dst string) {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		log.Fatal(err)
	}
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func best(n int, f func(i int) run) run {
	var b run
	for i := 0; i < n; i++ {
		r := f(i)
		if i == 0 || r.wall < b.wall {
			b.wall = r.wall
		}
		if i == 0 || r.cpu < b.cpu {
			b.cpu = r.cpu
		}
		if i == 0 || r.rssKB < b.rssKB {
			b.rssKB = r.rssKB
		}
	}
	return b
}

func main() {
	frags := flag.Int("frags", 200, "fragments in the rewrite table")
	rows := flag.Int("rows", 5000, "rows per fragment in the rewrite table")
	rfrags := flag.Int("repack-frags", 8, "fragments in the repack table")
	rrows := flag.Int("repack-rows", 100000, "rows per fragment in the repack table")
	backfills := flag.Int("backfills", 3, "add_columns backfills in the repack table")
	reps := flag.Int("reps", 3, "repetitions (best is kept)")
	sized := flag.String("sized", "", "comma-separated oracle Sized scenarios to rewrite as well (e.g. sized-60x5000-v0-t40-d0)")
	large := flag.Bool("large", false, "add the large rewrite tables: "+strings.Join(largeTables, ", "))
	huge := flag.Bool("huge", false, "with -large, also "+hugeTable)
	cache := flag.String("cache", "", "directory where built sized tables are kept and reused (e.g. ~/.cache/lanced-bench)")
	skipBase := flag.Bool("sized-only", false, "skip the gen.mjs rewrite table and the repack table")
	indexed := flag.String("indexed", "", "comma-separated FRAGSxROWS indexed tables (BTree, IVF_PQ on 128-d, FTS, 10% deleted) to compact with lanced and with Lance's optimize() (e.g. 25x10000,100x10000)")
	flag.Parse()
	names := strings.Split(*sized, ",")
	if *large {
		names = append(names, largeTables...)
		if *huge {
			names = append(names, hugeTable)
		}
	}

	loadStart := loadAvg()
	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	oracleDir := filepath.Join(root, "testenv", "oracle")
	if _, err := os.Stat(filepath.Join(oracleDir, "node_modules")); err != nil {
		log.Fatal("run `make oracle` first")
	}
	work, err := os.MkdirTemp("", "lanced-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "lanced")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/lanced").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	pol := filepath.Join(work, "policies")
	_ = os.MkdirAll(pol, 0o755)
	_ = os.WriteFile(filepath.Join(pol, "bench.hcl"), []byte("defaults {\n  repack {\n    max_data_files_per_fragment = 1\n  }\n}\n"), 0o644)

	// More rewrite tables: the oracle's Sized scenarios.
	var extra []map[string]any
	for _, name := range names {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		extra = append(extra, sizedRewrite(name, work, *cache, oracleDir, root, bin, *reps))
	}
	var ix []map[string]any
	for _, spec := range strings.Split(*indexed, ",") {
		if spec = strings.TrimSpace(spec); spec != "" {
			ix = append(ix, indexedRewrite(spec, work, *cache, oracleDir, root, bin, *reps))
		}
	}
	if *skipBase {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{
			"load_average_start": loadStart,
			"load_average_end":   loadAvg(),
			"machine":            fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
			"sized_rewrites":     extra,
			"indexed_rewrites":   ix,
		})
		return
	}

	// Rewrite: many small fragments.
	base := filepath.Join(work, "rw", "t.lance")
	log.Printf("building rewrite table: %d fragments x %d rows", *frags, *rows)
	measure(oracleDir, "node", "../bench/gen.mjs", base, fmt.Sprint(*frags), fmt.Sprint(*rows), "0")
	tableBytes := dirBytes(base)
	lance := best(*reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("lance%d", i), "t.lance")
		copyTree(base, c)
		return measure(oracleDir, "node", "../bench/optimize.mjs", c)
	})
	ours := best(*reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("ours%d", i), "t.lance")
		copyTree(base, c)
		return measure(root, bin, "compact", "--scope", "rewrite", "--json", "file://"+c)
	})

	// Repack: backfilled fragments, against cp of the moved bytes.
	rbase := filepath.Join(work, "rp", "t.lance")
	log.Printf("building repack table: %d fragments x %d rows, %d backfills", *rfrags, *rrows, *backfills)
	measure(oracleDir, "node", "../bench/gen.mjs", rbase, fmt.Sprint(*rfrags), fmt.Sprint(*rrows), fmt.Sprint(*backfills))
	moved := dirBytes(filepath.Join(rbase, "data"))
	cp := best(*reps, func(i int) run {
		dst := filepath.Join(work, fmt.Sprintf("cp%d", i))
		return measure(root, "cp", "-r", filepath.Join(rbase, "data"), dst)
	})
	// lanced makes every data file durable (fsync) before it commits; the
	// durable physical limit is a copy that fsyncs each file.
	cpSync := best(*reps, func(i int) run {
		dst := filepath.Join(work, fmt.Sprintf("cps%d", i))
		return measure(root, "sh", "-c", fmt.Sprintf("cp -r %q %q && for f in %q/*; do dd if=/dev/null of=\"$f\" conv=notrunc,fsync status=none; done", filepath.Join(rbase, "data"), dst, dst))
	})
	repack := best(*reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("rp%d", i), "t.lance")
		copyTree(rbase, c)
		return measure(root, bin, "compact", "--scope", "repack", "--policy", pol, "--json", "file://"+c)
	})

	res := map[string]any{
		"load_average_start":            loadStart,
		"load_average_end":              loadAvg(),
		"sized_rewrites":                extra,
		"indexed_rewrites":              ix,
		"machine":                       fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
		"rewrite_table":                 fmt.Sprintf("%d fragments x %d rows, %.1f MiB", *frags, *rows, float64(tableBytes)/(1<<20)),
		"lance_optimize_seconds":        lance.wall.Seconds(),
		"lance_optimize_cpu_seconds":    lance.cpu.Seconds(),
		"lanced_rewrite_cpu_seconds":    ours.cpu.Seconds(),
		"rewrite_cpu_ratio":             ours.cpu.Seconds() / lance.cpu.Seconds(),
		"cp_fsync_seconds":              cpSync.wall.Seconds(),
		"repack_vs_cp_fsync_time_ratio": repack.wall.Seconds() / cpSync.wall.Seconds(),
		"lanced_repack_cpu_seconds":     repack.cpu.Seconds(),
		"lance_optimize_rss_mib":        float64(lance.rssKB) / 1024,
		"lanced_rewrite_seconds":        ours.wall.Seconds(),
		"lanced_rewrite_rss_mib":        float64(ours.rssKB) / 1024,
		"rewrite_time_ratio":            ours.wall.Seconds() / lance.wall.Seconds(),
		"rewrite_rss_ratio":             float64(ours.rssKB) / float64(lance.rssKB),
		"repack_table":                  fmt.Sprintf("%d fragments x %d rows, %d backfills, %.1f MiB moved", *rfrags, *rrows, *backfills, float64(moved)/(1<<20)),
		"cp_seconds":                    cp.wall.Seconds(),
		"lanced_repack_seconds":         repack.wall.Seconds(),
		"repack_vs_cp_time_ratio":       repack.wall.Seconds() / cp.wall.Seconds(),
		"lanced_repack_rss_mib":         float64(repack.rssKB) / 1024,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res)
}

// The issue-sized rewrite tables (oracle Sized scenarios, 10% of rows
// deleted): 200 × 5000 rows with 128-d float32 vectors, a short text and
// float64 columns (~0.5 GB); 180 × 5000 rows of 40-120-word prose (~0.4 GB,
// text-heavy); and 800 × 5000 rows like the first (~2 GB).
var (
	largeTables = []string{"sized-200x5000-v128-t5-d10", "sized-180x5000-v0-t80-d10"}
	hugeTable   = "sized-800x5000-v128-t5-d10"
)

// buildSized builds a Sized table with real Lance, or reuses the one in
// cache (a directory per scenario, complete once its .done marker exists).
func buildSized(name, work, cache, oracleDir string) string {
	dir := filepath.Join(work, name)
	if cache != "" {
		dir = filepath.Join(cache, name)
		if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
			log.Printf("reusing %s from %s", name, dir)
			return filepath.Join(dir, "t.lance")
		}
		_ = os.RemoveAll(dir)
	}
	log.Printf("building rewrite table %s", name)
	measure(oracleDir, "node", "build.mjs", name, filepath.Join(dir, "t.lance"))
	if cache != "" {
		if err := os.WriteFile(filepath.Join(dir, ".done"), nil, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	return filepath.Join(dir, "t.lance")
}

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
	var cpSync run
	o := best(reps, func(i int) run {
		c := filepath.Join(work, fmt.Sprintf("%s-ours%d", name, i), "t.lance")
		copyTree(sb, c)
		defer os.RemoveAll(filepath.Dir(c))
		r := measure(root, bin, "compact", "--scope", "rewrite", "--json", "file://"+c)
		_ = json.Unmarshal(r.out, &sum)
		files, n := newDataFiles(sb, c)
		oursOut = n
		// the durable physical limit: cp of the same bytes, each file fsynced
		dst := filepath.Join(work, fmt.Sprintf("%s-cp%d", name, i))
		_ = os.MkdirAll(dst, 0o755)
		script := "for f in \"$@\"; do cp \"$f\" " + dst + "/ && dd if=/dev/null of=" + dst + "/$(basename \"$f\") conv=notrunc,fsync status=none; done"
		c2 := measure(root, "sh", append([]string{"-c", script, "sh"}, files...)...)
		if i == 0 || c2.wall < cpSync.wall {
			cpSync = c2
		}
		_ = os.RemoveAll(dst)
		return r
	})
	return map[string]any{
		"table":                      fmt.Sprintf("%s, %.1f MiB", name, float64(dirBytes(sb))/(1<<20)),
		"lance_optimize_seconds":     l.wall.Seconds(),
		"lance_optimize_cpu_seconds": l.cpu.Seconds(),
		"lance_optimize_rss_mib":     float64(l.rssKB) / 1024,
		"lanced_rewrite_seconds":     o.wall.Seconds(),
		"lanced_rewrite_cpu_seconds": o.cpu.Seconds(),
		"lanced_rewrite_rss_mib":     float64(o.rssKB) / 1024,
		"cp_fsync_written_seconds":   cpSync.wall.Seconds(),
		"rewrite_time_ratio":         o.wall.Seconds() / l.wall.Seconds(),
		"rewrite_cpu_ratio":          o.cpu.Seconds() / l.cpu.Seconds(),
		"rewrite_rss_ratio":          float64(o.rssKB) / float64(l.rssKB),
		"rewrite_vs_cp_fsync_ratio":  o.wall.Seconds() / cpSync.wall.Seconds(),
		"output_bytes_ratio":         float64(oursOut) / float64(lanceOut),
		"lance_output_mib":           float64(lanceOut) / (1 << 20),
		"lanced_output_mib":          float64(oursOut) / (1 << 20),
		"files_page_copied":          sum.Copied,
		"files_reencoded":            sum.Reencoded,
		"pages":                      sum.Pages,
	}
}
