package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// cpFsync times cp + fsync of files, one after the other (each file made
// durable, as lanced makes every data file durable before it commits).
func cpFsync(e env, tag string, files []string) run {
	dst := filepath.Join(e.work, tag)
	_ = os.MkdirAll(dst, 0o755)
	defer os.RemoveAll(dst)
	script := "for f in \"$@\"; do cp \"$f\" " + dst + "/ && dd if=/dev/null of=" + dst + "/$(basename \"$f\") conv=notrunc,fsync status=none; done"
	return measure(e.root, "sh", append([]string{"-c", script, "sh"}, files...)...)
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
