package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// holdRecord is stored in LANCED_HOLDS under the table's id. While it
// exists no node plans or executes work for the table. An operator releases
// the table by deleting the key (nats kv del LANCED_HOLDS <id>) once the
// table was repaired; `lanced run` logs the id when it holds a table.
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
	if _, err := n.q.holds.Put(pctx, TableID(table), b); err != nil {
		return fmt.Errorf("hold table %s: %w", table, err)
	}
	n.m.halted.WithLabelValues(table).Set(1)
	n.log.Error("table held", "table", table, "hold_key", TableID(table), "err", cause)
	return nil
}

// isHeld reports whether the table is held. Errors reading the bucket count
// as not held: a hold is a safety net, not a lock.
func (n *Node) isHeld(ctx context.Context, table string) (bool, error) {
	_, err := n.q.holds.Get(ctx, TableID(table))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read hold %s: %w", table, err)
	}
	return true, nil
}

// refreshHolds sets lanced_table_halted from the bucket, so every node
// reports the same held tables and released ones disappear.
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
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Table != "" {
			held[rec.Table] = true
		}
	}
	n.m.halted.Reset()
	for t := range held {
		n.m.halted.WithLabelValues(t).Set(1)
	}
	return nil
}
