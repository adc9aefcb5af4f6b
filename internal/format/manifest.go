package format

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

// Manifest footer constants: lance 8.0.0 writes the lance-file magic with
// major 0, minor 2.
const (
	manifestMagic      = "LANC"
	manifestFooterSize = 16
	manifestMajor      = 0
	manifestMinor      = 2
)

// Manifest is one decoded manifest file: the manifest message plus its
// optional index and transaction sections. Unknown protobuf fields are kept
// by the messages; IndexSectionRaw keeps the index section byte for byte so
// a re-encode carries index metadata through unchanged.
type Manifest struct {
	// PB is the lance.table.Manifest message.
	PB *tablepb.Manifest
	// Indices is the decoded index section, nil when the version has none.
	Indices *tablepb.IndexSection
	// IndexSectionRaw holds the index section's protobuf bytes exactly as
	// read (nil when absent). EncodeManifest writes these bytes back.
	IndexSectionRaw []byte
	// Txn is the inline transaction, nil when the file has none.
	Txn *tablepb.Transaction
	// TxnRaw holds the inline transaction's bytes exactly as read; they are
	// identical to the version's .txn file in everything lance 8.0.0 writes.
	TxnRaw []byte
	// Size is the size of the manifest file in bytes.
	Size int64
}

// Version returns the manifest's version number.
func (m *Manifest) Version() uint64 { return m.PB.GetVersion() }

// DecodeManifest decodes a whole manifest file. Errors do not name the
// file; use DecodeManifestFile when the key is known.
func DecodeManifest(data []byte) (*Manifest, error) {
	return DecodeManifestFile("", data)
}

// DecodeManifestFile decodes a whole manifest file read from name (used only
// in error messages). It checks the layout exactly as Lance does: the LANC
// magic, the footer's position, that the manifest's length prefix ends
// exactly at the footer, and that the index and transaction sections lie
// inside the file.
func DecodeManifestFile(name string, data []byte) (*Manifest, error) {
	if len(data) < manifestFooterSize+4 {
		return nil, corruptf("manifest", name, "truncated: %d bytes, need at least %d", len(data), manifestFooterSize+4)
	}
	footer := data[len(data)-manifestFooterSize:]
	if string(footer[12:16]) != manifestMagic {
		return nil, corruptf("manifest", name, "bad magic %q, want %q", footer[12:16], manifestMagic)
	}
	pos := int64(binary.LittleEndian.Uint64(footer[0:8]))
	major := binary.LittleEndian.Uint16(footer[8:10])
	minor := binary.LittleEndian.Uint16(footer[10:12])
	if major != manifestMajor {
		return nil, corruptf("manifest", name, "unsupported footer version %d.%d", major, minor)
	}
	bodyEnd := int64(len(data) - manifestFooterSize)
	if pos < 0 || pos+4 > bodyEnd {
		return nil, corruptf("manifest", name, "manifest position %d outside the file (%d bytes)", pos, len(data))
	}
	n := int64(binary.LittleEndian.Uint32(data[pos : pos+4]))
	if pos+4+n != bodyEnd {
		return nil, corruptf("manifest", name, "manifest length %d at %d does not end at the footer (%d bytes follow)", n, pos, bodyEnd-pos-4)
	}
	m := &Manifest{PB: &tablepb.Manifest{}, Size: int64(len(data))}
	if err := proto.Unmarshal(data[pos+4:bodyEnd], m.PB); err != nil {
		return nil, corruptf("manifest", name, "decode manifest protobuf: %v", err)
	}
	if off := m.PB.IndexSection; off != nil {
		raw, err := section(data, *off, pos)
		if err != nil {
			return nil, corruptf("manifest", name, "index section: %v", err)
		}
		m.IndexSectionRaw = raw
		m.Indices = &tablepb.IndexSection{}
		if err := proto.Unmarshal(raw, m.Indices); err != nil {
			return nil, corruptf("manifest", name, "decode index section protobuf: %v", err)
		}
	}
	if off := m.PB.TransactionSection; off != nil {
		raw, err := section(data, *off, pos)
		if err != nil {
			return nil, corruptf("manifest", name, "transaction section: %v", err)
		}
		m.TxnRaw = raw
		m.Txn = &tablepb.Transaction{}
		if err := proto.Unmarshal(raw, m.Txn); err != nil {
			return nil, corruptf("manifest", name, "decode transaction section protobuf: %v", err)
		}
	}
	if m.PB.Version == 0 {
		return nil, corruptf("manifest", name, "version is 0")
	}
	return m, nil
}

// section returns the length-prefixed message at off, which must end at or
// before limit (the manifest's own prefix).
func section(data []byte, off uint64, limit int64) ([]byte, error) {
	if off > uint64(limit) || int64(off)+4 > limit {
		return nil, fmt.Errorf("offset %d outside the sections (which end at %d)", off, limit)
	}
	n := int64(binary.LittleEndian.Uint32(data[off : off+4]))
	start := int64(off) + 4
	if start+n > limit {
		return nil, fmt.Errorf("length %d at offset %d runs past the sections (which end at %d)", n, off, limit)
	}
	return data[start : start+n], nil
}

// marshalOpts serializes deterministically (sorted map keys), so equal
// messages give equal bytes.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

// MarshalTransaction serializes a transaction the way it is stored both in
// _transactions/*.txn and as the inline transaction section.
func MarshalTransaction(t *tablepb.Transaction) ([]byte, error) {
	b, err := marshalOpts.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("format: encode transaction: %w", err)
	}
	return b, nil
}

// EncodeManifest writes a manifest file in the layout lance 8.0.0 writes:
// [u32 len][index section] (when indexSection != nil), [u32 len][transaction]
// (when txn != nil), [u32 len][manifest], then the 16-byte footer
// (i64 position of the manifest prefix, u16 major 0, u16 minor 2, "LANC").
//
// indexSection and txn are raw protobuf bytes, written as given (pass the
// same txn bytes that go to the .txn file). EncodeManifest sets
// m.IndexSection and m.TransactionSection to the section offsets (explicit
// zero included) or clears them when the section is absent; it changes no
// other field.
func EncodeManifest(m *tablepb.Manifest, indexSection, txn []byte) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("format: encode manifest: nil manifest")
	}
	size := 0
	if indexSection != nil {
		size += 4 + len(indexSection)
	}
	if txn != nil {
		size += 4 + len(txn)
	}
	m.IndexSection, m.TransactionSection = nil, nil
	out := make([]byte, 0, size+4+manifestFooterSize)
	if indexSection != nil {
		off := uint64(len(out))
		m.IndexSection = &off
		out = appendPrefixed(out, indexSection)
	}
	if txn != nil {
		off := uint64(len(out))
		m.TransactionSection = &off
		out = appendPrefixed(out, txn)
	}
	body, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("format: encode manifest version %d: %w", m.GetVersion(), err)
	}
	if len(body) > math.MaxUint32 {
		return nil, fmt.Errorf("format: encode manifest version %d: %d bytes is too large", m.GetVersion(), len(body))
	}
	pos := uint64(len(out))
	out = appendPrefixed(out, body)
	out = binary.LittleEndian.AppendUint64(out, pos)
	out = binary.LittleEndian.AppendUint16(out, manifestMajor)
	out = binary.LittleEndian.AppendUint16(out, manifestMinor)
	out = append(out, manifestMagic...)
	return out, nil
}

func appendPrefixed(out, msg []byte) []byte {
	out = binary.LittleEndian.AppendUint32(out, uint32(len(msg)))
	return append(out, msg...)
}

// Encode re-encodes a decoded manifest with its raw index and transaction
// sections.
func (m *Manifest) Encode() ([]byte, error) {
	return EncodeManifest(m.PB, m.IndexSectionRaw, m.TxnRaw)
}
