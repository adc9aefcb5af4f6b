package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/scheduler/plan"
	"github.com/lanced-dev/lanced/internal/status"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// TestDriftOracle: real Lance builds a vector index over vectors uniform
// in [-1, 1]^32, then appends 1200 rows either from the same distribution
// or shifted by +1.5 in every dimension; `lanced compact --scope index`
// catches them up. In-distribution appends leave the drift near the 1%
// the 0.99 quantile bound implies and the plan recommends nothing; shifted
// appends are far from every centroid, `lanced plan`, `lanced stats` and
// the status gauge (lanced_index_drift_ratio's source) report the drift
// and the plan recommends a retrain. Every row stays indexed and searched
// by Lance; once Lance retrains the index (createIndex with replace), the
// record no longer applies and the plan drops the recommendation.
func TestDriftOracle(t *testing.T) {
	oracle.Require(t)
	cases := []struct {
		name, typ string
		options   map[string]any
	}{
		{"ivf_pq", "ivf_pq", map[string]any{"numPartitions": 4, "numSubVectors": 4, "distanceType": "l2"}},
		{"ivf_flat", "ivf_flat", map[string]any{"numPartitions": 4, "distanceType": "l2"}},
		{"hnsw_sq", "hnsw_sq", map[string]any{"numPartitions": 4, "distanceType": "l2"}},
	}
	for _, c := range cases {
		for _, shifted := range []bool{false, true} {
			name := c.name + "/in_distribution"
			if shifted {
				name = c.name + "/shifted"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				path := oracle.Build(t, "sized-1x4000-v32-t0-d0", filepath.Join(t.TempDir(), "t"))
				add := oracle.Op{"op": "add", "rows": 1200, "seed": 21}
				if shifted {
					add["vector_shift"] = 1.5
				}
				oracle.RunOps(t, path, []oracle.Op{
					{"op": "create_index", "column": "vec", "type": c.typ, "name": "vec_idx", "options": c.options},
					add,
				})
				runCLI(t, "compact", path, "--scope", "index")
				if ix := oracle.Inspect(t, path, 0).Index(t, "vec_idx"); ix.UnindexedRows != 0 {
					t.Fatalf("after the catch-up: %+v", ix)
				}
				d := planDrift(t, path)
				if d.CatchUp.Drift == nil {
					t.Fatalf("plan shows no drift: %+v", d.CatchUp)
				}
				dr := d.CatchUp.Drift
				t.Logf("%s: drift %.3f (%d of %d), reason %q", name, dr.Ratio, dr.Far, dr.Rows, d.CatchUp.Reason)
				// Every 11th generated vector is null: not indexed, not counted.
				if want := uint64(1200 - 1200/11); dr.Rows != want {
					t.Fatalf("drift counts %d caught-up rows, want %d", dr.Rows, want)
				}
				recommends := strings.Contains(d.CatchUp.Reason, "retrain recommended")
				stats := runCLI(t, "stats", path)
				if !strings.Contains(stats, "drift    vec_idx: ") {
					t.Fatalf("stats shows no drift:\n%s", stats)
				}
				st, err := status.ReadTable(context.Background(), path, path, nil)
				if err != nil || st.IndexDrift["vec_idx"] != dr.Ratio {
					t.Fatalf("status gauge: %v %v, plan %v", err, st.IndexDrift, dr.Ratio)
				}
				if !shifted {
					if dr.Ratio > 0.05 || dr.Retrain || recommends || strings.Contains(stats, "retrain recommended") {
						t.Fatalf("in-distribution appends: drift %.3f, reason %q", dr.Ratio, d.CatchUp.Reason)
					}
					return
				}
				if dr.Ratio < 0.5 || !dr.Retrain || !recommends || !strings.Contains(stats, "retrain recommended") {
					t.Fatalf("shifted appends: drift %.3f, reason %q\n%s", dr.Ratio, d.CatchUp.Reason, stats)
				}
				res := oracle.RunOps(t, path, []oracle.Op{{"op": "vector_search", "column": "vec", "vector": make([]float64, 32), "k": 10, "columns": []string{"id"}}})
				var hits struct {
					Data []json.RawMessage `json:"data"`
				}
				if err := json.Unmarshal(res[0], &hits); err != nil || len(hits.Data) != 10 {
					t.Fatalf("vector search: %v %s", err, res[0])
				}
				// Lance retrains: the record no longer applies.
				oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "vec", "type": c.typ, "name": "vec_idx", "options": c.options, "replace": true}})
				if d := planDrift(t, path); d.CatchUp.Drift != nil || strings.Contains(d.CatchUp.Reason, "retrain") {
					t.Fatalf("after Lance retrained: %+v", d.CatchUp)
				}
			})
		}
	}
}

// planDrift runs `lanced plan --json` and returns vec_idx's decision.
func planDrift(t *testing.T, path string) plan.IndexDecision {
	t.Helper()
	var p plan.Plan
	if err := json.Unmarshal([]byte(runCLI(t, "plan", path, "--json")), &p); err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Indices {
		if d.Name == "vec_idx" && d.CatchUp != nil {
			return d
		}
	}
	t.Fatalf("plan has no catch-up decision for vec_idx: %+v", p.Indices)
	return plan.IndexDecision{}
}
