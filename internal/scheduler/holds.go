package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HoldStore keeps holds as table state (see Config.Holds).
type HoldStore interface {
	// Place holds table with reason on behalf of node.
	Place(ctx context.Context, table, reason, node string) error
	// Held reports whether table is held.
	Held(ctx context.Context, table string) (bool, error)
}

// holdRecord is stored in LANCED_HOLDS under the table's id. While the table
// is held no node plans or executes work for it. With Config.Holds the
// table's own hold record is the truth and this bucket only indexes it; an
// operator releases the table with `lanced holds release URI`.
type holdRecord struct {
	Table  string    `json:"table"`
	Reason string    `json:"reason"`
	Node   string    `json:"node"`
	Since  time.Time `json:"since"`
}

func (n *Node) hold(ctx context.Context, table string, cause error) error {
	rec := holdRecord{Table: table, Node: n.cfg.NodeID, Since: n.cfg.Now().UTC()}
	if cause != nil {
		rec.Reason = cause.Error()
	}
	b, _ := json.Marshal(rec)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []error
	if n.cfg.Holds != nil {
		if err := n.cfg.Holds.Place(pctx, table, rec.Reason, rec.Node); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := n.q.holds.Put(pctx, TableID(table), b); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		n.log.Error("hold table failed", "table", table, "err", err, "cause", cause)
		return fmt.Errorf("hold table %s: %w", table, err)
	}
	n.holdView.set(TableID(table), true) // this node stops at once, without waiting for its watch
	n.m.held.WithLabelValues(table).Set(1)
	n.mu.Lock()
	n.state(table).heldCheckedAt = time.Time{} // its coordinator sees the hold at once
	n.mu.Unlock()
	n.log.Error("table held", "table", table, "hold_key", TableID(table), "err", cause)
	return nil
}

// isHeld reports whether the table is held. Errors reading the hold count
// as not held: a hold is a safety net, not a lock.
func (n *Node) isHeld(ctx context.Context, table string) (bool, error) {
	if n.cfg.Holds != nil {
		held, err := n.cfg.Holds.Held(ctx, table)
		if err != nil {
			return false, fmt.Errorf("read hold %s: %w", table, err)
		}
		if held {
			n.m.held.WithLabelValues(table).Set(1)
		} else {
			n.m.held.DeleteLabelValues(table)
			// Released outside the daemon: forget the index entry too.
			if _, err := n.q.holds.Get(ctx, TableID(table)); err == nil {
				_ = n.q.holds.Delete(ctx, TableID(table))
			}
		}
		return held, nil
	}
	if held, ok := n.holdView.lookup(TableID(table)); ok {
		return held, nil
	}
	_, err := n.q.holds.Get(ctx, TableID(table))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read hold %s: %w", table, err)
	}
	return true, nil
}

// holdView is this node's view of LANCED_HOLDS, kept by one watch of the
// bucket, so checking a table's hold before planning it costs no round
// trip. It answers only while its watch runs (synced: the initial values
// were read and the watch did not end); otherwise isHeld reads the bucket.
// Without Config.Holds the bucket is the truth, so the view is as good as
// a read, minus the watch's delivery delay.
type holdView struct {
	mu     sync.Mutex
	synced bool
	held   map[string]bool // TableID → held
}

// lookup returns whether the table with the given id is held, and whether
// the view can answer.
func (v *holdView) lookup(id string) (held, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.held[id], v.synced
}

func (v *holdView) set(id string, held bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if held {
		v.held[id] = true
	} else {
		delete(v.held, id)
	}
}

// watch keeps the view current until ctx ends.
func (v *holdView) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", HoldBucket, err)
	}
	go func() {
		defer func() {
			_ = w.Stop()
			v.mu.Lock()
			v.synced = false
			v.mu.Unlock()
		}()
		for e := range w.Updates() {
			if e == nil {
				v.mu.Lock()
				v.synced = true // the initial values are in
				v.mu.Unlock()
				continue
			}
			v.set(e.Key(), e.Operation() == jetstream.KeyValuePut)
		}
	}()
	return nil
}

// refreshHolds sets lanced_table_held from the bucket, so every node
// reports the same held tables and released ones disappear. With
// Config.Holds, index entries whose table was released are removed.
func (n *Node) refreshHolds(ctx context.Context) error {
	lister, err := n.q.holds.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("list holds: %w", err)
	}
	held := map[string]bool{}
	for key := range lister.Keys() {
		e, err := n.q.holds.Get(ctx, key)
		if err != nil {
			continue
		}
		var rec holdRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Table == "" {
			continue
		}
		if n.cfg.Holds != nil {
			if h, err := n.cfg.Holds.Held(ctx, rec.Table); err == nil && !h {
				_ = n.q.holds.Delete(ctx, key)
				continue
			}
		}
		held[rec.Table] = true
	}
	n.m.held.Reset()
	for t := range held {
		n.m.held.WithLabelValues(t).Set(1)
	}
	return nil
}
