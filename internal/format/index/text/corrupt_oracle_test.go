package text

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/uuid"
	"github.com/lanced-dev/lanced/internal/format/index"
	"github.com/lanced-dev/lanced/internal/format/index/indextest"
	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// memSegment is a segment held in memory: files by name.
type memSegment map[string][]byte

func (s memSegment) Files(context.Context) ([]index.SegmentFile, error) {
	var out []index.SegmentFile
	for n, b := range s {
		out = append(out, index.SegmentFile{Name: n, Size: int64(len(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s memSegment) Open(_ context.Context, name string) (io.ReaderAt, int64, error) {
	b, ok := s[name]
	if !ok {
		return nil, 0, os.ErrNotExist
	}
	return bytes.NewReader(b), int64(len(b)), nil
}

type discard struct{}

func (discard) Create(context.Context, string) (io.WriteCloser, error) { return nopCloser{}, nil }

type nopCloser struct{}

func (nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopCloser) Close() error                { return nil }

// TestRemapCorruptInput damages a real Lance FTS segment byte by byte: the
// remap returns an error or succeeds, and never panics or hangs.
func TestRemapCorruptInput(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}}})
	seg := indextest.Index(t, indextest.ReadManifest(t, path, oracle.Inspect(t, path, 0).Version), "body_idx")
	dir := filepath.Join(path, "_indices", indextest.UUID(t, seg.GetUuid()))
	orig := memSegment{}
	for _, n := range []string{MetadataFileName, DocsFileName(0), InvertFileName(0), TokensFileName(0)} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		orig[n] = b
	}
	rm, _ := index.RemapperFor(index.KindFTS)
	drop := func(old uint64) (uint64, bool) { return old, old%3 != 0 }
	if _, err := rm.Remap(context.Background(), index.RemapRequest{Segment: seg, Kind: index.KindFTS, Mapping: mappingFunc(drop), Old: orig, New: discard{}}); err != nil {
		t.Fatalf("undamaged: %v", err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{DocsFileName(0), InvertFileName(0), TokensFileName(0), MetadataFileName}
	failed := 0
	for i := 0; i < 120; i++ {
		s := memSegment{}
		for n, b := range orig {
			s[n] = b
		}
		n := names[i%len(names)]
		b := bytes.Clone(orig[n])
		for k := 0; k < 1+rng.IntN(8); k++ {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		s[n] = b
		_, err := rm.Remap(context.Background(), index.RemapRequest{Segment: seg, Kind: index.KindFTS, Mapping: mappingFunc(drop), Old: s, New: discard{}})
		if err == nil {
			continue
		}
		failed++
		// Every refusal is one the engine classifies: corrupt (quarantine),
		// an unknown encoding or no remapper (keep the fragments).
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, lancefile.ErrCorrupt) && !errors.Is(err, lancefile.ErrUnsupportedEncoding) && !errors.Is(err, lancefile.ErrUnsupportedVersion) && !errors.Is(err, index.ErrNoRemapper) {
			t.Fatalf("damaged %s: unclassified error %v", n, err)
		}
	}
	t.Logf("120 damaged segments: %d refused with an error, the rest remapped (damage in bytes the remap does not read or check)", failed)
}

type mappingFunc func(uint64) (uint64, bool)

func (f mappingFunc) Map(old uint64) (uint64, bool) { return f(old) }

// TestRemapAllDeletedOracle: a partition whose every document is deleted
// is written empty (no docs, no posting lists, an empty token dictionary),
// as lance's remap writes it, and real Lance loads and queries it.
func TestRemapAllDeletedOracle(t *testing.T) {
	oracle.Require(t)
	path := oracle.Build(t, "sized-4x500-v0-t12-d0", t.TempDir())
	oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "body", "type": "fts", "options": map[string]any{"withPosition": true}}})
	m := indextest.ReadManifest(t, path, oracle.Inspect(t, path, 0).Version)
	seg := indextest.Index(t, m, "body_idx")
	dir := filepath.Join(path, "_indices", indextest.UUID(t, seg.GetUuid()))
	newID := uuid.New()
	out := filepath.Join(path, "_indices", newID.String())
	res := remapSegment(t, seg, dir, out, mappingFunc(func(uint64) (uint64, bool) { return 0, false }))
	if res.Rows != 0 || res.Dropped != 2000 {
		t.Fatalf("remap %+v", res)
	}
	p := readPartition(t, out, 0)
	if len(p.docs) != 0 || len(p.rows) != 0 || len(p.tokens) != 0 || p.nextID != 0 || p.total != 0 {
		t.Fatalf("empty partition: %d docs, %d lists, %d tokens, next id %d, total %d", len(p.docs), len(p.rows), len(p.tokens), p.nextID, p.total)
	}
	written, err := indextest.Dir(out).Files(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range written {
		names = append(names, f.Name)
	}
	indextest.CommitIndexSwap(t, path, m, indextest.Swap{Old: seg, ID: newID, Files: names})
	got := search(t, path, []oracle.Op{{"op": "fts_search", "column": "body", "query": "river", "k": 100, "columns": []string{"id"}, "explain": true}})
	if len(got[0]) != 0 {
		t.Fatalf("an index with no documents finds %d rows", len(got[0]))
	}
}
