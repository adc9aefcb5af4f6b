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
// checked with real Lance) [-remap-parts 100x10000] (the indexed table's
// remap in one task per index and in parts, each task its own process)
// [-large] (the ~0.5 GB rewrite table and the ~0.4 GB text-heavy table, both
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
	"maps"
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

// copyTree copies src to dst and flushes the copy to disk (sync(2)), so
// the writeback of a fresh table copy is not charged to whichever
// process is measured on it next (the kernel starts writing dirty pages
// back 30 s after they were written, during that process's run or the cp
// measured after it).
func copyTree(src, dst string) {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		log.Fatal(err)
	}
	syscall.Sync()
}

// warmFreePages writes n bytes to a scratch file under dir and deletes
// it before anything reaches the disk, so the next process measured
// finds n bytes of memory the kernel has just freed. The page cache of a
// copy's output is allocated from free memory, and on this kind of
// machine (a VM that hands free memory back to its host, virtio-balloon
// free page reporting) memory freed seconds ago costs several times more
// to fill than memory freed just now: cp + fsync of the same 523 MiB took
// 0.20-0.25 s of CPU right after 523 MiB were freed and 0.45-1.9 s when
// 5 s had passed or the page cache had to grow, whichever process ran.
// Without this, whichever of two processes measured in turn ran later
// after the last deletion paid for it; with it both start alike.
func warmFreePages(dir string, n int64) {
	f, err := os.CreateTemp(dir, "warm-*")
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	for done := int64(0); done < n; done += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			log.Fatal(err)
		}
	}
	_ = os.Remove(f.Name())
	_ = f.Close()
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

// env is what every measurement of one run shares.
type env struct {
	root      string // the repository (lanced runs here)
	oracleDir string // testenv/oracle (node runs here)
	work      string // scratch directory, removed at the end
	cache     string // where built tables are kept, or ""
	bin       string // the lanced binary built for this run
	policies  string // a policy directory for the repack (one file per fragment)
	reps      int
}

// setup checks the oracle, makes the scratch directory and builds lanced.
func setup(cache string, reps int) env {
	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	e := env{root: root, oracleDir: filepath.Join(root, "testenv", "oracle"), cache: cache, reps: reps}
	if _, err := os.Stat(filepath.Join(e.oracleDir, "node_modules")); err != nil {
		log.Fatal("run `make oracle` first")
	}
	if e.work, err = os.MkdirTemp("", "lanced-bench-"); err != nil {
		log.Fatal(err)
	}
	e.bin = filepath.Join(e.work, "lanced")
	if out, err := exec.Command("go", "build", "-o", e.bin, "./cmd/lanced").CombinedOutput(); err != nil {
		os.RemoveAll(e.work)
		log.Fatalf("build: %v\n%s", err, out)
	}
	e.policies = filepath.Join(e.work, "policies")
	_ = os.MkdirAll(e.policies, 0o755)
	_ = os.WriteFile(filepath.Join(e.policies, "bench.hcl"), []byte("defaults {\n  repack {\n    max_data_files_per_fragment = 1\n  }\n}\n"), 0o644)
	return e
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == execTaskArg {
		execTaskMain(os.Args[2], os.Args[3]) // "" result: the baseline
		return
	}
	frags := flag.Int("frags", 200, "fragments in the rewrite table")
	rows := flag.Int("rows", 5000, "rows per fragment in the rewrite table")
	rfrags := flag.Int("repack-frags", 8, "fragments in the repack table")
	rrows := flag.Int("repack-rows", 100000, "rows per fragment in the repack table")
	backfills := flag.Int("backfills", 3, "add_columns backfills in the repack table")
	reps := flag.Int("reps", 3, "repetitions (best is kept)")
	sized := flag.String("sized", "", "comma-separated oracle Sized scenarios to rewrite as well (e.g. sized-60x5000-v0-t40-d0)")
	large := flag.Bool("large", false, "add the large rewrite tables: "+strings.Join(largeTables, ", "))
	huge := flag.Bool("huge", false, "with -large, also "+hugeTable)
	cache := flag.String("cache", "", "directory where built sized and indexed tables are kept and reused (e.g. ~/.cache/lanced-bench)")
	skipBase := flag.Bool("sized-only", false, "skip the gen.mjs rewrite table and the repack table")
	indexed := flag.String("indexed", "", "comma-separated FRAGSxROWS indexed tables (BTree, IVF_PQ on 128-d, FTS, 10% deleted) to compact with lanced and with Lance's optimize() (e.g. 25x10000,100x10000)")
	catchup := flag.String("catchup", "", "comma-separated FRAGSxROWS indexed tables, optimized by Lance, then FRAGS/10 appends of ROWS rows: index catch-up by lanced compact and by Lance's optimize() (e.g. 100x10000)")
	sliced := flag.Bool("sliced", false, "add row-slice figures: the rewrite of one 400,000-row fragment ("+slicedTable+") and the repack table, unsliced and in slices")
	slicedDaemons := flag.String("sliced-workers", "", "a one-fragment Sized table (e.g. "+slicedTable+"): its rewrite by one `lanced run` daemon, unsliced and in row slices with 1 and with 3 task workers")
	remapParts := flag.String("remap-parts", "", "comma-separated FRAGSxROWS indexed tables: the remap of every index in one task per index and in parts (about six of the IVF_PQ), each task its own process, and Lance's optimize() (e.g. 100x10000)")
	catchupVector := flag.Bool("catchup-vector-only", false, "with -catchup, drop the BTree and FTS indices first (lanced catches up vector indices only)")
	flag.Parse()
	names := strings.Split(*sized, ",")
	if *large {
		names = append(names, largeTables...)
		if *huge {
			names = append(names, hugeTable)
		}
	}

	res := map[string]any{
		"load_average_start": loadAvg(),
		"machine":            fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
	}
	e := setup(*cache, *reps)
	defer os.RemoveAll(e.work)
	var extra, ix []map[string]any
	for _, name := range names {
		if name = strings.TrimSpace(name); name != "" {
			extra = append(extra, sizedRewrite(name, e.work, e.cache, e.oracleDir, e.root, e.bin, e.reps))
		}
	}
	for _, spec := range strings.Split(*indexed, ",") {
		if spec = strings.TrimSpace(spec); spec != "" {
			ix = append(ix, indexedRewrite(spec, e.work, e.cache, e.oracleDir, e.root, e.bin, e.reps))
		}
	}
	var cu []map[string]any
	for _, spec := range strings.Split(*catchup, ",") {
		if spec = strings.TrimSpace(spec); spec != "" {
			cu = append(cu, catchUpBench(spec, *catchupVector, e.work, e.cache, e.oracleDir, e.root, e.bin, e.reps))
		}
	}
	res["sized_rewrites"], res["indexed_rewrites"], res["catchups"] = extra, ix, cu
	var rp []map[string]any
	for _, spec := range strings.Split(*remapParts, ",") {
		if spec = strings.TrimSpace(spec); spec != "" {
			rp = append(rp, remapPartsBench(spec, e))
		}
	}
	res["remap_parts"] = rp
	if *sliced {
		res["sliced_rewrite"] = slicedRewrite(e)
	}
	if *slicedDaemons != "" {
		res["sliced_workers"] = slicedWorkers(e, *slicedDaemons)
	}
	if !*skipBase {
		maps.Copy(res, e.baseRewrite(*frags, *rows))
		maps.Copy(res, e.repack(*rfrags, *rrows, *backfills, *sliced))
	}
	res["load_average_end"] = loadAvg()
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res)
}

// baseRewrite: Lance's optimize() and lanced's rewrite on copies of a
// gen.mjs table of frags appends of rows rows.
func (e env) baseRewrite(frags, rows int) map[string]any {
	base := filepath.Join(e.work, "rw", "t.lance")
	log.Printf("building rewrite table: %d fragments x %d rows", frags, rows)
	measure(e.oracleDir, "node", "../bench/gen.mjs", base, fmt.Sprint(frags), fmt.Sprint(rows), "0")
	lance := best(e.reps, func(i int) run {
		c := filepath.Join(e.work, fmt.Sprintf("lance%d", i), "t.lance")
		copyTree(base, c)
		return measure(e.oracleDir, "node", "../bench/optimize.mjs", c)
	})
	ours := best(e.reps, func(i int) run {
		c := filepath.Join(e.work, fmt.Sprintf("ours%d", i), "t.lance")
		copyTree(base, c)
		return measure(e.root, e.bin, "compact", "--scope", "rewrite", "--json", "file://"+c)
	})
	return map[string]any{
		"rewrite_table":              fmt.Sprintf("%d fragments x %d rows, %.1f MiB", frags, rows, float64(dirBytes(base))/(1<<20)),
		"lance_optimize_seconds":     lance.wall.Seconds(),
		"lance_optimize_cpu_seconds": lance.cpu.Seconds(),
		"lance_optimize_rss_mib":     float64(lance.rssKB) / 1024,
		"lanced_rewrite_seconds":     ours.wall.Seconds(),
		"lanced_rewrite_cpu_seconds": ours.cpu.Seconds(),
		"lanced_rewrite_rss_mib":     float64(ours.rssKB) / 1024,
		"rewrite_time_ratio":         ours.wall.Seconds() / lance.wall.Seconds(),
		"rewrite_cpu_ratio":          ours.cpu.Seconds() / lance.cpu.Seconds(),
		"rewrite_rss_ratio":          float64(ours.rssKB) / float64(lance.rssKB),
	}
}

// repackVsCp times lanced's repack of fresh copies of base against cp +
// fsync of the files each run wrote (vsCpFsync).
func (e env) repackVsCp(base string, written func(int64)) (run, run, []map[string]any) {
	return vsCpFsync(e.work, "rp", e.reps, base, dirBytes(base)+128<<20, func(c string) run {
		return measure(e.root, e.bin, "compact", "--scope", "repack", "--policy", e.policies, "--json", "file://"+c)
	}, written)
}

// repack: backfilled fragments repacked by lanced, against cp -r of the
// data directory (page cache only) and cp + fsync of the files lanced wrote
// (lanced makes every data file durable before it commits; the durable
// physical limit is a copy that fsyncs each file).
func (e env) repack(frags, rows, backfills int, sliced bool) map[string]any {
	rbase := filepath.Join(e.work, "rp", "t.lance")
	log.Printf("building repack table: %d fragments x %d rows, %d backfills", frags, rows, backfills)
	measure(e.oracleDir, "node", "../bench/gen.mjs", rbase, fmt.Sprint(frags), fmt.Sprint(rows), fmt.Sprint(backfills))
	data := filepath.Join(rbase, "data")
	cp := best(e.reps, func(i int) run {
		return measure(e.root, "cp", "-r", data, filepath.Join(e.work, fmt.Sprintf("cp%d", i)))
	})
	// lanced's repack and cp + fsync of the files it wrote, both right
	// after a scratch file as big as the table plus 128 MiB was freed (as
	// for the rewrite tables: warmFreePages)
	var written int64
	repack, cpSync, pairs := e.repackVsCp(rbase, func(n int64) { written = n })
	res := map[string]any{
		"repack_table":                  fmt.Sprintf("%d fragments x %d rows, %d backfills, %.1f MiB moved", frags, rows, backfills, float64(dirBytes(data))/(1<<20)),
		"cp_seconds":                    cp.wall.Seconds(),
		"cp_fsync_written_seconds":      cpSync.wall.Seconds(),
		"cp_fsync_written_cpu_seconds":  cpSync.cpu.Seconds(),
		"lanced_written_mib":            float64(written) / (1 << 20),
		"repack_runs":                   pairs,
		"lanced_repack_seconds":         repack.wall.Seconds(),
		"lanced_repack_cpu_seconds":     repack.cpu.Seconds(),
		"lanced_repack_rss_mib":         float64(repack.rssKB) / 1024,
		"repack_vs_cp_time_ratio":       repack.wall.Seconds() / cp.wall.Seconds(),
		"repack_vs_cp_fsync_time_ratio": repack.wall.Seconds() / cpSync.wall.Seconds(),
		"repack_vs_cp_fsync_cpu_ratio":  repack.cpu.Seconds() / cpSync.cpu.Seconds(),
	}
	if sliced {
		maps.Copy(res, slicedRepack(e, rbase, repack))
	}
	return res
}
