package table

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format"
	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// ErrConfigConflict: a concurrent commit changed the same config keys (or
// overwrote or restored the table), so our config update was not applied.
var ErrConfigConflict = errors.New("concurrent commit touches the same config")

// configAttempts bounds SetConfig's rebase-and-retry loop (Lance's default
// commit retries).
const configAttempts = 20

// UpdateConfigTxn returns an UpdateConfig transaction (the new-style
// config_updates map, replace=false) that sets set and removes unset.
func UpdateConfigTxn(readVersion uint64, set map[string]string, unset []string) *tablepb.Transaction {
	upd := &tablepb.Transaction_UpdateMap{}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := set[k]
		upd.UpdateEntries = append(upd.UpdateEntries, &tablepb.Transaction_UpdateMapEntry{Key: k, Value: &v})
	}
	for _, k := range unset {
		upd.UpdateEntries = append(upd.UpdateEntries, &tablepb.Transaction_UpdateMapEntry{Key: k})
	}
	txn := format.NewTransaction(readVersion)
	txn.Operation = &tablepb.Transaction_UpdateConfig_{UpdateConfig: &tablepb.Transaction_UpdateConfig{ConfigUpdates: upd}}
	return txn
}

// applyConfigTxn applies an UpdateConfig's config_updates to a copy of the
// latest manifest, as Lance's apply_update_map does.
func applyConfigTxn(txn *tablepb.Transaction) ManifestBuilder {
	return func(latest *format.Manifest) (*tablepb.Manifest, error) {
		next := proto.Clone(latest.PB).(*tablepb.Manifest)
		upd := txn.GetUpdateConfig().GetConfigUpdates()
		if upd.GetReplace() {
			next.Config = map[string]string{}
		}
		if next.Config == nil {
			next.Config = map[string]string{}
		}
		for _, e := range upd.GetUpdateEntries() {
			if e.Value == nil {
				delete(next.Config, e.GetKey())
			} else {
				next.Config[e.GetKey()] = e.GetValue()
			}
		}
		return next, nil
	}
}

// configKeys returns the config keys an UpdateConfig or Overwrite touches.
func configKeys(t *tablepb.Transaction) map[string]bool {
	keys := map[string]bool{}
	if uc := t.GetUpdateConfig(); uc != nil {
		for _, e := range uc.GetConfigUpdates().GetUpdateEntries() {
			keys[e.GetKey()] = true
		}
		for k := range uc.GetUpsertValues() {
			keys[k] = true
		}
		for _, k := range uc.GetDeleteKeys() {
			keys[k] = true
		}
	}
	if ow := t.GetOverwrite(); ow != nil {
		for k := range ow.GetConfigUpsertValues() {
			keys[k] = true
		}
	}
	return keys
}

// configCompatible reports whether our config update may rebase over a
// committed transaction (Lance's check_update_config_txn, made stricter:
// any Overwrite or Restore, or an unknown transaction, stops us).
func configCompatible(ours map[string]bool, c CommittedTxn) error {
	if c.Txn == nil {
		return fmt.Errorf("version %d: transaction unknown (%v): %w", c.Version, c.Err, ErrConfigConflict)
	}
	switch c.Txn.GetOperation().(type) {
	case *tablepb.Transaction_Overwrite_, *tablepb.Transaction_Restore_, nil:
		return fmt.Errorf("version %d: %s: %w", c.Version, format.OperationName(c.Txn), ErrConfigConflict)
	case *tablepb.Transaction_UpdateConfig_:
		for k := range configKeys(c.Txn) {
			if ours[k] {
				return fmt.Errorf("version %d: UpdateConfig of key %q: %w", c.Version, k, ErrConfigConflict)
			}
		}
	}
	return nil
}

// SetConfig commits an UpdateConfig that sets set and removes unset,
// rebasing over concurrent commits that do not touch the same keys (up to 20
// attempts, jittered backoff). It returns the committed manifest.
func (t *Table) SetConfig(ctx context.Context, set map[string]string, unset []string) (*format.Manifest, error) {
	read, err := t.LatestVersion(ctx)
	if err != nil {
		return nil, err
	}
	txn := UpdateConfigTxn(read, set, unset)
	ours := configKeys(txn)
	base := read
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		m, err := t.Commit(ctx, base, txn, applyConfigTxn(txn))
		var ce *ConflictError
		if !errors.As(err, &ce) {
			return m, err
		}
		for _, c := range ce.Committed {
			if err := configCompatible(ours, c); err != nil {
				return nil, fmt.Errorf("set config on %s: %w", t.b.URI(), err)
			}
		}
		if attempt == configAttempts {
			return nil, fmt.Errorf("set config on %s: gave up after %d attempts: %w", t.b.URI(), attempt, err)
		}
		base = ce.LatestCommitted()
		// A fresh uuid per attempt: the lost attempt's .txn name is gone,
		// but a new name never collides with a concurrent cleanup.
		txn.Uuid = format.NewTransaction(0).Uuid
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// ConfigUnchanged reports whether setting set and removing unset would leave
// cfg as it is: every key in set already holds its value and no key in unset
// is present.
func ConfigUnchanged(cfg map[string]string, set map[string]string, unset []string) bool {
	for k, v := range set {
		if cur, ok := cfg[k]; !ok || cur != v {
			return false
		}
	}
	for _, k := range unset {
		if _, ok := cfg[k]; ok {
			return false
		}
	}
	return true
}

// UpdateConfig is SetConfig that commits nothing when the latest version's
// config already matches (committed false, the latest manifest returned).
func (t *Table) UpdateConfig(ctx context.Context, set map[string]string, unset []string) (m *format.Manifest, committed bool, err error) {
	latest, err := t.Latest(ctx)
	if err != nil {
		return nil, false, err
	}
	if ConfigUnchanged(latest.PB.GetConfig(), set, unset) {
		return latest, false, nil
	}
	m, err = t.SetConfig(ctx, set, unset)
	return m, err == nil, err
}
