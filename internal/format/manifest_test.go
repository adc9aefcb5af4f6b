package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lanced-dev/lanced/internal/format/pb/tablepb"
)

func readTestdata(t testing.TB, pattern string) (string, []byte) {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(matches) != 1 {
		t.Fatalf("testdata %s: %v matches (%v)", pattern, matches, err)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return matches[0], b
}

func TestDecodeLanceManifests(t *testing.T) {
	// appends_v2 v6 (= 18446744073709551609) has an index section and an
	// inline transaction identical to its .txn file.
	name, data := readTestdata(t, "appends_v2/18446744073709551609.manifest")
	m, err := DecodeManifestFile(name, data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 6 {
		t.Fatalf("version = %d, want 6", m.Version())
	}
	if m.Indices == nil || len(m.Indices.GetIndices()) != 1 || m.Indices.GetIndices()[0].GetName() != "id_idx" {
		t.Fatalf("indices = %v", m.Indices)
	}
	if m.PB.GetIndexSection() != 0 {
		t.Fatalf("index section at %d, want 0", m.PB.GetIndexSection())
	}
	_, txn := readTestdata(t, "appends_v2/5-*.txn")
	if !bytes.Equal(m.TxnRaw, txn) {
		t.Fatalf("inline transaction differs from the .txn file")
	}
	if m.Txn.GetReadVersion() != 5 || m.PB.GetTransactionFile() != filepath.Base(mustGlob(t, "appends_v2/5-*.txn")) {
		t.Fatalf("txn read_version %d, transaction_file %q", m.Txn.GetReadVersion(), m.PB.GetTransactionFile())
	}
	if got := len(m.PB.GetFragments()); got != 2 {
		t.Fatalf("fragments = %d, want 2", got)
	}
	if w := m.PB.GetWriterVersion(); w.GetLibrary() != "lance" || w.GetVersion() != "8.0.0" {
		t.Fatalf("writer version %v", w)
	}
	// Every version decodes; v1 has no index section.
	for v := uint64(1); v <= 6; v++ {
		name, data := readTestdata(t, "appends_v2/"+ManifestName(NamingV2, v))
		m, err := DecodeManifestFile(name, data)
		if err != nil {
			t.Fatal(err)
		}
		if m.Version() != v {
			t.Fatalf("%s: version %d", name, m.Version())
		}
		if m.Txn == nil {
			t.Fatalf("%s: no inline transaction", name)
		}
	}
}

func mustGlob(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join("testdata", pattern))
	if len(m) != 1 {
		t.Fatalf("glob %s: %v", pattern, m)
	}
	return m[0]
}

// Re-encoding a manifest real Lance wrote gives back the same bytes.
func TestEncodeManifestReproducesLanceBytes(t *testing.T) {
	files, _ := filepath.Glob("testdata/*/*.manifest")
	if len(files) < 8 {
		t.Fatalf("only %d manifests in testdata", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeManifestFile(f, data)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifestFile(f, out)
		if err != nil {
			t.Fatalf("%s: re-decode: %v", f, err)
		}
		if !proto.Equal(m.PB, m2.PB) || !bytes.Equal(m.TxnRaw, m2.TxnRaw) || !bytes.Equal(m.IndexSectionRaw, m2.IndexSectionRaw) {
			t.Fatalf("%s: round trip changed the manifest", f)
		}
		// The section layout (offsets, footer) matches Lance's exactly; the
		// manifest message may order map entries differently, so compare
		// the sizes and the footer bytes.
		if len(out) != len(data) || !bytes.Equal(out[len(out)-16:], data[len(data)-16:]) {
			t.Fatalf("%s: layout differs: %d vs %d bytes, footer %x vs %x", f, len(out), len(data), out[len(out)-16:], data[len(data)-16:])
		}
	}
}

func TestManifestKeepsUnknownFields(t *testing.T) {
	name, data := readTestdata(t, "appends_v2/18446744073709551609.manifest")
	m, err := DecodeManifestFile(name, data)
	if err != nil {
		t.Fatal(err)
	}
	// Field 999 (manifest), 77 (a fragment) and 55 (an index entry) are
	// unknown to our protos; they must survive decode -> encode.
	unk := protowire.AppendTag(nil, 999, protowire.BytesType)
	unk = protowire.AppendString(unk, "future-manifest-field")
	m.PB.ProtoReflect().SetUnknown(append(m.PB.ProtoReflect().GetUnknown(), unk...))
	fragUnk := protowire.AppendVarint(protowire.AppendTag(nil, 77, protowire.VarintType), 4242)
	fr := m.PB.GetFragments()[0].ProtoReflect()
	fr.SetUnknown(append(fr.GetUnknown(), fragUnk...))
	idxUnk := protowire.AppendVarint(protowire.AppendTag(nil, 55, protowire.VarintType), 5)
	raw := append(append([]byte(nil), m.IndexSectionRaw...), []byte{}...)
	// Append the unknown field inside the first IndexMetadata: rebuild the
	// section with the edited entry.
	sec := &tablepb.IndexSection{}
	if err := proto.Unmarshal(raw, sec); err != nil {
		t.Fatal(err)
	}
	im := sec.GetIndices()[0].ProtoReflect()
	im.SetUnknown(append(im.GetUnknown(), idxUnk...))
	secBytes, err := proto.Marshal(sec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeManifest(m.PB, secBytes, m.TxnRaw)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := DecodeManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	out2, err := m2.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m3, err := DecodeManifest(out2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m3.PB.ProtoReflect().GetUnknown(), unk) {
		t.Fatal("unknown manifest field lost")
	}
	if !bytes.Contains(m3.PB.GetFragments()[0].ProtoReflect().GetUnknown(), fragUnk) {
		t.Fatal("unknown fragment field lost")
	}
	if !bytes.Contains(m3.Indices.GetIndices()[0].ProtoReflect().GetUnknown(), idxUnk) {
		t.Fatal("unknown index metadata field lost")
	}
	if !bytes.Equal(m3.IndexSectionRaw, secBytes) {
		t.Fatal("index section bytes changed")
	}
}

func TestEncodeManifestExplicitZeroOffsets(t *testing.T) {
	m := &tablepb.Manifest{Version: 1}
	out, err := EncodeManifest(m, nil, []byte{0x08, 0x00})
	if err != nil {
		t.Fatal(err)
	}
	pos := binary.LittleEndian.Uint64(out[len(out)-16:])
	body := out[pos+4 : len(out)-16]
	// transaction_section = 0 must be on the wire: field 21 varint 0 = a8 01 00.
	if !bytes.Contains(body, []byte{0xa8, 0x01, 0x00}) {
		t.Fatalf("manifest body %x lacks an explicit transaction_section=0", body)
	}
	if got := string(out[len(out)-4:]); got != "LANC" || out[len(out)-6] != 2 {
		t.Fatalf("footer %x", out[len(out)-16:])
	}
}

func TestDecodeManifestCorrupt(t *testing.T) {
	name, data := readTestdata(t, "appends_v2/18446744073709551609.manifest")
	garbage := append([]byte(nil), data...)
	pos := binary.LittleEndian.Uint64(garbage[len(garbage)-16:])
	for i := pos + 4; i < uint64(len(garbage)-16); i++ {
		garbage[i] = 0xff
	}
	badSection := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(badSection[0:4], 1<<30)
	cases := map[string]struct {
		data []byte
		want string
	}{
		"truncated":         {data[:len(data)/2], "bad magic"},
		"tiny":              {data[:10], "truncated"},
		"bad magic":         {append(append([]byte(nil), data[:len(data)-4]...), "LANX"...), "bad magic"},
		"garbage protobuf":  {garbage, "decode manifest protobuf"},
		"bad position":      {append(append([]byte(nil), data[:len(data)-16]...), append(binary.LittleEndian.AppendUint64(nil, 1<<40), 0, 0, 2, 0, 'L', 'A', 'N', 'C')...), "outside the file"},
		"trailing bytes":    {append(append(append([]byte(nil), data[:len(data)-16]...), 0, 0), data[len(data)-16:]...), "does not end at the footer"},
		"bad index section": {badSection, "index section"},
	}
	for label, c := range cases {
		_, err := DecodeManifestFile(name, c.data)
		if err == nil {
			t.Errorf("%s: no error", label)
			continue
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "format: manifest ") {
			t.Errorf("%s: error %q should start with \"format: manifest \", name %s, say %q and wrap ErrCorrupt", label, err, name, c.want)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.manifest")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("LANC"))
	f.Add(append(make([]byte, 20), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 'L', 'A', 'N', 'C'))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		out, err := m.Encode()
		if err != nil {
			t.Fatalf("encode of a decoded manifest: %v", err)
		}
		if _, err := DecodeManifest(out); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		_ = ComputeLayoutStats(m.PB)
		_ = CheckWritable(m.PB)
		_ = MaxFieldID(m.PB)
	})
}
