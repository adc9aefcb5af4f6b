package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// slicedTable is one fragment of 400,000 rows (128-d vectors, a short text,
// 1/7 of the rows deleted): its rewrite is one task unless slice_bytes
// cuts it into row slices.
const slicedTable = "sized-1x400000-v128-t5-d7"

// writePolicy writes a policy directory holding body and returns it.
func writePolicy(dir, body string) string {
	_ = os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "bench.hcl"), []byte(body), 0o644); err != nil {
		panic(err)
	}
	return dir
}

// compactRun runs `lanced compact` on a fresh copy of base with the given
// scope and policy directory ("" for the defaults) and returns the
// measurement, the task count of its summary and the files it wrote.
func compactRun(e env, base, tag, scope, policies string) (run, int, []string, json.RawMessage) {
	c := filepath.Join(e.work, tag, "t.lance")
	copyTree(base, c)
	args := []string{"compact", "--scope", scope, "--json"}
	if policies != "" {
		args = append(args, "--policy", policies)
	}
	r := measure(e.root, e.bin, append(args, "file://"+c)...)
	var sum struct {
		Tasks int             `json:"tasks_committed"`
		Pages json.RawMessage `json:"pages"`
	}
	_ = json.Unmarshal(r.out, &sum)
	files, _ := newDataFiles(base, c)
	return r, sum.Tasks, files, sum.Pages
}

// The copies of the files lanced wrote that the bench takes as physical
// limits, run by sh with the destination directory as $1 and the files
// after it: cp, then fsync of each file (dd conv=fsync of nothing); and dd
// with O_DIRECT output (GNU dd writes a last partial block without it) and
// fsync of each file.
const (
	cpFsyncScript  = `d=$1; shift; for f in "$@"; do cp "$f" "$d"/ && dd if=/dev/null of="$d/$(basename "$f")" conv=notrunc,fsync status=none; done`
	ddDirectScript = `d=$1; shift; for f in "$@"; do dd if="$f" of="$d/$(basename "$f")" bs=4M oflag=direct conv=fsync status=none; done`
)

// copyEach times script copying files into the new directory dst, one
// after the other (each file made durable, as lanced makes every data file
// durable before it commits), and removes dst.
func copyEach(work, dst, script string, files []string) run {
	_ = os.MkdirAll(dst, 0o755)
	defer os.RemoveAll(dst)
	return measure(work, "sh", append([]string{"-c", script, "sh", dst}, files...)...)
}

// cpFsync times cp + fsync of files (copyEach).
func cpFsync(e env, tag string, files []string) run {
	return copyEach(e.work, filepath.Join(e.work, tag), cpFsyncScript, files)
}

// slicedRewrite: the rewrite of one 400,000-row fragment by `lanced
// compact` as one task and as row slices (slice_bytes 48 MiB: the slices
// and the join run one after the other in the one process), against cp +
// fsync of the bytes the sliced run wrote.
func slicedRewrite(e env) map[string]any {
	base := buildSized(slicedTable, e.work, e.cache, e.oracleDir)
	pol := writePolicy(filepath.Join(e.work, "pol-sliced-rw"), "defaults {\n  compaction { slice_bytes = \"48MiB\" }\n}\n")
	whole, wt, _, _ := compactRun(e, base, "slrw-whole", "rewrite", "")
	sliced, st, files, pages := compactRun(e, base, "slrw-sliced", "rewrite", pol)
	cs := cpFsync(e, "slrw-cp", files)
	return map[string]any{
		"table":                fmt.Sprintf("%s, %.1f MiB", slicedTable, float64(dirBytes(base))/(1<<20)),
		"unsliced_seconds":     whole.wall.Seconds(),
		"unsliced_cpu_seconds": whole.cpu.Seconds(),
		"unsliced_tasks":       wt,
		"sliced_seconds":       sliced.wall.Seconds(),
		"sliced_cpu_seconds":   sliced.cpu.Seconds(),
		"sliced_tasks":         st,
		"cp_fsync_seconds":     cs.wall.Seconds(),
		"sliced_vs_unsliced":   sliced.wall.Seconds() / whole.wall.Seconds(),
		"sliced_vs_cp_fsync":   sliced.wall.Seconds() / cs.wall.Seconds(),
		"unsliced_vs_cp_fsync": whole.wall.Seconds() / cs.wall.Seconds(),
		"sliced_rss_mib":       float64(sliced.rssKB) / 1024,
		"unsliced_rss_mib":     float64(whole.rssKB) / 1024,
		"sliced_pages":         pages,
	}
}

// slicedRepack: the repack table's repack with every fragment cut into
// row slices (slice_bytes 4 MiB), against the unsliced repack and cp +
// fsync of the bytes it wrote.
func slicedRepack(e env, rbase string, whole run) map[string]any {
	pol := writePolicy(filepath.Join(e.work, "pol-sliced-rp"), "defaults {\n  compaction { slice_bytes = \"4MiB\" }\n  repack { max_data_files_per_fragment = 1 }\n}\n")
	sliced, st, files, pages := compactRun(e, rbase, "slrp-sliced", "repack", pol)
	cs := cpFsync(e, "slrp-cp", files)
	return map[string]any{
		"repack_sliced_seconds":             sliced.wall.Seconds(),
		"repack_sliced_cpu_seconds":         sliced.cpu.Seconds(),
		"repack_sliced_tasks":               st,
		"repack_sliced_vs_unsliced":         sliced.wall.Seconds() / whole.wall.Seconds(),
		"repack_sliced_vs_cp_fsync_written": sliced.wall.Seconds() / cs.wall.Seconds(),
		"repack_sliced_pages":               pages,
	}
}

// daemonRun is one `lanced run` on a table: from the table appearing
// under the daemon's root to the commit of its sliced task's join.
type daemonRun struct {
	wall      time.Duration // table placed -> version committed (plan, slices, join, commit)
	cpu       time.Duration // the daemon process's user + system CPU, start to stop
	slices    int           // slice tasks started
	joinPages any           // the join's "slices joined" log line: pages copied, re-encoded
}

// slicedDaemon runs one daemon (embedded NATS, in-process only; `workers`
// task workers)
// with slice_bytes 48 MiB on a fresh copy of base, and measures it.
func slicedDaemon(e env, base, tag, pol string, workers int) daemonRun {
	dir := filepath.Join(e.work, tag)
	tables, stage := filepath.Join(dir, "tables"), filepath.Join(dir, "stage", "t.lance")
	_ = os.MkdirAll(tables, 0o755)
	copyTree(base, stage)
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "lanced.hcl")
	body := fmt.Sprintf(`state_dir = %q
tables    = [%q]
policies  = %q
workers   = %d
nats { embedded = true }
source "poll" { interval = "500ms" }
events {
  debounce  = "50ms"
  max_delay = "200ms"
}
queue { commit_max_wait = "200ms" }
http { listen = "127.0.0.1:%d" }
`, filepath.Join(dir, "state"), tables, pol, workers, freePort())
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(e.bin, "run", "--config", cfg, "--node-id", tag)
	cmd.Dir = e.root
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	lines := make(chan map[string]any, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				log.Printf("%s: %s", tag, sc.Text())
				continue
			}
			lines <- m
		}
	}()
	var r daemonRun
	var start time.Time
	deadline := time.After(15 * time.Minute)
	for done := false; !done; {
		select {
		case m, ok := <-lines:
			if !ok {
				log.Fatalf("%s: the daemon ended early", tag)
			}
			switch {
			case m["level"] == "ERROR":
				log.Fatalf("%s: %v", tag, m)
			case m["msg"] == "lanced running":
				// The table appears once the daemon runs: its wall time is
				// the work on the table, not the daemon's start.
				if err := os.Rename(filepath.Dir(stage), filepath.Join(tables, "t")); err != nil {
					log.Fatal(err)
				}
				start = time.Now()
			case m["msg"] == "task started" && m["kind"] == "slice":
				r.slices++
			case m["msg"] == "slices joined":
				r.joinPages = m
			case m["msg"] == "version committed":
				r.wall = time.Since(start)
				done = true
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			log.Fatalf("%s: no commit within 15 minutes", tag)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range lines {
	}
	_ = cmd.Wait()
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return r
}

// freePort is a TCP port free on 127.0.0.1 now.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// slicedWorkers: the rewrite of one fragment (table, a Sized scenario
// name) by one daemon process: as one task with 1 worker, and in row slices
// (slice_bytes 48 MiB) with 1 and with 3 task workers; reps rounds, the
// three runs alternating within each.
func slicedWorkers(e env, table string) map[string]any {
	base := buildSized(table, e.work, e.cache, e.oracleDir)
	whole := writePolicy(filepath.Join(e.work, "pol-workers-whole"), "defaults {}\n")
	pol := writePolicy(filepath.Join(e.work, "pol-workers-sliced"), "defaults {\n  compaction { slice_bytes = \"48MiB\" }\n}\n")
	res := map[string]any{"table": fmt.Sprintf("%s, %.1f MiB", table, float64(dirBytes(base))/(1<<20))}
	for i := 0; i < e.reps; i++ {
		w := slicedDaemon(e, base, fmt.Sprintf("slw0-%d", i), whole, 1)
		one := slicedDaemon(e, base, fmt.Sprintf("slw1-%d", i), pol, 1)
		three := slicedDaemon(e, base, fmt.Sprintf("slw3-%d", i), pol, 3)
		res[fmt.Sprintf("rep%d", i)] = map[string]any{
			"load_average":              loadAvg(),
			"unsliced_seconds":          w.wall.Seconds(),
			"unsliced_cpu_seconds":      w.cpu.Seconds(),
			"one_worker_seconds":        one.wall.Seconds(),
			"one_worker_cpu_seconds":    one.cpu.Seconds(),
			"three_workers_seconds":     three.wall.Seconds(),
			"three_workers_cpu_seconds": three.cpu.Seconds(),
			"three_vs_one_wall":         three.wall.Seconds() / one.wall.Seconds(),
			"three_vs_one_cpu":          three.cpu.Seconds() / one.cpu.Seconds(),
			"three_vs_unsliced_wall":    three.wall.Seconds() / w.wall.Seconds(),
			"slices":                    three.slices,
			"join":                      three.joinPages,
		}
	}
	return res
}
