package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/lanced-dev/lanced/internal/engine/job"
	"github.com/lanced-dev/lanced/internal/engine/table"
	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// remapRows is the index.RowSource an FM remap rebuilds from: the indexed
// column's live rows of the read version m, of every fragment the old
// segment covers, with their addresses after the rewrite, in address
// order: the fragments no group rewrites first (ascending id: their ids
// are below every reserved new id), then each group's old fragments, in
// the order of the groups' new ids (the mapping sends a group's rows, in
// order, to its new fragments in order). A fragment id of the bitmap that
// the read version does not have was removed before it (ids are never
// reused) unless it is above the read version's max_fragment_id: a
// fragment created since, which the rebuild cannot read (stale).
func remapRows(tbl *table.Table, m *tablepb.Manifest, in *remapIn) index.RowSource {
	return func(ctx context.Context, fn func(values arrow.Array, ids []uint64) error) error {
		bm, err := index.DecodeBitmap(in.seg.GetFragmentBitmap())
		if err != nil || bm == nil {
			return fmt.Errorf("remap index %q (fm): segment without a readable fragment bitmap: %w", in.seg.GetName(), job.ErrUnsupported)
		}
		if m.GetReaderFeatureFlags()&format.FlagStableRowIDs != 0 {
			return fmt.Errorf("remap index %q (fm): a table with stable row ids: %w", in.seg.GetName(), job.ErrUnsupported)
		}
		if len(in.seg.GetFields()) != 1 {
			return fmt.Errorf("remap index %q (fm): index over %d fields: %w", in.seg.GetName(), len(in.seg.GetFields()), job.ErrUnsupported)
		}
		fieldID := in.seg.GetFields()[0]
		col := ""
		for _, f := range m.GetFields() {
			if f.GetId() == fieldID && f.GetParentId() == -1 {
				col = f.GetName()
			}
		}
		if col == "" {
			return fmt.Errorf("remap index %q (fm): field %d is not a top-level column of version %d: %w", in.seg.GetName(), fieldID, m.GetVersion(), job.ErrStale)
		}
		frags := format.FragmentsByID(m)
		top, _ := format.MaxFragmentID(m)
		rewritten := map[uint64]bool{}
		groups := slices.Clone(in.groups)
		slices.SortFunc(groups, func(a, b index.RewriteGroup) int { return int(a.New[0].ID) - int(b.New[0].ID) })
		var order []*tablepb.DataFragment
		var mapped []bool
		for _, g := range groups {
			for _, f := range g.Old {
				rewritten[f.ID] = true
			}
		}
		for _, id := range bm.ToArray() {
			f := frags[uint64(id)]
			switch {
			case rewritten[uint64(id)]:
			case f != nil:
				order, mapped = append(order, f), append(mapped, false)
			case id > top:
				return fmt.Errorf("remap index %q (fm): it covers fragment %d, created after read version %d: %w", in.seg.GetName(), id, m.GetVersion(), job.ErrStale)
			}
		}
		for _, g := range groups {
			for _, of := range g.Old {
				f := frags[of.ID]
				if f == nil {
					return fmt.Errorf("remap index %q (fm): rewritten fragment %d is not in version %d: %w", in.seg.GetName(), of.ID, m.GetVersion(), job.ErrStale)
				}
				order, mapped = append(order, f), append(mapped, true)
			}
		}
		for i, f := range order {
			_, err := scanColumnRows(ctx, tbl.Bucket(), m, f, fieldID, col, func(values arrow.Array, ids []uint64) error {
				if mapped[i] {
					for k, id := range ids {
						n, ok := in.mapping.Map(id)
						if !ok {
							return fmt.Errorf("remap index %q (fm): live row %d:%d has no new address: %w", in.seg.GetName(), id>>32, id&0xffffffff, job.ErrInvariant)
						}
						ids[k] = n
					}
				}
				return fn(values, ids)
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}
