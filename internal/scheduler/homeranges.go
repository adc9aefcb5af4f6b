package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Home ranges (Config.KeepHomeRanges). A range's home is the node whose
// first turn it is (leaseView.rangeRank 0: the live nodes in id order
// take turns over the ranges). A node takes the free ranges whose home
// it is, and keeps them while it runs, even while none of their tables
// has a coordinator: a table of such a range, new or idle for longer
// than LeaseLinger, starts its coordinator without a lease write, and the
// other nodes, whose lease views show the range held, leave it to the
// holder without a lease attempt. A range that is not the node's home is
// released when its last coordinator stops, as without the option; an
// idle range that stopped being home (a node joined or left, which moves
// the turns) is released too, for its new home to take. Each node looks
// every LeaseTTL/12 (its rebalance tick), from the second tick its own
// node record is live in its lease view on, so that nodes started
// together see each other's records before they take ranges. A node
// releases the ranges it kept when it stops.

// tendHomeRanges takes the free home ranges, forgets idle ranges whose
// lease lapsed and releases idle ranges that are not home any more. It
// returns without waiting for the lease writes, which run in wg (a range
// being taken or released is busy: the next pass leaves it alone). live
// is when this node's record was first seen live (zero while it is not).
func (n *Node) tendHomeRanges(ctx context.Context, wg *sync.WaitGroup, live *time.Time) {
	now := n.cfg.Now()
	if !n.view.live(n.cfg.NodeID, now) {
		*live = time.Time{}
		return
	}
	if live.IsZero() {
		*live = now
	}
	if now.Sub(*live) < n.cfg.LeaseTTL/12 {
		return // the records of nodes started with this one may not be in the view yet
	}
	type idle struct {
		rng int
		rs  *rangeState
	}
	var take []idle
	var release, lapsed []idle
	ids := n.view.liveNodes(now) // for every range's turns
	n.mu.Lock()
	for rng := range leaseRanges {
		rs := n.ranges[rng]
		home := n.view.rankAmong(ids, rng, n.cfg.NodeID, now) == 0
		switch {
		case rs == nil:
			if home && !n.view.heldElsewhere(rangeKey(rng), n.cfg.NodeID, now) {
				rs = &rangeState{busy: true, tables: map[string]*tableState{}}
				n.ranges[rng] = rs
				take = append(take, idle{rng, rs})
			}
		case rs.busy || rs.lease == nil || len(rs.tables) > 0:
		case !rs.lease.valid(now, 0):
			rs.busy = true
			lapsed = append(lapsed, idle{rng, rs})
		case !home:
			rs.busy = true
			release = append(release, idle{rng, rs})
		}
	}
	n.mu.Unlock()
	for _, r := range lapsed {
		r.rs.stop(ErrLeaseLost)
		n.dropRange(r.rng, r.rs, false)
	}
	for _, r := range take {
		wg.Go(func() { n.acquireRange(ctx, wg, r.rng, r.rs, "") })
	}
	for _, r := range release {
		wg.Go(func() { n.releaseRange(ctx, r.rng, r.rs) })
	}
}

// keepRangeLocked reports whether a range held here whose last
// coordinator stopped stays held: the node keeps home ranges, the range
// is its home and its lease is valid. n.mu is held.
func (n *Node) keepRangeLocked(rng int) bool {
	if !n.cfg.KeepHomeRanges {
		return false
	}
	now := n.cfg.Now()
	rs := n.ranges[rng]
	return rs != nil && rs.lease != nil && rs.lease.valid(now, n.cfg.LeaseTTL/6) &&
		n.view.rangeRank(rng, n.cfg.NodeID, now) == 0
}

// releaseKeptRanges releases, when the node stops, the ranges it kept
// without a coordinator (every coordinator has stopped).
func (n *Node) releaseKeptRanges() {
	n.mu.Lock()
	var kept []int
	for rng, rs := range n.ranges {
		if rs.lease != nil && !rs.busy && len(rs.tables) == 0 {
			rs.busy = true
			kept = append(kept, rng)
		}
	}
	rss := make([]*rangeState, len(kept))
	for i, rng := range kept {
		rss[i] = n.ranges[rng]
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for i, rng := range kept {
		wg.Go(func() { n.releaseRange(context.Background(), rng, rss[i]) })
	}
	wg.Wait()
}

// HomeNode names the home of table's lease range among the live nodes
// with the given ids (as Config.NodeID): the node whose first turn the
// range is (leaseView.rangeRank), which holds the range and coordinates
// the table when the nodes keep home ranges (Config.KeepHomeRanges) and
// have seen each other's records. It returns "" for no nodes.
func HomeNode(table string, nodes []string) string {
	ids := slices.Clone(nodes)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rng := rangeOf(table)
	for i, id := range ids {
		if turnOf(i, rng, len(ids)) == 0 {
			return id
		}
	}
	return ""
}
