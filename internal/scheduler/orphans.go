package scheduler

import (
	"context"
)

// sweepOrphans finds tables whose coordinator went away with work left
// over and marks them dirty, so a live node takes the range lease and
// finishes:
//   - results waiting in LANCED_RESULTS for a table nobody here coordinates
//     (the holder died after its tasks were queued);
//   - expired range leases (the holder died, perhaps before it queued
//     anything): the tables its last renewal listed, or else one table of
//     the range this node heard of, so the range is taken over (which
//     looks at every table of it again).
//
// The poll source only announces tables whose version changed, so without
// this sweep such a table would wait for its next commit.
func (n *Node) sweepOrphans(ctx context.Context) {
	if n.planner == nil {
		return
	}
	// The node's last results poll (at most resultPoll old).
	for id := range n.results.snapshot() {
		if n.coordinatesID(id) || n.view.heldElsewhere(rangeKey(rangeOfID(id)), n.cfg.NodeID, n.cfg.Now()) {
			continue // its coordinator (here or elsewhere) reads them
		}
		m, err := n.q.results.GetLastMsgForSubject(ctx, resultSubjectPrefix+id)
		if err != nil {
			continue
		}
		if table := m.Header.Get(hdrTable); table != "" && TableID(table) == id {
			n.noteVersion(table, 0)
		}
	}
	// Expired leases, from the node's view of the lease bucket (kept by
	// its watch): no read per lease.
	for _, rec := range n.view.expired(n.cfg.Now()) {
		n.mu.Lock()
		_, ours := n.ranges[rec.Range]
		var tables []string
		if !ours {
			for t := range rec.Tables {
				tables = append(tables, t)
			}
			for t, st := range n.tables {
				if len(tables) > 0 {
					break
				}
				if st.rng == rec.Range {
					tables = append(tables, t)
				}
			}
		}
		n.mu.Unlock()
		for _, t := range tables {
			n.noteVersion(t, 0)
		}
	}
}

// coordinatesID reports whether this node runs the coordinator of the
// table with the given id.
func (n *Node) coordinatesID(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.byID[id]
	return st != nil && st.running
}
