package text

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

type identity struct{}

func (identity) Map(old uint64) (uint64, bool) { return old, true }

// remapSegment runs the registered FTS remapper on segment seg, stored in
// dir, writing into out.
func remapSegment(t *testing.T, seg *tablepb.IndexMetadata, dir, out string, m index.Mapping) index.RemapResult {
	t.Helper()
	if err := index.CanRemap(seg); err != nil {
		t.Fatal(err)
	}
	rm, _ := index.RemapperFor(index.KindFTS)
	res, err := rm.Remap(context.Background(), index.RemapRequest{Segment: seg, Kind: index.Detect(seg), Mapping: m, Old: indextest.Dir(dir), New: indextest.Dir(out)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// postingRow is one decoded posting list.
type postingRow struct {
	docs, freqs []uint32
	scores      []float32
	max         float32
	positions   [][][]byte
}

type partition struct {
	docs      []uint64
	numTokens []uint32
	rows      []postingRow
	groups    []uint32
	tokens    map[string]uint64
	fst       []byte
	nextID    uint32
	total     uint64
}

func readPartition(t *testing.T, dir string, p uint64) *partition {
	t.Helper()
	ctx := context.Background()
	out := &partition{tokens: map[string]uint64{}}
	err := ReadDocs(ctx, lancefiletest.Open(t, filepath.Join(dir, DocsFileName(p))), func(_ uint32, row uint64, n uint32) error {
		out.docs = append(out.docs, row)
		out.numTokens = append(out.numTokens, n)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inv := lancefiletest.Open(t, filepath.Join(dir, InvertFileName(p)))
	if s, ok := meta(inv)[keyGroupOffsets]; ok {
		i, _ := strconv.Atoi(string(s))
		b, err := inv.ReadBuffer(inv.GlobalBuffers[i])
		if err != nil {
			t.Fatal(err)
		}
		if out.groups, err = decodeGroupStarts(b); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := inv.ReadAll(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	post := rec.Column(0).(*array.List)
	blocks := post.ListValues().(*array.LargeBinary)
	scores := rec.Column(1).(*array.Float32)
	lens := rec.Column(2).(*array.Uint32)
	var pos *array.List
	if rec.NumCols() > 3 {
		pos = rec.Column(3).(*array.List)
	}
	scratch := make([]uint32, blockSize)
	for i := 0; i < int(rec.NumRows()); i++ {
		a, b := post.ValueOffsets(i)
		var bl [][]byte
		var r postingRow
		for k := a; k < b; k++ {
			v := blocks.Value(int(k))
			bl = append(bl, v)
			r.scores = append(r.scores, math.Float32frombits(uint32(v[0])|uint32(v[1])<<8|uint32(v[2])<<16|uint32(v[3])<<24))
		}
		r.docs, r.freqs, err = decodePostings(nil, nil, bl, int(lens.Value(i)), scratch)
		if err != nil {
			t.Fatalf("%s token %d: %v", inv.Name(), i, err)
		}
		r.max = scores.Value(i)
		if pos != nil {
			docsL := pos.ListValues().(*array.List)
			bin := docsL.ListValues().(*array.LargeBinary)
			pa, pb := pos.ValueOffsets(i)
			for d := pa; d < pb; d++ {
				qa, qb := docsL.ValueOffsets(int(d))
				var one [][]byte
				for q := qa; q < qb; q++ {
					one = append(one, append([]byte(nil), bin.Value(int(q))...))
				}
				r.positions = append(r.positions, one)
			}
		}
		out.rows = append(out.rows, r)
	}
	fst, tk, err := readTokenSet(ctx, lancefiletest.Open(t, filepath.Join(dir, TokensFileName(p))))
	if err != nil {
		t.Fatal(err)
	}
	out.fst, out.nextID, out.total = fst, tk.NextID, tk.TotalLength
	rd, err := newFSTReader(fst)
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.each(func(k []byte, v uint64) error { out.tokens[string(k)] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// comparePartitions checks ours against Lance's: docs, token ids, postings
// and positions equal; block max scores equal up to float rounding.
func comparePartitions(t *testing.T, what string, ours, lance *partition) {
	t.Helper()
	if !slices.Equal(ours.docs, lance.docs) || !slices.Equal(ours.numTokens, lance.numTokens) {
		t.Fatalf("%s: docs differ (%d vs %d)", what, len(ours.docs), len(lance.docs))
	}
	if len(ours.tokens) != len(lance.tokens) {
		t.Fatalf("%s: %d tokens, Lance %d", what, len(ours.tokens), len(lance.tokens))
	}
	for k, v := range lance.tokens {
		if ours.tokens[k] != v {
			t.Fatalf("%s: token %q id %d, Lance %d", what, k, ours.tokens[k], v)
		}
	}
	if len(ours.rows) != len(lance.rows) {
		t.Fatalf("%s: %d posting lists, Lance %d", what, len(ours.rows), len(lance.rows))
	}
	exact, total, worst := 0, 0, 0.0
	for i := range lance.rows {
		o, l := ours.rows[i], lance.rows[i]
		if !slices.Equal(o.docs, l.docs) || !slices.Equal(o.freqs, l.freqs) {
			t.Fatalf("%s: token %d postings differ: %v/%v vs Lance %v/%v", what, i, o.docs, o.freqs, l.docs, l.freqs)
		}
		if len(o.positions) != len(l.positions) {
			t.Fatalf("%s: token %d: %d position lists, Lance %d", what, i, len(o.positions), len(l.positions))
		}
		for d := range l.positions {
			if !slices.EqualFunc(o.positions[d], l.positions[d], func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Fatalf("%s: token %d doc %d positions differ", what, i, d)
			}
		}
		for k := range l.scores {
			total++
			if o.scores[k] == l.scores[k] {
				exact++
			}
			worst = max(worst, math.Abs(float64(o.scores[k]-l.scores[k]))/math.Abs(float64(l.scores[k])))
		}
		if d := math.Abs(float64(o.max-l.max)) / math.Abs(float64(l.max)); d > 1e-6 {
			t.Fatalf("%s: token %d max score %v, Lance %v", what, i, o.max, l.max)
		}
	}
	if worst > 1e-6 {
		t.Fatalf("%s: block max scores differ from Lance's by up to %.2g (relative)", what, worst)
	}
	if !slices.Equal(ours.groups, lance.groups) || string(ours.fst) != string(lance.fst) || ours.nextID != lance.nextID || ours.total != lance.total {
		t.Fatalf("%s: posting groups %v vs Lance %v, token dictionary %d bytes (next id %d, total length %d) vs Lance %d (%d, %d)", what, ours.groups, lance.groups, len(ours.fst), ours.nextID, ours.total, len(lance.fst), lance.nextID, lance.total)
	}
	t.Logf("%s: %d docs, %d tokens, %d posting lists equal; block max scores %d/%d bit-identical (worst relative difference %.2g); group starts equal: %v; token dictionary bytes equal: %v (next id %d/%d, total length %d/%d)",
		what, len(ours.docs), len(ours.tokens), len(ours.rows), exact, total, worst, slices.Equal(ours.groups, lance.groups), string(ours.fst) == string(lance.fst), ours.nextID, lance.nextID, ours.total, lance.total)
}

type hit struct {
	ID    int64   `json:"id"`
	Score float64 `json:"_score"`
}

func search(t *testing.T, path string, ops []oracle.Op) [][]hit {
	t.Helper()
	res := oracle.RunOps(t, path, ops)
	out := make([][]hit, len(res))
	for i, raw := range res {
		var r struct {
			Data []hit  `json:"data"`
			Plan string `json:"plan"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		kind := "MatchQuery"
		if ops[i]["phrase"] == true {
			kind = "PhraseQuery"
		}
		if !oracle.PlanHasNode(r.Plan, kind) {
			t.Fatalf("%v: plan has no %s:\n%s", ops[i]["query"], kind, r.Plan)
		}
		sort.Slice(r.Data, func(a, b int) bool { return r.Data[a].ID < r.Data[b].ID })
		out[i] = r.Data
	}
	return out
}

func listIndex(t *testing.T, path, typ string) (uuid string, indexed, unindexed int64) {
	t.Helper()
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "list_indices"}})
	var r struct {
		Indices []struct {
			UUID      string `json:"indexUuid"`
			Type      string `json:"indexType"`
			Indexed   int64  `json:"numIndexedRows"`
			Unindexed int64  `json:"numUnindexedRows"`
		} `json:"indices"`
	}
	if err := json.Unmarshal(res[0], &r); err != nil {
		t.Fatal(err)
	}
	for _, ix := range r.Indices {
		if ix.Type == typ {
			return ix.UUID, ix.Indexed, ix.Unindexed
		}
	}
	t.Fatalf("no %s index: %+v", typ, r.Indices)
	return "", 0, 0
}

// TestFTSRemapOracle: real Lance builds a table with a positional FTS
// index, deletes rows and compacts (its optimize() remaps the index). Our
// remap of the pre-compaction segment through the same row moves must
// equal Lance's remapped segment (docs, token ids, postings, positions,
// block max scores), and real Lance reading a copy of the table with our
// files in place of its own must answer match and phrase queries with the
// same rows and scores.
func TestFTSRemapOracle(t *testing.T) {
	oracle.Require(t)
	t.Run("positions", func(t *testing.T) { testFTSRemap(t, "sized-4x500-v0-t12-d0", true) })
	// lancedb's default: no positions (no _position column, no phrases).
	t.Run("no-positions", func(t *testing.T) { testFTSRemap(t, "sized-4x500-v0-t12-d0", false) })
	// 6000 rows of about 40 words: long posting lists of many full blocks.
	t.Run("long", func(t *testing.T) { testFTSRemap(t, "sized-3x2000-v0-t40-d0", true) })
}

func testFTSRemap(t *testing.T, scenario string, withPosition bool) {
	dir := t.TempDir()
	path := oracle.Build(t, scenario, dir)
	// Rare words in every 50th row: deleting those rows empties their
	// posting lists.
	oracle.RunOps(t, path, []oracle.Op{{"op": "update", "where": "id % 50 = 1", "values_sql": map[string]any{"body": "concat(body, ' zq', CAST(id AS STRING), ' common', CAST(id % 3 AS STRING))"}}})
	oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": withPosition}}})
	const name = "body_idx"
	preSeg := indextest.Index(t, indextest.ReadManifest(t, path, oracle.Inspect(t, path, 0).Version), name)
	if v := preSeg.GetIndexVersion(); v != ftsIndexVersion {
		t.Fatalf("lance 8.0.0 wrote FTS index version %d, want %d", v, ftsIndexVersion)
	}
	preDir := filepath.Join(path, "_indices", indextest.UUID(t, preSeg.GetUuid()))

	// Identity remap: the segment must come back as it was.
	idDir := filepath.Join(dir, "identity")
	remapSegment(t, preSeg, preDir, idDir, identity{})
	lp := readPartition(t, preDir, 0)
	comparePartitions(t, "identity remap", readPartition(t, idDir, 0), lp)

	// Queries: single words, and phrases cut from rows.
	ops, phraseOf := ftsRemapQueries(t, path, withPosition)

	// Delete so that some tokens lose every document, then let Lance compact.
	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id % 10 = 0 OR id % 7 = 3 OR id % 100 = 1"}})
	comp := indextest.Compact(t, path, oracle.Inspect(t, path, 0))
	postDir, _ := comp.LanceRemap(t, path, name)
	_, indexed, unindexed := listIndex(t, path, "FTS")
	if unindexed != 0 {
		t.Fatalf("after Lance's optimize: %d rows unindexed", unindexed)
	}
	oursDir := filepath.Join(dir, "ours")
	res := remapSegment(t, indextest.Index(t, comp.PreM, name), preDir, oursDir, comp.Mapping)
	if res.Rows != uint64(indexed) || res.Dropped == 0 {
		t.Fatalf("remap %+v, Lance indexes %d rows", res, indexed)
	}
	ours := readPartition(t, oursDir, 0)
	if len(ours.tokens) >= len(lp.tokens) {
		t.Fatalf("no posting list emptied: %d tokens before, %d after", len(lp.tokens), len(ours.tokens))
	}
	t.Logf("remap: %+v, %d of %d tokens kept", res, len(ours.tokens), len(lp.tokens))
	comparePartitions(t, "remap after compaction", ours, readPartition(t, postDir, 0))
	checkSameMetadata(t, oursDir, postDir)

	// Our segment in place of Lance's, on a copy of the compacted table:
	// a new version whose FTS entry names our uuid and our files' sizes.
	swapped, newID := swapInSegment(t, path, filepath.Join(dir, "swapped"), comp.Post.Version, name, oursDir)
	if id, n, u := listIndex(t, swapped, "FTS"); id != newID.String() || n != indexed || u != 0 {
		t.Fatalf("with our segment: FTS %s covers %d/%d, want %s %d/0", id, n, u, newID, indexed)
	}
	want := search(t, path, ops)
	got := search(t, swapped, ops)
	compareFTSHits(t, ops, phraseOf, got, want)
	t.Logf("%d queries (match and phrase): same rows and scores from our remapped segment as from Lance's", len(ops))
}

// ftsRemapQueries are the searches of body compared after the remap:
// single words (zq551 lives on; zq501's only row is deleted, so its posting
// list goes) and, from rows that survive the delete, phrases of two
// adjacent longer words (single longer words without positions); phraseOf
// maps the index of such a search to the row it was cut from.
func ftsRemapQueries(t *testing.T, path string, withPosition bool) ([]oracle.Op, map[int]int64) {
	t.Helper()
	var ops []oracle.Op
	// zq551 lives on; zq501's only row is deleted, so its posting list goes.
	for _, w := range []string{"river", "harbour", "copper winter", "lance manifest", "table", "zq551", "zq501 zq551"} {
		ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 10000, "columns": []string{"id"}, "explain": true})
	}
	// Phrases: two adjacent longer words (no stop words) of rows that
	// survive the delete below; each must find its own row.
	rows := oracle.RunOps(t, path, []oracle.Op{{"op": "query", "where": "id % 41 = 3 AND id % 10 <> 0 AND id % 7 <> 3 AND id % 100 <> 1", "columns": []string{"id", "body"}}})
	var sample struct {
		Data []struct {
			ID   int64  `json:"id"`
			Body string `json:"body"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rows[0], &sample); err != nil {
		t.Fatal(err)
	}
	phraseOf := map[int]int64{}
	for _, r := range sample.Data {
		w := strings.Fields(r.Body)
		for k := 0; k < len(w) && len(phraseOf) < 12; k++ {
			if !withPosition && len(w[k]) >= 6 {
				phraseOf[len(ops)] = r.ID
				ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w[k], "k": 10000, "columns": []string{"id"}, "explain": true})
				break
			}
			if !withPosition || k+1 == len(w) {
				continue
			}
			if len(w[k]) >= 5 && len(w[k+1]) >= 5 {
				phraseOf[len(ops)] = r.ID
				ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w[k] + " " + w[k+1], "phrase": true, "k": 10000, "columns": []string{"id"}, "explain": true})
				break
			}
		}
	}
	if len(phraseOf) < 3 {
		t.Fatalf("only %d phrase queries from %d rows", len(phraseOf), len(sample.Data))
	}
	return ops, phraseOf
}

// checkSameMetadata: the FTS metadata in oursDir equals Lance's in postDir
// (params, partitions, token set format, posting tail codec, deleted
// fragments).
func checkSameMetadata(t *testing.T, oursDir, postDir string) {
	t.Helper()
	om, err := ReadMetadata(context.Background(), lancefiletest.Open(t, filepath.Join(oursDir, MetadataFileName)))
	if err != nil {
		t.Fatal(err)
	}
	lm, err := ReadMetadata(context.Background(), lancefiletest.Open(t, filepath.Join(postDir, MetadataFileName)))
	if err != nil {
		t.Fatal(err)
	}
	if string(om.Params) != string(lm.Params) || !slices.Equal(om.Partitions, lm.Partitions) || om.TokenSetFormat != lm.TokenSetFormat || om.PostingTailCodec != lm.PostingTailCodec || !om.DeletedFragments.Equals(lm.DeletedFragments) {
		t.Fatalf("metadata %+v, Lance's %+v", om, lm)
	}
}

// swapInSegment copies the table at path into the directory into and
// commits there a new version over version whose entry of index name
// names the segment in segDir, copied in under a new uuid. It returns the
// copy's path and the uuid.
func swapInSegment(t *testing.T, path, into string, version uint64, name, segDir string) (string, uuid.UUID) {
	t.Helper()
	swapped := filepath.Join(into, filepath.Base(path))
	if err := os.CopyFS(swapped, os.DirFS(path)); err != nil {
		t.Fatal(err)
	}
	newID := uuid.New()
	if err := os.CopyFS(filepath.Join(swapped, "_indices", newID.String()), os.DirFS(segDir)); err != nil {
		t.Fatal(err)
	}
	postM := indextest.ReadManifest(t, swapped, version)
	written, err := indextest.Dir(segDir).Files(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range written {
		names = append(names, f.Name)
	}
	indextest.CommitIndexSwap(t, swapped, postM, indextest.Swap{Old: indextest.Index(t, postM, name), ID: newID, Files: names})
	return swapped, newID
}

// compareFTSHits: every search finds the row its phrase was cut from and
// returns, through our segment (got), Lance's rows (want) in order with
// the same scores.
func compareFTSHits(t *testing.T, ops []oracle.Op, phraseOf map[int]int64, got, want [][]hit) {
	t.Helper()
	for i := range ops {
		if id, ok := phraseOf[i]; ok && !slices.ContainsFunc(got[i], func(h hit) bool { return h.ID == id }) {
			t.Errorf("%q misses its own row %d", ops[i]["query"], id)
		}
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%v: %d rows with our index, %d with Lance's", ops[i]["query"], len(got[i]), len(want[i]))
		}
		for k := range want[i] {
			if got[i][k].ID != want[i][k].ID || math.Abs(got[i][k].Score-want[i][k].Score) > 1e-5*math.Abs(want[i][k].Score) {
				t.Fatalf("%v: row %d: ours %+v, Lance %+v", ops[i]["query"], k, got[i][k], want[i][k])
			}
		}
	}
}
