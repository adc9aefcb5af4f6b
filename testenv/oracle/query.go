package oracle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// QueryResult is the result of a query, vector_search or fts_search op:
// its rows and, when the op asked for "explain", real Lance's plan.
type QueryResult struct {
	Count int              `json:"count"`
	Data  []map[string]any `json:"data"`
	Plan  string           `json:"plan"`
}

// IDs returns the result's id column, sorted.
func (q QueryResult) IDs() []int64 {
	var out []int64
	for _, r := range q.Data {
		if v, ok := r["id"].(float64); ok {
			out = append(out, int64(v))
		}
	}
	slices.Sort(out)
	return out
}

// Queries runs query ops on uri and decodes their results.
func Queries(t testing.TB, uri string, ops []Op, opts ...Options) []QueryResult {
	t.Helper()
	res := RunOps(t, uri, ops, opts...)
	out := make([]QueryResult, len(res))
	for i, raw := range res {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("decode result of %v: %v", ops[i]["op"], err)
		}
	}
	return out
}

// IndexNames are the names of the indices real Lance lists, sorted.
func (r Report) IndexNames() []string {
	var out []string
	for _, ix := range r.Indices {
		out = append(out, ix.Name)
	}
	slices.Sort(out)
	return out
}

// Index returns the index real Lance lists under name; the test fails when
// there is none.
func (r Report) Index(t testing.TB, name string) Index {
	t.Helper()
	for _, ix := range r.Indices {
		if ix.Name == name {
			return ix
		}
	}
	t.Fatalf("real Lance lists no index %s: %v", name, r.IndexNames())
	return Index{}
}

// PlanHasNode reports whether real Lance's explainPlan text has a node
// named exactly name: the text of a line before its first ':' (for
// example "MatchQuery" or "PhraseQuery"). A substring would not do:
// "FlatMatchQuery", the node real Lance plans to scan rows no index
// covers, also contains "MatchQuery".
func PlanHasNode(plan, name string) bool {
	for _, l := range strings.Split(plan, "\n") {
		if node, _, _ := strings.Cut(strings.TrimSpace(l), ":"); node == name {
			return true
		}
	}
	return false
}

// FTSThroughIndex reports whether an FTS plan reads the inverted index:
// it has a query node (MatchQuery, PhraseQuery, a boolean of them, ...)
// other than FlatMatchQuery (a scan of rows no index covers) and
// ScalarIndexQuery (a scalar index's filter).
func FTSThroughIndex(plan string) bool {
	for _, l := range strings.Split(plan, "\n") {
		node, _, _ := strings.Cut(strings.TrimSpace(l), ":")
		if strings.HasSuffix(node, "Query") && !strings.HasPrefix(node, "Flat") && node != "ScalarIndexQuery" {
			return true
		}
	}
	return false
}
