package vector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanced-dev/lanced/internal/format/lancefile"
	"github.com/lanced-dev/lanced/testenv/oracle"
)

// dropThirds keeps rows in place and deletes every address divisible by 3.
type dropThirds struct{}

func (dropThirds) Map(old uint64) (uint64, bool) { return old, old%3 != 0 }

// Index files real Lance wrote, with single bytes flipped anywhere: opening
// and remapping them returns an error or a result, never a panic.
func TestRemapCorruptInput(t *testing.T) {
	oracle.Require(t)
	for _, typ := range []string{"ivf_pq", "ivf_rq", "hnsw_sq", "hnsw_pq"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			path := oracle.Build(t, "sized-2x300-v16-t0-d0", t.TempDir())
			res := oracle.RunOps(t, path, []oracle.Op{{"op": "create_index", "column": "vec", "type": typ, "options": map[string]any{"numPartitions": 2, "numSubVectors": 4}}})
			var r struct {
				Indices []struct {
					UUID string `json:"indexUuid"`
				} `json:"indices"`
			}
			if err := json.Unmarshal(res[0], &r); err != nil || len(r.Indices) != 1 {
				t.Fatalf("create_index result %s: %v", res[0], err)
			}
			dir := filepath.Join(path, "_indices", r.Indices[0].UUID)
			idx, err := os.ReadFile(filepath.Join(dir, IndexFileName))
			if err != nil {
				t.Fatal(err)
			}
			aux, err := os.ReadFile(filepath.Join(dir, AuxiliaryFileName))
			if err != nil {
				t.Fatal(err)
			}
			if err := remapBytes(idx, aux); err != nil {
				t.Fatalf("intact files: %v", err)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			failed, tries := 0, 300
			if typ[:4] == "hnsw" {
				tries = 40 // each remap rebuilds the graphs
			}
			for i := 0; i < tries; i++ {
				ci, ca := bytes.Clone(idx), bytes.Clone(aux)
				target := ca
				if i%2 == 0 {
					target = ci
				}
				// Flip a byte, half of the time in the metadata tail.
				at := rng.IntN(len(target))
				if rng.IntN(2) == 0 {
					at = len(target) - 1 - rng.IntN(min(len(target), 1024))
				}
				target[at] ^= byte(1 + rng.IntN(255))
				if err := remapBytes(ci, ca); err != nil {
					failed++
				}
			}
			t.Logf("%s: %d of %d corrupted inputs refused with an error, the rest remapped", typ, failed, tries)
		})
	}
}

// remapBytes opens and remaps a segment from memory; a panic is a test
// failure (it propagates).
func remapBytes(idx, aux []byte) error {
	fi, err := lancefile.Open(bytes.NewReader(idx), int64(len(idx)), IndexFileName)
	if err != nil {
		return err
	}
	fa, err := lancefile.Open(bytes.NewReader(aux), int64(len(aux)), AuxiliaryFileName)
	if err != nil {
		return err
	}
	x, err := OpenIndexFile(fi)
	if err != nil {
		return err
	}
	s, err := OpenStorageFile(fa)
	if err != nil {
		return err
	}
	if _, err := Remap(context.Background(), x, s, dropThirds{}, io.Discard, io.Discard, 1); err != nil {
		return fmt.Errorf("remap: %w", err)
	}
	return nil
}
