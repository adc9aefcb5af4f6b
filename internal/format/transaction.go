package format

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// TransactionsDir is the directory (relative to the table root) of .txn files.
const TransactionsDir = "_transactions"

// NewTransaction returns a transaction with a fresh v4 uuid reading from
// readVersion; set its Operation before committing.
func NewTransaction(readVersion uint64) *tablepb.Transaction {
	return &tablepb.Transaction{ReadVersion: readVersion, Uuid: uuid.NewString()}
}

// TransactionFileName returns "{read_version}-{uuid}.txn", the name stored
// in Manifest.transaction_file (relative to _transactions/).
func TransactionFileName(t *tablepb.Transaction) string {
	return strconv.FormatUint(t.GetReadVersion(), 10) + "-" + t.GetUuid() + ".txn"
}

// TransactionKey returns the key of a transaction file relative to the
// table root, "_transactions/{read_version}-{uuid}.txn".
func TransactionKey(t *tablepb.Transaction) string {
	return TransactionsDir + "/" + TransactionFileName(t)
}

// TransactionKeyFromManifest returns the key of the manifest's transaction
// file, or "" when it records none.
func TransactionKeyFromManifest(m *tablepb.Manifest) string {
	if m.GetTransactionFile() == "" {
		return ""
	}
	return TransactionsDir + "/" + m.GetTransactionFile()
}

// ParseTransactionFileName returns the read version and uuid of a .txn
// base name or key.
func ParseTransactionFileName(name string) (readVersion uint64, id string, err error) {
	base := name[strings.LastIndexByte(name, '/')+1:]
	stem, ok := strings.CutSuffix(base, ".txn")
	rv, rest, ok2 := strings.Cut(stem, "-")
	if !ok || !ok2 || rest == "" {
		return 0, "", fmt.Errorf("format: %q is not a transaction file name: %w", base, ErrCorrupt)
	}
	if readVersion, err = strconv.ParseUint(rv, 10, 64); err != nil {
		return 0, "", fmt.Errorf("format: %q is not a transaction file name: %w", base, ErrCorrupt)
	}
	return readVersion, rest, nil
}

// DecodeTransaction decodes a transaction (a .txn file or an inline section
// is a bare protobuf, no prefix, no footer). name is used in errors only.
func DecodeTransaction(name string, data []byte) (*tablepb.Transaction, error) {
	t := &tablepb.Transaction{}
	if err := proto.Unmarshal(data, t); err != nil {
		return nil, corruptf("transaction", name, "decode protobuf: %v", err)
	}
	return t, nil
}

// OperationName returns the name of a transaction's operation as Lance
// spells it ("Append", "Delete", ..., "Unknown" when the oneof is unset,
// for example an operation newer than our protos).
func OperationName(t *tablepb.Transaction) string {
	switch t.GetOperation().(type) {
	case *tablepb.Transaction_Append_:
		return "Append"
	case *tablepb.Transaction_Delete_:
		return "Delete"
	case *tablepb.Transaction_Overwrite_:
		return "Overwrite"
	case *tablepb.Transaction_CreateIndex_:
		return "CreateIndex"
	case *tablepb.Transaction_Rewrite_:
		return "Rewrite"
	case *tablepb.Transaction_Merge_:
		return "Merge"
	case *tablepb.Transaction_Restore_:
		return "Restore"
	case *tablepb.Transaction_ReserveFragments_:
		return "ReserveFragments"
	case *tablepb.Transaction_Update_:
		return "Update"
	case *tablepb.Transaction_Project_:
		return "Project"
	case *tablepb.Transaction_UpdateConfig_:
		return "UpdateConfig"
	case *tablepb.Transaction_DataReplacement_:
		return "DataReplacement"
	case *tablepb.Transaction_UpdateMemWalState_:
		return "UpdateMemWalState"
	case *tablepb.Transaction_Clone_:
		return "Clone"
	case *tablepb.Transaction_UpdateBases_:
		return "UpdateBases"
	default:
		return "Unknown"
	}
}

// UpdateMaxFragmentID raises m.max_fragment_id to the largest fragment id,
// as Lance's update_max_fragment_id: unchanged when there are no fragments,
// never lowered.
func UpdateMaxFragmentID(m *tablepb.Manifest) {
	if len(m.GetFragments()) == 0 {
		return
	}
	var top uint64
	for _, f := range m.GetFragments() {
		top = max(top, f.GetId())
	}
	if m.MaxFragmentId == nil || uint32(top) > m.GetMaxFragmentId() {
		v := uint32(top)
		m.MaxFragmentId = &v
	}
}

// RemoveTombstonedFiles drops data files that hold no field other than
// tombstones (-2), as Lance does when building a manifest (a file with no
// fields at all goes too).
func RemoveTombstonedFiles(m *tablepb.Manifest) {
	for _, fr := range m.GetFragments() {
		drop := 0
		for _, df := range fr.GetFiles() {
			if !holdsLiveField(df) {
				drop++
			}
		}
		if drop == 0 {
			continue // leave the slice alone: it may be shared with another manifest
		}
		kept := make([]*tablepb.DataFile, 0, len(fr.GetFiles())-drop)
		for _, df := range fr.GetFiles() {
			if holdsLiveField(df) {
				kept = append(kept, df)
			}
		}
		fr.Files = kept
	}
}

func holdsLiveField(df *tablepb.DataFile) bool {
	for _, id := range df.GetFields() {
		if id != TombstoneFieldID {
			return true
		}
	}
	return false
}
