package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLeaseLost is returned when a renewal finds the lease taken or gone.
var ErrLeaseLost = errors.New("lease lost")

// leaseRanges is the number of hash ranges tables are leased in: a
// node coordinates every table of the ranges it holds, so a burst over
// many tables costs one lease write per range, not per table. Every node
// of a cluster must use the same number (it is not configurable) or two
// nodes could coordinate one table under different ranges.
const leaseRanges = 64

// rangeOf is the lease range of a table.
func rangeOf(table string) int { return rangeOfID(TableID(table)) }

// rangeOfID is the lease range of the table with the given TableID (the
// id in its result subjects).
func rangeOfID(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % leaseRanges)
}

// rangeKey is the LANCED_LEASES key of a lease range.
func rangeKey(r int) string { return fmt.Sprintf("range-%02d", r) }

// leaseRecord is the value stored under a range's key in LANCED_LEASES.
type leaseRecord struct {
	Holder  string `json:"holder"`
	Range   int    `json:"range"`
	Expires int64  `json:"expires_unix_nano"`
	// Tables lists the tables of the range the holder coordinated at its
	// last renewal, each with the keys of the tasks it enqueued and has
	// not yet committed, so a node taking over knows which tables to look
	// at and can tell the planner what is running.
	Tables map[string][]string `json:"tables,omitempty"`
	// The tasks of the range's tables whose copies ended without being
	// committed (endedTasks).
	endedTasks
	// A range handed off by its holder (see rebalance.go) has no Holder;
	// HandOffTo names the node it was handed to, which alone may take it
	// before HandOffUntil; HandOffFrom names the node that gave it up.
	HandOffTo    string `json:"hand_off_to,omitempty"`
	HandOffFrom  string `json:"hand_off_from,omitempty"`
	HandOffUntil int64  `json:"hand_off_until_unix_nano,omitempty"`
	// BatchPokes, in a node record, says that the node hears batched
	// announcements (lanced.pokes).
	BatchPokes bool `json:"batch_pokes,omitempty"`
}

// endedTasks is what a range's lease record carries of its tables' tasks
// that ended without being committed, so a node taking the range over
// treats them as the holder did.
type endedTasks struct {
	// Redo lists, per table, the keys of tasks whose copy ended without
	// being committed inside the task stream's duplicate window, each
	// with that copy's task stream sequence: planned again, the task is
	// published as the attempt named after it (attemptID,
	// tableState.redo).
	Redo map[string]map[string]uint64 `json:"redo,omitempty"`
	// Abandoned lists, per table, the keys of tasks that were abandoned,
	// each with its read version: not queued again at that version
	// (tableState.abandoned). Nodes of earlier versions ignore it.
	Abandoned map[string]map[string]uint64 `json:"abandoned,omitempty"`
}

// lease is a held coordinator lease of one range. The renewal loop
// updates rev and expires while coordinators read them, hence the mutex.
type lease struct {
	rng int
	key string

	// op orders renewals and the release of this lease, so a release
	// always names the revision of the last renewal.
	op sync.Mutex
	// renewing is set while the node's renewal loop has a renewal of this
	// lease under way.
	renewing atomic.Bool

	mu      sync.Mutex
	rev     uint64
	expires time.Time
}

// renewDue reports whether a third of the TTL passed since the lease was
// taken or last renewed.
func (l *lease) renewDue(now time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires.Sub(now) <= ttl-ttl/3
}

// valid reports whether the holder may still act on the lease: it stops a
// safety margin before the deadline other nodes use.
func (l *lease) valid(now time.Time, margin time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.expires.Add(-margin))
}

func (l *lease) revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// leaser takes, renews and releases range leases for one node.
type leaser struct {
	kv   jetstream.KeyValue
	node string
	ttl  time.Duration
	now  func() time.Time
	// rtt is a moving average of this node's writes to the lease bucket
	// (nanoseconds; 0 before the first).
	rtt atomic.Int64
}

// noteWrite adds the duration of a write to the lease bucket to rtt.
func (l *leaser) noteWrite(d time.Duration) {
	old := l.rtt.Load()
	if old == 0 {
		l.rtt.Store(int64(d))
		return
	}
	l.rtt.Store(old + (int64(d)-old)/4)
}

// turn is how long a node waits per turn before it takes a free range
// whose turn is another node's (leaseView.rangeRank): leaseTurn, or twice
// the recent lease write round trip when that is longer (on a loaded
// cluster the other node's write takes longer to show in the view).
func (l *leaser) turn() time.Duration {
	return max(leaseTurn, 2*time.Duration(l.rtt.Load()))
}

func (l *leaser) record(rng int, tables map[string][]string, ended endedTasks) ([]byte, time.Time) {
	exp := l.now().Add(l.ttl)
	b, _ := json.Marshal(leaseRecord{Holder: l.node, Range: rng, Expires: exp.UnixNano(), Tables: tables, endedTasks: ended})
	return b, exp
}

// acquire takes the range's lease if it is free or expired. It returns
// (nil, rec, nil) when another node holds it; rec is that node's record.
// On takeover, the previous holder's record is returned alongside the lease.
// freeRev, when not 0, is the revision of the delete marker the node's
// lease view last saw for the key (a released lease): the lease is then
// written in one compare-and-set on it.
func (l *leaser) acquire(ctx context.Context, rng int, freeRev uint64) (*lease, *leaseRecord, error) {
	key := rangeKey(rng)
	val, exp := l.record(rng, nil, endedTasks{})
	start := time.Now()
	defer func() { l.noteWrite(time.Since(start)) }()
	if freeRev > 0 {
		if rev, err := l.kv.Update(ctx, key, val, freeRev); err == nil {
			return &lease{rng: rng, key: key, rev: rev, expires: exp}, nil, nil
		}
		// Taken or released again since: the full path below decides.
	}
	// No lease, or a released one: one create (three round trips on a
	// released key, one on a new one).
	rev, err := l.kv.Create(ctx, key, val)
	switch {
	case err == nil:
		return &lease{rng: rng, key: key, rev: rev, expires: exp}, nil, nil
	case !errors.Is(err, jetstream.ErrKeyExists):
		return nil, nil, fmt.Errorf("create lease %s: %w", key, err)
	}
	entry, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil, nil // released meanwhile: the next attempt creates it
	case err != nil:
		return nil, nil, fmt.Errorf("read lease %s: %w", key, err)
	}
	var cur leaseRecord
	if err := json.Unmarshal(entry.Value(), &cur); err != nil {
		// An unreadable record cannot be honoured; treat it as expired.
		cur = leaseRecord{}
	}
	if cur.Holder != "" && l.now().UnixNano() < cur.Expires {
		return nil, &cur, nil
	}
	rev, err = l.kv.Update(ctx, key, val, entry.Revision())
	if err != nil {
		if isWrongRevision(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("take over lease %s: %w", key, err)
	}
	return &lease{rng: rng, key: key, rev: rev, expires: exp}, &cur, nil
}

// renew extends a held lease with a compare-and-set on its revision and
// records the range's coordinated tables with their in-flight task keys
// and their ended tasks (endedTasks).
func (l *leaser) renew(ctx context.Context, ls *lease, tables map[string][]string, ended endedTasks) error {
	ls.op.Lock()
	defer ls.op.Unlock()
	val, exp := l.record(ls.rng, tables, ended)
	start := time.Now()
	rev, err := l.kv.Update(ctx, ls.key, val, ls.revision())
	l.noteWrite(time.Since(start))
	if err != nil {
		if isWrongRevision(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("renew lease %s: %w", ls.key, ErrLeaseLost)
		}
		return fmt.Errorf("renew lease %s: %w", ls.key, err)
	}
	ls.mu.Lock()
	ls.rev, ls.expires = rev, exp
	ls.mu.Unlock()
	return nil
}

// handOff replaces the held lease's record, if it is still ours, by one
// naming no holder that reserves the range for node to until until and
// lists the tables with their tasks in flight.
func (l *leaser) handOff(ctx context.Context, ls *lease, tables map[string][]string, ended endedTasks, to string, until time.Time) error {
	ls.op.Lock()
	defer ls.op.Unlock()
	b, _ := json.Marshal(leaseRecord{Range: ls.rng, Expires: l.now().UnixNano(), Tables: tables, endedTasks: ended,
		HandOffTo: to, HandOffFrom: l.node, HandOffUntil: until.UnixNano()})
	if _, err := l.kv.Update(ctx, ls.key, b, ls.revision()); err != nil {
		return fmt.Errorf("hand off lease %s: %w", ls.key, err)
	}
	return nil
}

// release deletes the lease if it is still ours.
func (l *leaser) release(ctx context.Context, ls *lease) error {
	ls.op.Lock()
	defer ls.op.Unlock()
	err := l.kv.Delete(ctx, ls.key, jetstream.LastRevision(ls.revision()))
	if err != nil && !isWrongRevision(err) {
		return fmt.Errorf("release lease %s: %w", ls.key, err)
	}
	return nil
}

func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// leaseView is this node's view of LANCED_LEASES, fed by one watch of the
// bucket: which node holds which table, until when. It only lets a node
// skip a table that another node coordinates without a round trip per
// announcement; taking a lease always goes through the bucket (acquire).
// A record counts only until its deadline, so a view that fell behind
// (a watch interrupted) errs towards asking the bucket.
type leaseView struct {
	mu   sync.Mutex
	recs map[string]leaseRecord // range key → record
	// freed holds the revision of each released lease's delete marker.
	freed map[string]uint64
	// node is this node's id; handedTo, when set, is called (outside mu)
	// with each range record the watch sees handed to node.
	node     string
	handedTo func(leaseRecord)
}

// freeRevision returns the revision of the table's delete marker when the
// view last saw its lease released, else 0.
func (v *leaseView) freeRevision(id string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.freed[id]
}

// heldElsewhere reports whether the view has an unexpired lease under key
// held by a node other than node, or a range handed to another node and
// still reserved for it.
func (v *leaseView) heldElsewhere(id, node string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.recs[id]
	if !ok {
		return false
	}
	if r.Holder == "" && r.HandOffTo != "" {
		return r.HandOffTo != node && now.UnixNano() < r.HandOffUntil
	}
	return r.Holder != node && now.UnixNano() < r.Expires
}

// legacyHolder returns the node holding an unexpired per-table lease of
// the table (key: its TableID), if one other than node does: lanced
// versions before range leases leased single tables under that key and do
// not see range leases.
func (v *leaseView) legacyHolder(table, node string, now time.Time) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.recs[TableID(table)]
	if !ok || r.Holder == "" || r.Holder == node || now.UnixNano() >= r.Expires {
		return "", false
	}
	return r.Holder, true
}

// expired returns the range leases whose deadline passed.
func (v *leaseView) expired(now time.Time) []leaseRecord {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []leaseRecord
	for k, r := range v.recs {
		if r.Expires < now.UnixNano() && k == rangeKey(r.Range) {
			out = append(out, r)
		}
	}
	return out
}

// watch keeps the view current until ctx ends.
func (v *leaseView) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", LeaseBucket, err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil {
				continue // the initial values are in
			}
			var r leaseRecord
			put := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &r) == nil
			handed := put && r.Holder == "" && r.HandOffTo != "" && r.HandOffTo == v.node && v.handedTo != nil
			v.mu.Lock()
			if put {
				v.recs[e.Key()] = r
				delete(v.freed, e.Key())
			} else {
				delete(v.recs, e.Key())
				if e.Operation() == jetstream.KeyValueDelete {
					v.freed[e.Key()] = e.Revision()
				} else {
					delete(v.freed, e.Key())
				}
			}
			v.mu.Unlock()
			if handed {
				v.handedTo(r)
			}
		}
	}()
	return nil
}
