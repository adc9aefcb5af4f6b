package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDaemonRemapsIndicesInPartsAcrossWorkers: three daemon processes
// (a: embedded NATS, one worker; b: two workers; c: one worker) maintain
// a table real Lance built with an IVF_PQ of 8 partitions on vec and a
// BTree on id (3 pages), then appended to and deleted from. With
// index.remap_part_bytes = 16 KiB each segment's remap runs as at least
// three part tasks (slice/remap/..., IVF partition ranges and btree page
// ranges) on more than one process, then one join task each
// (join/remap/...); the rewrites wait for the parts and the joins and
// commit with both joined segments in one Rewrite. No task is dropped at commit, no commit abandoned. Real Lance
// then reads the same rows, lists both indices with no indexed row lost,
// finds the same ids through the BTree, and searches through the vector
// index (every partition probed) with recall@10 against an exact search
// no worse than before.
func TestDaemonRemapsIndicesInPartsAcrossWorkers(t *testing.T) {
	bin, root := daemonProcsTest(t, "tables", "stage")
	tables, stage := filepath.Join(root, "tables"), filepath.Join(root, "stage")
	src := remapPartsTable(t, stage)
	path := homeTablePath(tables, "parts", "a", "b", "c") // a coordinates it
	pre := oracle.Inspect(t, src, 0)
	wantIdx := []string{"id_idx", "vec_idx"}
	if got := pre.IndexNames(); !slices.Equal(got, wantIdx) {
		t.Fatalf("indices before: %v", got)
	}
	wantDigest, wantRows := rowsDigest(oracle.Scan(t, src, 0, nil))
	qs, idOps := partsQueries()
	recallBefore := partsRecall(t, src, qs)
	idsBefore := oracle.Queries(t, src, idOps)

	pol := filepath.Join(root, "policies")
	if err := os.MkdirAll(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "parts.hcl"), []byte(partsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	natsAddr := freeAddr(t)
	auth := natsAuth(t, root, "remap-parts-test-password")
	client := fmt.Sprintf("policies = %q\nnats {\n  url = \"nats://%s\"\n%s}", pol, natsAddr, auth)
	config := func(name, natsBlock string, workers int) string {
		return writeWorkersConfig(t, root, name, tables, natsBlock, freeAddr(t), workers)
	}
	a := startDaemonProc(t, bin, "a", config("a", fmt.Sprintf("policies = %q\nnats {\n  embedded = true\n  listen = %q\n%s}", pol, natsAddr, auth), 1), filepath.Join(root, "a"))
	waitUntil(t, 60*time.Second, "a running", func() bool { return a.has("lanced running", "", "") })
	b := startDaemonProc(t, bin, "b", config("b", client, 2), filepath.Join(root, "b"))
	c := startDaemonProc(t, bin, "c", config("c", client, 1), filepath.Join(root, "c"))
	waitUntil(t, 60*time.Second, "b and c running", func() bool { return b.has("lanced running", "", "") && c.has("lanced running", "", "") })
	// The table appears once every worker is up, so the parts spread.
	if err := os.Rename(src, path); err != nil {
		t.Fatal(err)
	}
	procs := []*daemonProc{a, b, c}
	segs := waitPartsCommitted(t, procs)
	stopByTERM(t, 120*time.Second, procs...)

	// Real Lance judges.
	post := checkSameRowsFewerFragments(t, path, pre, wantDigest, wantRows)
	checkIndicesKept(t, pre, post, wantIdx)
	for i, r := range oracle.Queries(t, path, idOps) {
		checkThroughIndex(t, idOps[i], r.Plan)
		if want := idsBefore[i].IDs(); len(want) == 0 || !slices.Equal(r.IDs(), want) {
			t.Fatalf("%v: ids %v after the daemons, %v before", idOps[i]["where"], r.IDs(), want)
		}
	}
	recallAfter := partsRecall(t, path, qs)
	if recallAfter < recallBefore {
		t.Fatalf("recall@10 %.4f after the daemons, %.4f before", recallAfter, recallBefore)
	}
	var remaps []string
	for uuid, sp := range segs {
		remaps = append(remaps, fmt.Sprintf("segment %s: %d parts (done on %v), joined on %s", uuid, partsCount(sp.parts), sp.parts, sp.join))
	}
	slices.Sort(remaps)
	t.Logf("fragments %d -> %d; %s; recall@10 (nprobes 8, %d queries) %.4f -> %.4f",
		pre.Fragments, post.Fragments, strings.Join(remaps, "; "), len(qs), recallBefore, recallAfter)
}

// partsPolicy splits the remap of a vector or btree segment of over 16
// KiB, and
// keeps the appended rows out of a catch-up, so the recall compared is the
// remapped segment's (a catch-up would encode the rows real Lance now
// searches exactly).
const partsPolicy = "defaults {\n  index {\n    remap_part_bytes = 16384\n    max_unindexed_rows = 1000000\n  }\n}\n"

// remapPartsTable has real Lance write, in dir, 4 fragments of 3,000
// rows with every 10th deleted, an IVF_PQ of 8 partitions on vec and a
// BTree on id (3 pages of 4,096 rows), then two appends of 200 rows and a
// delete of every 7th.
func remapPartsTable(t *testing.T, dir string) string {
	t.Helper()
	path := oracle.Build(t, oracle.Sized{Fragments: 4, RowsPerFragment: 3000, VectorDim: 32}.Scenario(), dir)
	oracle.RunOps(t, path, []oracle.Op{
		{"op": "delete", "where": "id % 10 = 0"},
		{"op": "create_index", "column": "vec", "type": "ivf_pq", "name": "vec_idx", "options": map[string]any{"numPartitions": 8, "numSubVectors": 4, "distanceType": "l2"}},
		{"op": "create_index", "column": "id", "type": "btree", "name": "id_idx"},
		{"op": "add", "rows": 200, "seed": 5},
		{"op": "add", "rows": 200, "seed": 6},
		{"op": "delete", "where": "id % 7 = 3"},
	})
	return path
}

// partsQueries are 32 random query vectors and the BTree filters
// (equality, range, IN) the test compares.
func partsQueries() ([][]float32, []oracle.Op) {
	r := rand.New(rand.NewPCG(11, 13))
	qs := make([][]float32, 32)
	for i := range qs {
		qs[i] = make([]float32, 32)
		for j := range qs[i] {
			qs[i][j] = r.Float32()*2 - 1
		}
	}
	var ops []oracle.Op
	for _, w := range []string{"id = 1234", "id >= 500 AND id < 620", "id > 11990", "id IN (1, 7, 333, 4097, 8193, 11999, 12101)"} {
		ops = append(ops, oracle.Op{"op": "query", "where": w, "columns": []string{"id"}, "explain": true})
	}
	return qs, ops
}

// partsRecall is the mean recall@10 of real Lance's searches through
// vec_idx with all 8 partitions probed against exact searches; it fails
// t unless every search goes through the index.
func partsRecall(t *testing.T, path string, qs [][]float32) float64 {
	t.Helper()
	var ops []oracle.Op
	for _, q := range qs {
		ops = append(ops,
			oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "columns": []string{"id"}, "bypass_vector_index": true},
			oracle.Op{"op": "vector_search", "column": "vec", "vector": q, "k": 10, "nprobes": 8, "columns": []string{"id"}, "explain": true})
	}
	res := oracle.Queries(t, path, ops)
	var sum float64
	for i := 0; i < len(res); i += 2 {
		checkThroughIndex(t, ops[i+1], res[i+1].Plan)
		want, hit := res[i].IDs(), 0
		for _, id := range res[i+1].IDs() {
			if slices.Contains(want, id) {
				hit++
			}
		}
		if len(want) > 0 {
			sum += float64(hit) / float64(len(want))
		}
	}
	return sum / float64(len(qs))
}

// waitPartsCommitted waits until a Rewrite commit followed the joins of
// both indices' parts and every task the daemons started ended, and
// checks the daemons' logs: for each of the two segments (vec_idx's and
// id_idx's) at least three part tasks and exactly one join done, the
// parts on more than one process, nothing dropped at commit, no commit
// abandoned, no error. It returns, per segment, how many part tasks each
// process did and the process that did the join.
func waitPartsCommitted(t *testing.T, procs []*daemonProc) map[string]segmentParts {
	t.Helper()
	committed := func() bool {
		for _, p := range procs {
			for _, l := range p.snapshot() {
				if l["msg"] != "version committed" || l["kind"] != "rewrite" {
					continue
				}
				segs, _ := scanParts(procs)
				joined := 0
				for _, sp := range segs {
					joined += min(sp.joins, 1)
				}
				if joined == 2 {
					return true
				}
			}
		}
		return false
	}
	waitUntil(t, 300*time.Second, "a rewrite committed after the joins of both indices' parts", committed)
	waitUntil(t, 120*time.Second, "every task ended", func() bool { _, open := scanParts(procs); return open == 0 })
	time.Sleep(3 * time.Second) // let the coordinator commit what the last tasks returned
	segs, _ := scanParts(procs)
	on := map[string]bool{}
	for _, sp := range segs {
		for p := range sp.parts {
			on[p] = true
		}
		if partsCount(sp.parts) < 3 || sp.joins != 1 {
			t.Fatalf("segments' part tasks and joins %+v: want at least 3 parts and one join each", segs)
		}
	}
	if len(segs) != 2 || len(on) < 2 {
		t.Fatalf("segments' part tasks and joins %+v: want two segments, parts on at least 2 processes", segs)
	}
	for _, p := range procs {
		for _, l := range p.snapshot() {
			msg, _ := l["msg"].(string)
			if l["level"] == "ERROR" || msg == "task dropped at commit" || msg == "slices given up" || msg == "commit abandoned" {
				t.Fatalf("%s: %v", p.name, l)
			}
		}
	}
	return segs
}

// segmentParts are the part tasks of one segment's remap done on each
// process, and its joins (the process of the last).
type segmentParts struct {
	parts map[string]int
	joins int
	join  string
}

// scanParts reads the daemons' logs: per remapped segment (by uuid) the
// part tasks and joins done, and how many started tasks have not ended.
func scanParts(procs []*daemonProc) (map[string]segmentParts, int) {
	segs := map[string]segmentParts{}
	started := map[string]int{}
	seg := func(uuid string) segmentParts {
		sp, ok := segs[uuid]
		if !ok {
			sp = segmentParts{parts: map[string]int{}}
		}
		return sp
	}
	for _, p := range procs {
		for _, l := range p.snapshot() {
			k, _ := l["task_id"].(string)
			switch l["msg"] {
			case "task started":
				started[k]++
			case "task done", "task handed back":
				started[k]--
				if l["msg"] != "task done" {
					continue
				}
				if rest, ok := strings.CutPrefix(k, "slice/remap/"); ok {
					uuid, _, _ := strings.Cut(rest, "/")
					sp := seg(uuid)
					sp.parts[p.name]++
					segs[uuid] = sp
				}
				if rest, ok := strings.CutPrefix(k, "join/remap/"); ok {
					uuid, _, _ := strings.Cut(rest, ":")
					sp := seg(uuid)
					sp.joins++
					sp.join = p.name
					segs[uuid] = sp
				}
			}
		}
	}
	open := 0
	for _, n := range started {
		open += n
	}
	return segs, open
}

// partsCount is the part tasks done on every process.
func partsCount(parts map[string]int) int {
	n := 0
	for _, c := range parts {
		n += c
	}
	return n
}
