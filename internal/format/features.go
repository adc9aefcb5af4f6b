package format

import (
	"fmt"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Feature flags of Manifest.reader_feature_flags / writer_feature_flags
// (https://github.com/lancedb/lance/blob/main/rust/lance-table/src/feature_flags.rs).
const (
	FlagDeletionFiles          uint64 = 1
	FlagStableRowIDs           uint64 = 2
	FlagUseV2FormatDeprecated  uint64 = 4
	FlagTableConfig            uint64 = 8
	FlagBasePaths              uint64 = 16
	FlagDisableTransactionFile uint64 = 32
	// KnownFlags is every bit lanced understands; anything above refuses.
	KnownFlags uint64 = FlagDeletionFiles | FlagStableRowIDs | FlagUseV2FormatDeprecated |
		FlagTableConfig | FlagBasePaths | FlagDisableTransactionFile
)

// FeatureError reports feature flags lanced does not know. It wraps
// ErrUnsupportedFeature.
type FeatureError struct {
	// Version is the manifest version carrying the flags.
	Version uint64
	// Writer is true for writer flags, false for reader flags.
	Writer bool
	// Flags is the whole flag word; Unknown the bits beyond KnownFlags.
	Flags, Unknown uint64
}

func (e *FeatureError) Error() string {
	kind := "reader"
	if e.Writer {
		kind = "writer"
	}
	return fmt.Sprintf("format: manifest version %d has unknown %s feature flags %#x (flags %d, known %d): %v",
		e.Version, kind, e.Unknown, e.Flags, KnownFlags, ErrUnsupportedFeature)
}

func (e *FeatureError) Unwrap() error { return ErrUnsupportedFeature }

// CheckReadable refuses a manifest whose reader flags hold an unknown bit.
func CheckReadable(m *tablepb.Manifest) error {
	if u := m.GetReaderFeatureFlags() &^ KnownFlags; u != 0 {
		return &FeatureError{Version: m.GetVersion(), Flags: m.GetReaderFeatureFlags(), Unknown: u}
	}
	return nil
}

// CheckWritable refuses a manifest whose reader or writer flags hold an
// unknown bit: lanced must not commit on top of a table it cannot fully
// interpret.
func CheckWritable(m *tablepb.Manifest) error {
	if err := CheckReadable(m); err != nil {
		return err
	}
	if u := m.GetWriterFeatureFlags() &^ KnownFlags; u != 0 {
		return &FeatureError{Version: m.GetVersion(), Writer: true, Flags: m.GetWriterFeatureFlags(), Unknown: u}
	}
	return nil
}

// StableRowIDs reports whether the table uses stable row ids
// (FlagStableRowIDs on its reader or writer flags).
func StableRowIDs(m *tablepb.Manifest) bool {
	return (m.GetReaderFeatureFlags()|m.GetWriterFeatureFlags())&FlagStableRowIDs != 0
}

// HasRowIDMeta reports whether a fragment carries stable row ids (inline or
// external), Lance's row_id_meta.is_some().
func HasRowIDMeta(f *tablepb.DataFragment) bool {
	return f.GetRowIdSequence() != nil
}

// ApplyFeatureFlags resets and recomputes m's reader and writer flags from
// its content, exactly as Lance's apply_feature_flags does. stableRowIDs
// must be true when the previous version had FlagStableRowIDs (Lance carries
// it through the write config); disableTxnFile when no .txn file is
// written. It fails, like Lance, when some but not all fragments carry row
// ids, or stable row ids are on and a fragment lacks them.
func ApplyFeatureFlags(m *tablepb.Manifest, stableRowIDs, disableTxnFile bool) error {
	var reader, writer uint64
	hasDeletions, anyRowIDs, allRowIDs := false, false, true
	for _, f := range m.GetFragments() {
		if f.GetDeletionFile() != nil {
			hasDeletions = true
		}
		if HasRowIDMeta(f) {
			anyRowIDs = true
		} else {
			allRowIDs = false
		}
	}
	if hasDeletions {
		reader |= FlagDeletionFiles
		writer |= FlagDeletionFiles
	}
	if anyRowIDs || stableRowIDs {
		if !allRowIDs {
			return fmt.Errorf("format: manifest version %d: stable row ids are on but not every fragment has row ids", m.GetVersion())
		}
		reader |= FlagStableRowIDs
		writer |= FlagStableRowIDs
	}
	if len(m.GetConfig()) > 0 {
		writer |= FlagTableConfig
	}
	if len(m.GetBasePaths()) > 0 {
		reader |= FlagBasePaths
		writer |= FlagBasePaths
	}
	if disableTxnFile {
		writer |= FlagDisableTransactionFile
	}
	m.ReaderFeatureFlags, m.WriterFeatureFlags = reader, writer
	return nil
}
