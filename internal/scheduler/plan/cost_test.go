package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
	"github.com/lanced-dev/lanced/internal/policy"
)

// TestMinReclaimRatioSkipsHugeFragment: one 10 GB fragment barely over the
// deletion threshold (10.5% deleted) among many small fragments. Without a
// ratio it is rewritten with its neighbours (Lance's behaviour); with
// min_reclaim_ratio = 0.2 it is skipped and the reason carries its numbers
// (~1.05 GB reclaimed of 10 GB read, ~8.95 GB written, ratio 0.117), while the
// small fragments are still merged; the task estimates add up per fragment.
func TestMinReclaimRatioSkipsHugeFragment(t *testing.T) {
	const huge = uint64(10_000_000_000)
	frags := []*tablepb.DataFragment{}
	for i := uint64(0); i < 20; i++ {
		frags = append(frags, small(i, 1000))
	}
	frags = append(frags, frag(20, 2_000_000, 210_000, v20("20.lance", huge, 0, 1)))
	for i := uint64(21); i < 40; i++ {
		frags = append(frags, small(i, 1000))
	}
	m := &tablepb.Manifest{Version: 3, Fields: ab, Fragments: frags}

	base := Compute(Input{Table: "t", Manifest: m, Policy: pol(nil)})
	if d := base.Decisions[20]; d.Action != ActionRewrite {
		t.Fatalf("without a ratio the huge fragment is rewritten as Lance would: %+v", d)
	}
	var est, read uint64
	for _, r := range base.Rewrites {
		est += r.EstBytesRead
		read += r.Bytes
	}
	if est != read || est < huge {
		t.Fatalf("estimated read %d, recorded file bytes %d", est, read)
	}

	p := Compute(Input{Table: "t", Manifest: m, Policy: pol(func(e *policy.Effective) {
		e.Compaction.MinReclaimRatio.Value = 0.2
	})})
	d := p.Decisions[20]
	if d.Action != ActionSkip || d.Cost == nil {
		t.Fatalf("huge fragment: %+v", d)
	}
	wantWrite := huge * (2_000_000 - 210_000) / 2_000_000
	if d.Cost.Read != huge || d.Cost.Write != wantWrite || d.Cost.Reclaimed != huge-wantWrite {
		t.Fatalf("cost %+v, want read %d write %d", *d.Cost, huge, wantWrite)
	}
	for _, want := range []string{"deletions 10.5%", "threshold 10%", fmt.Sprint(huge - wantWrite), fmt.Sprint(huge), fmt.Sprint(wantWrite), "ratio 0.117", "min_reclaim_ratio 0.2"} {
		if !strings.Contains(d.Reason, want) {
			t.Errorf("reason %q lacks %q", d.Reason, want)
		}
	}
	// The small fragments on either side are still merged, each run alone.
	if len(p.Rewrites) != 2 {
		t.Fatalf("rewrites %+v", p.Rewrites)
	}
	for i, r := range p.Rewrites {
		if len(r.Fragments) != 20 && len(r.Fragments) != 19 {
			t.Fatalf("task %d: %v", i, r.Fragments)
		}
		var sum Cost
		for _, id := range r.Fragments {
			dd := p.Decisions[id]
			if dd.Action != ActionRewrite || dd.Cost == nil {
				t.Fatalf("fragment %d: %+v", id, dd)
			}
			sum.add(*dd.Cost)
		}
		if r.EstBytesRead != sum.Read || r.EstBytesWritten != sum.Write || r.EstBytesRead != r.Bytes {
			t.Fatalf("task %d estimates %d/%d, fragments sum %+v, bytes %d", i, r.EstBytesRead, r.EstBytesWritten, sum, r.Bytes)
		}
	}

	// A fragment well over the ratio is still rewritten alone.
	m.Fragments[20] = frag(20, 2_000_000, 1_000_000, v20("20.lance", huge, 0, 1))
	p = Compute(Input{Table: "t", Manifest: m, Policy: pol(func(e *policy.Effective) {
		e.Compaction.MinReclaimRatio.Value = 0.2
	})})
	if d := p.Decisions[20]; d.Action != ActionRewrite || d.Cost.Ratio() != 1 {
		t.Fatalf("50%% deleted: %+v", d)
	}
}
