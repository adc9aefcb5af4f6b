package text_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lanced-dev/lanced/internal/format/index/text"
	"github.com/lanced-dev/lanced/internal/format/lancefile/lancefiletest"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// addrMapping is the mapping real Lance's compaction applied, read back
// from its own _rowaddr scans before and after: a row whose id is gone was
// deleted.
type addrMapping map[uint64]uint64

func (m addrMapping) Map(old uint64) (uint64, bool) {
	n, ok := m[old]
	return n, ok
}

// bodies returns id -> body of the rows real Lance returns for where.
func bodies(t *testing.T, path, where string) map[int64]string {
	t.Helper()
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "query", "where": where, "columns": []string{"id", "body"}}})
	var r struct {
		Data []struct {
			ID   int64  `json:"id"`
			Body string `json:"body"`
		} `json:"data"`
	}
	if err := json.Unmarshal(res[0], &r); err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, d := range r.Data {
		out[d.ID] = d.Body
	}
	return out
}

type ftsIndex struct {
	UUID      string `json:"indexUuid"`
	Type      string `json:"indexType"`
	Indexed   int64  `json:"numIndexedRows"`
	Unindexed int64  `json:"numUnindexedRows"`
}

func listFTS(t *testing.T, path string) ftsIndex {
	t.Helper()
	res := oracle.RunOps(t, path, []oracle.Op{{"op": "list_indices"}})
	var r struct {
		Indices []ftsIndex `json:"indices"`
	}
	if err := json.Unmarshal(res[0], &r); err != nil {
		t.Fatal(err)
	}
	for _, ix := range r.Indices {
		if ix.Type == "FTS" {
			return ix
		}
	}
	t.Fatalf("no FTS index: %+v", r.Indices)
	return ftsIndex{}
}

type searchOut struct {
	IDs  []int64
	Plan string
}

func ftsSearch(t *testing.T, path string, ops []oracle.Op) []searchOut {
	t.Helper()
	res := oracle.RunOps(t, path, ops)
	out := make([]searchOut, len(res))
	for i, raw := range res {
		var r struct {
			Data []struct {
				ID int64 `json:"id"`
			} `json:"data"`
			Plan string `json:"plan"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		for _, d := range r.Data {
			out[i].IDs = append(out[i].IDs, d.ID)
		}
		slices.Sort(out[i].IDs)
		out[i].Plan = r.Plan
	}
	return out
}

// TestDocsRemapOracle builds a table with a positional FTS index with real
// Lance, deletes every tenth row and lets real Lance's optimize() compact
// and remap the index. Our reader must agree with both segments (metadata,
// token and posting counts, docs = indexed row addresses), and RemapDocs of
// the pre-compaction docs through the addresses Lance moved rows to must
// equal the docs file Lance's own remap wrote, row by row. Real Lance's
// match and phrase queries before and after its remap pin down what a
// remapped segment must answer: the same rows minus the deleted ones.
func TestDocsRemapOracle(t *testing.T) {
	oracle.Require(t)
	ctx := context.Background()
	path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}}})
	pre := listFTS(t, path)
	if pre.Indexed != 2000 || pre.Unindexed != 0 {
		t.Fatalf("FTS index covers %d/%d rows, want 2000/0", pre.Indexed, pre.Unindexed)
	}
	preVersion := oracle.Inspect(t, path, 0).Version
	preAddrs := oracle.RowAddrsByID(t, path, preVersion)
	sample := bodies(t, path, "id % 37 = 1")

	ops, phraseOf := docsRemapQueries(t, sample)
	before := ftsSearch(t, path, ops)

	oracle.RunOps(t, path, []oracle.Op{{"op": "delete", "where": "id % 10 = 0"}, {"op": "optimize"}})
	post := listFTS(t, path)
	if post.UUID == pre.UUID {
		t.Fatalf("real Lance's optimize kept FTS segment %s", pre.UUID)
	}
	if post.Indexed != 1800 || post.Unindexed != 0 {
		t.Fatalf("after Lance's remap the FTS index covers %d/%d rows, want 1800/0", post.Indexed, post.Unindexed)
	}
	postAddrs := oracle.RowAddrsByID(t, path, 0)
	m := addrMapping{}
	for id, a := range preAddrs {
		if b, ok := postAddrs[id]; ok {
			m[a] = b
		}
	}

	preDir := filepath.Join(path, "_indices", pre.UUID)
	postDir := filepath.Join(path, "_indices", post.UUID)
	checkDocsRemapMetadata(t, ctx, preDir, postDir)
	removed := checkRemapDocsAsLance(t, ctx, preDir, postDir, m)
	checkTokensAndPostings(t, ctx, preDir, postDir, removed)

	// What a remapped segment must answer: real Lance's own remap returns
	// the rows it returned before, minus the deleted ones, through the index.
	after := ftsSearch(t, path, ops)
	checkRemapAnswers(t, ops, before, after, phraseOf)
}

// docsRemapQueries are the FTS queries of TestDocsRemapOracle: single
// words (match) and phrases of two adjacent words of the generator's
// domain vocabulary (no stop words) cut from the sample rows, each of
// which must at least find its own row (phraseOf: query index -> row id).
func docsRemapQueries(t *testing.T, sample map[int64]string) ([]oracle.Op, map[int]int64) {
	var ops []oracle.Op
	for _, w := range []string{"river", "harbour", "copper winter", "lance manifest"} {
		ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": w, "k": 5000, "columns": []string{"id"}, "explain": true})
	}
	// Phrases: two adjacent words of the generator's domain vocabulary
	// (no stop words), from the first rows that have such a pair.
	content := map[string]bool{}
	for _, w := range strings.Fields("table column fragment version manifest storage object bucket compaction cleanup vector index query schema arrow lance daemon repack deletion commit transaction river mountain garden window kitchen morning evening letter market engine harbour forest silver copper winter summer autumn spring") {
		content[w] = true
	}
	phraseOf := map[int]int64{}
	for id := int64(1); id < 2000 && len(phraseOf) < 4; id += 37 {
		words := strings.Fields(sample[id])
		for k := 0; k+1 < len(words); k++ {
			if content[words[k]] && content[words[k+1]] {
				phraseOf[len(ops)] = id
				ops = append(ops, oracle.Op{"op": "fts_search", "column": "body", "query": words[k] + " " + words[k+1], "phrase": true, "k": 5000, "columns": []string{"id"}, "explain": true})
				break
			}
		}
	}
	if len(phraseOf) < 2 {
		t.Fatalf("only %d phrase queries found in the generated rows", len(phraseOf))
	}
	return ops, phraseOf
}

// checkDocsRemapMetadata reads both segments' metadata: lance 8.0.0's
// default layout before, which CanRemap accepts, and Lance's remap keeps
// every field.
func checkDocsRemapMetadata(t *testing.T, ctx context.Context, preDir, postDir string) {
	pm, err := text.ReadMetadata(ctx, lancefiletest.Open(t, filepath.Join(preDir, text.MetadataFileName)))
	if err != nil {
		t.Fatal(err)
	}
	lm, err := text.ReadMetadata(ctx, lancefiletest.Open(t, filepath.Join(postDir, text.MetadataFileName)))
	if err != nil {
		t.Fatal(err)
	}
	if !pm.WithPosition || !slices.Equal(pm.Partitions, []uint64{0}) || pm.TokenSetFormat != "fst" || pm.PostingTailCodec != "fixed32_v1" || !pm.DeletedFragments.IsEmpty() {
		t.Fatalf("pre metadata %+v", pm)
	}
	if string(lm.Params) != string(pm.Params) || !slices.Equal(lm.Partitions, pm.Partitions) || lm.TokenSetFormat != pm.TokenSetFormat || lm.PostingTailCodec != pm.PostingTailCodec || !lm.DeletedFragments.IsEmpty() {
		t.Fatalf("Lance's remap changed the metadata: %+v, was %+v", lm, pm)
	}
	if err := text.CanRemap(pm); err != nil {
		t.Fatalf("CanRemap = %v for lance 8.0.0's default layout", err)
	}

}

// checkRemapDocsAsLance checks every indexed row is in the pre docs, in
// address order, and that RemapDocs through m equals the docs file
// Lance's own remap wrote, row by row. It returns the docs RemapDocs
// dropped.
func checkRemapDocsAsLance(t *testing.T, ctx context.Context, preDir, postDir string, m addrMapping) *roaring.Bitmap {
	var preDocs int
	err := text.ReadDocs(ctx, lancefiletest.Open(t, filepath.Join(preDir, text.DocsFileName(0))), func(doc uint32, row uint64, n uint32) error {
		if int(doc) != preDocs {
			t.Fatalf("doc id %d at row %d", doc, preDocs)
		}
		if n == 0 {
			t.Fatalf("doc %d (row %d) has no tokens", doc, row)
		}
		preDocs++
		return nil
	})
	if err != nil || preDocs != 2000 {
		t.Fatalf("pre docs: %d, %v", preDocs, err)
	}
	type doc struct {
		row uint64
		n   uint32
	}
	var ours, lance []doc
	removed, err := text.RemapDocs(ctx, lancefiletest.Open(t, filepath.Join(preDir, text.DocsFileName(0))), m, func(row uint64, n uint32) error {
		ours = append(ours, doc{row, n})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if removed.GetCardinality() != 200 {
		t.Fatalf("RemapDocs dropped %d docs, want 200", removed.GetCardinality())
	}
	err = text.ReadDocs(ctx, lancefiletest.Open(t, filepath.Join(postDir, text.DocsFileName(0))), func(_ uint32, row uint64, n uint32) error {
		lance = append(lance, doc{row, n})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ours, lance) {
		n := min(len(ours), len(lance))
		for i := 0; i < n; i++ {
			if ours[i] != lance[i] {
				t.Fatalf("doc %d: ours %+v, Lance's remap %+v (%d vs %d docs)", i, ours[i], lance[i], len(ours), len(lance))
			}
		}
		t.Fatalf("ours %d docs, Lance's remap %d", len(ours), len(lance))
	}

	return removed
}

// checkTokensAndPostings: Lance's remap drops no token here (every word
// survives in some live row), and its posting count shrinks by the
// deleted docs' distinct tokens.
func checkTokensAndPostings(t *testing.T, ctx context.Context, preDir, postDir string, removed *roaring.Bitmap) {
	pt, err := text.ReadTokens(ctx, lancefiletest.Open(t, filepath.Join(preDir, text.TokensFileName(0))))
	if err != nil {
		t.Fatal(err)
	}
	lt, err := text.ReadTokens(ctx, lancefiletest.Open(t, filepath.Join(postDir, text.TokensFileName(0))))
	if err != nil {
		t.Fatal(err)
	}
	pi, err := text.ReadInvert(ctx, lancefiletest.Open(t, filepath.Join(preDir, text.InvertFileName(0))))
	if err != nil {
		t.Fatal(err)
	}
	li, err := text.ReadInvert(ctx, lancefiletest.Open(t, filepath.Join(postDir, text.InvertFileName(0))))
	if err != nil {
		t.Fatal(err)
	}
	if uint64(pt.NextID) != pi.Tokens || uint64(lt.NextID) != li.Tokens || !pi.Positions || !li.Positions {
		t.Fatalf("tokens %+v/%+v, postings %+v/%+v", pt, lt, pi, li)
	}
	if li.Postings >= pi.Postings || li.Postings < pi.Postings-uint64(removed.GetCardinality())*18 {
		t.Fatalf("postings %d before, %d after Lance's remap of 200 dropped docs", pi.Postings, li.Postings)
	}
	t.Logf("FTS segment: %d tokens, %d postings before; %d tokens, %d postings after Lance's remap", pi.Tokens, pi.Postings, li.Tokens, li.Postings)

}

// checkRemapAnswers: real Lance's own remap returns the rows it returned
// before, minus the deleted ones (id % 10 = 0), through the index; every
// query found something and every phrase its own row.
func checkRemapAnswers(t *testing.T, ops []oracle.Op, before, after []searchOut, phraseOf map[int]int64) {
	for i := range ops {
		var want []int64
		for _, id := range before[i].IDs {
			if id%10 != 0 {
				want = append(want, id)
			}
		}
		if !slices.Equal(after[i].IDs, want) {
			t.Errorf("%v: %d rows after Lance's remap, want %d", ops[i]["query"], len(after[i].IDs), len(want))
		}
		if len(before[i].IDs) == 0 {
			t.Errorf("%v finds nothing", ops[i]["query"])
		}
		if id, ok := phraseOf[i]; ok && !slices.Contains(before[i].IDs, id) {
			t.Errorf("phrase %q misses its own row %d", ops[i]["query"], id)
		}
		kind := "MatchQuery"
		if ops[i]["phrase"] == true {
			kind = "PhraseQuery"
		}
		if !oracle.PlanHasNode(after[i].Plan, kind) {
			t.Errorf("%v: plan has no %s:\n%s", ops[i]["query"], kind, after[i].Plan)
		}
	}
}
