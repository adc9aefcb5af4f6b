package plan

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// FuzzCompute feeds arbitrary manifests (corrupt schemas, parent cycles,
// odd file versions and field ids) to the planner: it must never panic and
// must give every fragment one decision.
func FuzzCompute(f *testing.F) {
	seeds := []*tablepb.Manifest{
		manifest(3, abcde, backfilled(0), backfilled(1)),
		manifest(4, project(abcde, 2), backfilled(0), deleted(1, 100, 50), small(2, 10), small(3, 10)),
		manifest(5, fields(top(0, "s"), child(1, "x", 0), child(2, "y", 0), top(3, "b")),
			frag(0, 4, 0, v20("a", 1, 0, 1, rowIDField), v20("b", 1, 0, 2), v20("c", 1, 3)), frag(1, 4, 0, legacy("l", 0, 1, 2, 3))),
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxFiles uint8) {
		m := &tablepb.Manifest{}
		if err := proto.Unmarshal(data, m); err != nil {
			return
		}
		if len(m.GetFragments()) > 1000 {
			return
		}
		e := policy.LanceDefaults("t")
		e.Compaction.TargetRowsPerFragment.Value = 100
		e.Compaction.IndexCoverage.Value = policy.CoverageUnindex
		e.Repack.MaxDataFilesPerFragment.Value = uint64(maxFiles)
		if maxFiles%2 == 0 {
			e.Repack.ColumnGroups.Value = [][]string{{"a", "s"}, {"b"}}
		}
		p := Compute(Input{Table: "t", Manifest: m, Policy: e})
		if len(p.Decisions) != len(m.GetFragments()) {
			t.Fatalf("%d decisions for %d fragments", len(p.Decisions), len(m.GetFragments()))
		}
	})
}
