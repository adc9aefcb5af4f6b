package oracle

import (
	"encoding/json"
	"slices"
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
