package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Range rebalancing. Every node announces itself in LANCED_LEASES under
// node-<id hash> (a record with its id and a deadline, renewed with its
// leases and deleted when it stops), so every node's lease view knows the
// live nodes, including those holding no range. A node holding at least
// two ranges more than the least loaded live node hands one range to it:
// it stops the range's coordinators (each after its current step; no plan
// starts once it decided), then replaces its lease record, by a
// compare-and-set on its revision, with one naming no holder, the node it
// hands to and until when the range is reserved for it, and the tables it
// coordinated with their tasks in flight. The receiving node's watch sees
// the record and queues those tables; it takes the lease like an expired
// one and plans them around those tasks. So a range is released by its
// holder before another node takes it, and a node that joins gets ranges
// while the others are busy. Each node hands off one range at a time, and
// only to a node at least two ranges below it, so hand-offs end once the
// ranges are spread (no node more than one above another).

// nodeKeyPrefix starts the LANCED_LEASES keys of node records.
const nodeKeyPrefix = "node-"

// nodeKey is the LANCED_LEASES key of a node's record (node ids may hold
// characters KV keys do not allow).
func nodeKey(id string) string { return nodeKeyPrefix + TableID(id) }

// handOffDeadline is how long a handed range stays reserved for the
// node it was handed to; after it, any node may take it (the receiver may
// have died).
func (n *Node) handOffDeadline() time.Duration { return n.cfg.LeaseTTL / 2 }

// putNodeRecord writes (or refreshes) this node's record.
func (n *Node) putNodeRecord(ctx context.Context) error {
	b, _ := json.Marshal(leaseRecord{Holder: n.cfg.NodeID, Expires: n.cfg.Now().Add(n.cfg.LeaseTTL).UnixNano(), BatchPokes: true})
	start := time.Now()
	_, err := n.q.leases.Put(ctx, nodeKey(n.cfg.NodeID), b)
	if err == nil {
		n.leases.noteWrite(time.Since(start))
	}
	return err
}

// deleteNodeRecord removes this node's record when it stops.
func (n *Node) deleteNodeRecord() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.q.leases.Delete(ctx, nodeKey(n.cfg.NodeID)); err != nil {
		n.log.Debug("delete node record", "err", err)
	}
}

// loads counts, for every live node (a node record whose deadline has
// not passed) and every holder of an unexpired range lease, the ranges it
// holds plus those handed to it and not yet taken.
func (v *leaseView) loads(now time.Time) map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]int{}
	t := now.UnixNano()
	for k, r := range v.recs {
		switch {
		case strings.HasPrefix(k, nodeKeyPrefix):
			if r.Holder != "" && t < r.Expires {
				out[r.Holder] += 0
			}
		case k != rangeKey(r.Range):
		case r.Holder != "" && t < r.Expires:
			out[r.Holder]++
		case r.HandOffTo != "" && t < r.HandOffUntil:
			out[r.HandOffTo]++
		}
	}
	return out
}

// batchPokes reports whether every live node hears batched announcements:
// every unexpired node record says so, and every holder of an unexpired
// range lease has such a record (a node without one runs an earlier
// version).
func (v *leaseView) batchPokes(now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := now.UnixNano()
	for k, r := range v.recs {
		switch {
		case strings.HasPrefix(k, nodeKeyPrefix):
			if r.Holder != "" && t < r.Expires && !r.BatchPokes {
				return false
			}
		case k == rangeKey(r.Range) && r.Holder != "" && t < r.Expires:
			if n, ok := v.recs[nodeKey(r.Holder)]; !ok || !n.BatchPokes {
				return false
			}
		}
	}
	return true
}

// rangeRank is node's turn to take the free range under key: the live
// nodes (unexpired node records), in id order, take turns over the
// ranges (range r is first node r mod n's, then the next node's, and so
// on), so nodes that hear the same burst take its ranges evenly, one
// lease write per range, without racing each other for every range or
// handing ranges around afterwards. It is 0 when the range is handed to
// node, or when the view has no record of node (an earlier version, or a
// node whose record is not written yet: it does not wait).
func (v *leaseView) rangeRank(rng int, node string, now time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := now.UnixNano()
	return v.rankLocked(v.liveNodesLocked(t), rng, node, t)
}

// liveNodes is the ids of the live nodes in id order, for rankAmong: a
// pass over many ranges collects and sorts them once.
func (v *leaseView) liveNodes(now time.Time) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.liveNodesLocked(now.UnixNano())
}

// rankAmong is rangeRank with the live nodes taken from ids (liveNodes).
func (v *leaseView) rankAmong(ids []string, rng int, node string, now time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rankLocked(ids, rng, node, now.UnixNano())
}

// liveNodesLocked is liveNodes at t (Unix nanoseconds). v.mu is held.
func (v *leaseView) liveNodesLocked(t int64) []string {
	var ids []string
	for k, r := range v.recs {
		if strings.HasPrefix(k, nodeKeyPrefix) && r.Holder != "" && t < r.Expires {
			ids = append(ids, r.Holder)
		}
	}
	slices.Sort(ids)
	return ids
}

// rankLocked is node's turn at range rng among the live nodes ids (in
// id order) at t (Unix nanoseconds), as rangeRank. v.mu is held.
func (v *leaseView) rankLocked(ids []string, rng int, node string, t int64) int {
	if r, ok := v.recs[rangeKey(rng)]; ok && r.Holder == "" && r.HandOffTo == node && t < r.HandOffUntil {
		return 0
	}
	i, ok := slices.BinarySearch(ids, node)
	if !ok {
		return 0
	}
	return turnOf(i, rng, len(ids))
}

// turnOf is the turn at range rng of the i-th of n live nodes in id
// order: range rng is first node rng mod n's.
func turnOf(i, rng, n int) int { return ((i-rng)%n + n) % n }

// live reports whether the view has an unexpired record of node.
func (v *leaseView) live(node string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.recs[nodeKey(node)]
	return ok && r.Holder == node && now.UnixNano() < r.Expires
}

// rebalance runs every LeaseTTL/12 until ctx ends: it refreshes this
// node's record every LeaseTTL/3 and hands a range to a less loaded node
// when this one holds two more than it (one hand-off at a time).
func (n *Node) rebalance(ctx context.Context, wg *sync.WaitGroup) {
	t := time.NewTicker(n.cfg.LeaseTTL / 12)
	defer t.Stop()
	var recorded, live time.Time
	var handing atomic.Bool
	for {
		if now := n.cfg.Now(); now.Sub(recorded) >= n.cfg.LeaseTTL/3 {
			rctx, cancel := context.WithTimeout(ctx, n.cfg.LeaseTTL/3)
			if err := n.putNodeRecord(rctx); err != nil {
				if ctx.Err() == nil {
					n.log.Warn("write node record", "err", err)
				}
			} else {
				recorded = now
			}
			cancel()
		}
		if n.cfg.KeepHomeRanges {
			n.tendHomeRanges(ctx, wg, &live)
		}
		if handing.CompareAndSwap(false, true) {
			if rng, to, ok := n.handOffChoice(); ok {
				wg.Go(func() {
					defer handing.Store(false)
					n.handOff(ctx, rng, to)
				})
			} else {
				handing.Store(false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handOffChoice picks a range to hand off and the node to hand it to:
// the least loaded live node (fewest ranges, then lowest id), when this
// node holds at least two ranges more; the range with the fewest tasks
// in flight among those held and not being taken or given up. With
// KeepHomeRanges a node's home ranges are not handed off (the receiver
// would give such a range back once its tables idle, and a node that
// kept every range while alone would otherwise hand its busy ranges
// away when another node joins, though releasing the idle ones that are
// no longer its home evens the loads), and a range whose home is the
// receiver goes first.
func (n *Node) handOffChoice() (int, string, bool) {
	now := n.cfg.Now()
	loads := n.view.loads(now)
	var to string
	for node, l := range loads {
		if node == n.cfg.NodeID || !n.view.live(node, now) {
			continue
		}
		if to == "" || l < loads[to] || l == loads[to] && node < to {
			to = node
		}
	}
	if to == "" {
		return 0, "", false
	}
	var ids []string // the live nodes, for every range's turns
	if n.cfg.KeepHomeRanges {
		ids = n.view.liveNodes(now)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	type cand struct {
		rng, inflight int
		away          int // 1 unless the range's home is to
	}
	var cands []cand
	held := 0
	for rng, rs := range n.ranges {
		if rs.lease == nil {
			continue
		}
		held++
		if rs.busy || len(rs.tables) == 0 || !rs.lease.valid(now, n.cfg.LeaseTTL/6) {
			continue
		}
		c := cand{rng: rng}
		if n.cfg.KeepHomeRanges {
			if n.view.rankAmong(ids, rng, n.cfg.NodeID, now) == 0 {
				continue
			}
			if n.view.rankAmong(ids, rng, to, now) != 0 {
				c.away = 1
			}
		}
		for _, st := range rs.tables {
			c.inflight += len(st.inflight)
		}
		cands = append(cands, c)
	}
	if held-loads[to] < 2 || len(cands) == 0 {
		return 0, "", false
	}
	c := slices.MinFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.away, b.away), cmp.Compare(a.inflight, b.inflight), cmp.Compare(a.rng, b.rng))
	})
	return c.rng, to, true
}

// handOff gives the range to node to: its coordinators stop (no plan
// starts once this began; each ends after its current step), then the
// lease record is replaced by a hand-off record naming to and the tables
// with their tasks in flight. If ctx ends first, or the record cannot be
// written, the lease is released instead (deleted if still ours).
func (n *Node) handOff(ctx context.Context, rng int, to string) {
	n.mu.Lock()
	rs := n.ranges[rng]
	if rs == nil || rs.lease == nil || rs.busy || len(rs.tables) == 0 {
		n.mu.Unlock()
		return
	}
	rs.busy = true
	rs.handed = map[string][]string{}
	for _, st := range rs.tables {
		st.stopping = true // no plan starts from now on
		wake(st.wake)
	}
	n.mu.Unlock()
	key := rangeKey(rng)
	n.log.Info("handing range off", "range", key, "to", to)
	// Every coordinator ends: after its current step, or at once when
	// ctx ends (the node stops).
	for {
		n.mu.Lock()
		left := len(rs.tables)
		n.mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	rs.stop(nil)
	n.mu.Lock()
	tables := rs.handed
	for t, keys := range rs.inherited {
		tables[t] = append(tables[t], keys...)
	}
	for _, w := range rs.waiting {
		if _, ok := tables[w.table]; !ok {
			tables[w.table] = nil
		}
	}
	ended := n.endedRecordLocked(tables)
	n.mu.Unlock()
	n.traced(key, "range-")
	handed := false
	if ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := n.leases.handOff(wctx, rs.lease, tables, ended, to, n.cfg.Now().Add(n.handOffDeadline()))
		cancel()
		if err != nil {
			n.log.Warn("hand range off", "range", key, "to", to, "err", err)
		} else {
			handed = true
			n.m.handOffs.Inc()
			n.log.Info("range handed off", "range", key, "to", to, "tables", len(tables))
		}
	}
	if !handed {
		n.releaseLease(ctx, rs.lease)
	}
	n.dropRange(rng, rs, handed)
}

// handedTo queues the tables of a range handed to this node, so it takes
// the range at once (the watch saw the hand-off record).
func (n *Node) handedTo(rec leaseRecord) {
	if n.planner == nil {
		return
	}
	for t := range rec.Tables {
		n.noteVersion(t, 0)
	}
}
